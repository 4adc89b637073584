"""Writing a GGUF file from a model folder (`tfcli convert FOLDER OUT.gguf --quantize TYPE`): the other
direction of writer.py, laid out as llama.cpp's convert_hf_to_gguf.py lays out the same model, so that
llama.cpp, transformers and tfcli (`-m OUT.gguf`) all read it.

    header     "GGUF", version 3 (u32), tensor count (u64), metadata count (u64); little-endian throughout
    metadata   key (u64 length + UTF-8), value type (u32), value; an array: item type, count, items
    tensors    name, dimensions (u32 count, then u64 each in ggml's order: the row length first),
               ggml type (u32), offset in the data section (u64)
    data       each tensor's bytes, every one starting at a multiple of 32 (general.alignment's default)

(ggml's docs/gguf.md; gguf-py's GGUFWriter writes the same bytes.) The matrices are quantized
with engine/formats.py's quantizers, gguf-py's blocks bit for bit. As llama.cpp's converter does,
vectors (norms, biases) stay F32, and a matrix whose rows are not whole blocks of 32 is written in
F16. Q and K rows of a family whose GGUF permutes them (Llama) get llama.cpp's RoPE order back.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tfcli.engine import ops
from tfcli.engine.checkpoint import Checkpoint
from tfcli.engine.config import ModelConfig
from tfcli.engine.errors import CheckpointError, ResourceError, TokenizerError, UsageError, shown
from tfcli.engine.families import family, read_config_json
from tfcli.engine.files import TEMPLATE_BYTES, TOKENIZER_BYTES, read_small_text
from tfcli.engine.formats import BLOCK_TYPES, quantize
from tfcli.engine.gguf_weights import INDEX_NAME as GGUF_INDEX
from tfcli.engine.loader import read_checkpoint

from ..lock import partial_name, remove_dead_partials
from ..target import os_error
from .family import EMBEDDING, LM_HEAD, expected_shape, permute_rope_rows, transform
from .tokenizer import PRE_TOKENIZERS
from .writer import Progress

# --quantize: the ggml type of the matrices, and llama.cpp's general.file_type for the file (llama.h
# `llama_ftype`: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7).
KINDS: dict[str, tuple[int, int]] = {"f32": (0, 0), "f16": (1, 1), "q8_0": (8, 7), "q4_0": (2, 2)}
WRITABLE = ("llama", "qwen2")  # the families written so far
ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT: no general.alignment key is written
QK = 32  # weights per Q8_0 / Q4_0 block
QUANTIZATION_VERSION = 2  # ggml's GGML_QNT_VERSION, which llama.cpp's converter writes into every file
# Keys llama.cpp's converter writes only for some families (convert_hf_to_gguf.py, LlamaModel.set_gguf_parameters).
_FAMILY_KEYS = {"llama": ("vocab_size", "rope.dimension_count")}

# GGUF value types (gguf.md, `gguf_metadata_value_type`).
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
_SCALARS = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}

# llama.cpp token types (llama.h `llama_token_type`).
_NORMAL, _CONTROL, _USER_DEFINED, _UNUSED = 1, 3, 4, 5


@dataclass(frozen=True)
class Entry:
    """One tensor of the file."""

    name: str  # llama.cpp's name
    hf: str  # the folder's key ("" for a tensor made here: Llama 3's rope_freqs)
    shape: tuple[int, ...]  # NumPy order: [rows, cols] or [n]
    type_id: int  # ggml type

    @property
    def nbytes(self) -> int:
        bt = BLOCK_TYPES[self.type_id]
        return int(np.prod(self.shape)) // bt.weights * bt.nbytes


@dataclass(frozen=True)
class GGUFPlan:
    """What the file will hold, all of it built and checked before anything is written."""

    family: ModuleType
    config: ModelConfig
    metadata: list[tuple[str, int, Any]]  # (key, value type, value); an array's value: (item type, items)
    tensors: list[Entry]
    widened: list[str]  # matrices written in F16: their rows are not whole blocks


@dataclass(frozen=True)
class WriteResult:
    path: Path
    n_params: int
    nbytes: int  # the file's size
    types: dict[str, int]  # ggml type name -> how many tensors have it
    widened: list[str]  # matrices written in F16 (rows not whole blocks)
    row: int  # the row length that made them so (0: none)


# --- the plan: names, types, metadata -----------------------------------------------------------------


def source_folder(folder: Path) -> Checkpoint:
    """The model folder opened for writing as a GGUF; a folder that runs a GGUF in place is refused."""
    folder = Path(folder)
    if (folder / GGUF_INDEX).exists():
        raise CheckpointError(
            f"{folder} runs a GGUF file in place: its weights are quantized already",
            "write a GGUF from a float32, float16 or bf16 folder (tfcli convert FILE.gguf DIR makes one)",
        )
    return read_checkpoint(folder)


def plan_gguf(ckpt: Checkpoint, kind: str) -> GGUFPlan:
    """Refuse, before any work, what cannot be written; returns what will be."""
    c = ckpt.config
    fam = family(c.family)
    if fam.NAME not in WRITABLE or fam.GGUF is None:
        raise CheckpointError(f"{ckpt.path.name} is a {fam.NAME} model, which tfcli does not write as a GGUF yet",
                              f"tfcli writes: {', '.join(WRITABLE)}")
    scaling = getattr(c.extra, "scaling", None)
    unwritten = [
        what for what, found in ((f"RoPE scaling {scaling.kind!r}" if scaling else "",
                                  scaling is not None and scaling.kind != "llama3"),
                                 ("sliding windows", bool(c.windows)),
                                 ("RoPE on part of each head", 0 < c.rotary_dim != c.head_dim)) if found
    ]  # fmt: skip
    if unwritten:
        raise CheckpointError(f"{ckpt.path.name}: {unwritten[0]} is not written to GGUF yet",
                              "tfcli writes plain RoPE and Llama 3's scaling")
    hf_config = _shape_config(c)
    tensors, widened = [], []
    for gname, hname in _names(fam, c):
        shape = expected_shape(hname, hf_config)
        if hname not in ckpt.tensors:
            raise CheckpointError(f"tensor {hname!r} is missing from {ckpt.path.name}",
                                  f"the folder is not a complete {fam.NAME} model")
        if ckpt.tensors.shape(hname) != shape:
            raise CheckpointError(f"tensor {hname!r} has shape {list(ckpt.tensors.shape(hname))} but config.json "
                                  f"implies {list(shape)}", "config.json and the weights disagree")
        type_id = _type_of(shape, kind)
        if len(shape) == 2 and KINDS[kind][0] not in (0, 1) and type_id == 1:
            widened.append(gname)
        tensors.append(Entry(gname, hname, shape, type_id))
    known = {e.hf for e in tensors} | ({LM_HEAD} if c.tie_embeddings else set())  # a saved copy of a tied matrix
    extra = [n for n in ckpt.tensors.names if n not in known and not n.endswith("rotary_emb.inv_freq")]
    if extra:
        raise CheckpointError(f"tensor {extra[0]!r} of {ckpt.path.name} has no llama.cpp name in a {fam.NAME} model",
                              f"the folder is not a plain {fam.NAME} model")
    if scaling is not None:  # Llama 3.1+: llama.cpp keeps the divisor of each frequency as a tensor, not config keys
        tensors.append(Entry("rope_freqs.weight", "", (c.head_dim // 2,), 0))
    metadata = _model_metadata(fam, c, ckpt.path.name, kind) + vocabulary_metadata(ckpt.path, c)
    return GGUFPlan(fam, c, metadata, tensors, widened)


def _shape_config(c: ModelConfig) -> dict[str, Any]:
    """The config.json entries family.expected_shape reads."""
    return {
        "hidden_size": c.d_model, "intermediate_size": c.d_ff, "vocab_size": c.vocab_size, "head_dim": c.head_dim,
        "num_attention_heads": c.n_head, "num_key_value_heads": c.n_kv_head,
    }  # fmt: skip


def _names(fam: ModuleType, c: ModelConfig) -> list[tuple[str, str]]:
    """(GGUF name, HF key) of every tensor in model order: the family's table, each per-layer name
    once per layer, the output matrix only when not tied (family.tensor_names, the other way)."""
    table = fam.GGUF.names.items()
    whole = [(gn, hn) for gn, hn in table if "{i}" not in gn and not (hn == LM_HEAD and c.tie_embeddings)]
    layers = [(gn.format(i=i), hn.format(i=i)) for i in range(c.n_layer) for gn, hn in table if "{i}" in gn]
    return [t for t in whole if t[1] == EMBEDDING] + layers + [t for t in whole if t[1] != EMBEDDING]


def _type_of(shape: tuple[int, ...], kind: str) -> int:
    """A tensor's ggml type: vectors in F32; a matrix in the asked type, or F16 when its rows are not
    whole blocks (convert_hf_to_gguf.py: gguf.QuantError, "falling back to F16")."""
    type_id = KINDS[kind][0]
    if len(shape) == 1:
        return 0
    if type_id in (0, 1) or shape[-1] % QK == 0:
        return type_id
    return 1


def _model_metadata(fam: ModuleType, c: ModelConfig, name: str, kind: str) -> list[tuple[str, int, Any]]:
    """general.* and the `{arch}.` hyperparameters, as convert_hf_to_gguf.py's TextModel writes them."""
    arch = fam.GGUF.arch
    keys = [
        ("general.architecture", STRING, arch),
        ("general.type", STRING, "model"),
        ("general.name", STRING, name),
        ("general.file_type", U32, KINDS[kind][1]),
        ("general.quantization_version", U32, QUANTIZATION_VERSION),
        (f"{arch}.block_count", U32, c.n_layer),
        (f"{arch}.context_length", U32, c.n_ctx),
        (f"{arch}.embedding_length", U32, c.d_model),
        (f"{arch}.feed_forward_length", U32, c.d_ff),
        (f"{arch}.attention.head_count", U32, c.n_head),
        (f"{arch}.attention.head_count_kv", U32, c.n_kv_head),
        (f"{arch}.attention.key_length", U32, c.head_dim),
        (f"{arch}.attention.value_length", U32, c.head_dim),
        (f"{arch}.rope.freq_base", F32, c.rope_theta),
        (f"{arch}.attention.layer_norm_rms_epsilon", F32, c.norm_eps),
    ]
    values = {"vocab_size": c.vocab_size, "rope.dimension_count": c.head_dim}
    return keys + [(f"{arch}.{k}", U32, values[k]) for k in _FAMILY_KEYS.get(fam.NAME, ())]


# --- the tokenizer: tokenizer.json -> tokenizer.ggml.* ----------------------------------------------------

# A pipeline's name when several of llama.cpp's names split text alike (tokenizer.py, PRE_TOKENIZERS):
# the one llama.cpp's converter gives the model it was made for.
_PREFERRED = ("gpt-2", "smollm", "llama-bpe", "qwen2", "qwen35")


def _pre_name(pre: Any) -> str | None:
    """llama.cpp's name for a tokenizer.json pre-tokenizer tfcli knows, or None. ByteLevel's
    trim_offsets changes only offsets, not tokens, so it is left out of the comparison."""

    def canonical(p: Any) -> str:
        def strip(x: Any) -> Any:
            if isinstance(x, dict):
                return {k: strip(v) for k, v in x.items() if k != "trim_offsets"}
            return [strip(v) for v in x] if isinstance(x, list) else x

        return json.dumps(strip(p), sort_keys=True)

    target = canonical(pre)
    names = list(_PREFERRED) + [n for n in PRE_TOKENIZERS if n not in _PREFERRED]
    return next((n for n in names if canonical(PRE_TOKENIZERS[n]) == target), None)


def _looks_special(token: str) -> bool:
    """convert_hf_to_gguf.py's does_token_look_special, for byte-level vocabularies: added tokens
    like <|im_start|> are control tokens even when tokenizer.json does not mark them special."""
    return (token.startswith("<|") and token.endswith("|>")) or (token.startswith("<｜") and token.endswith("｜>"))


def _read_json(path: Path, limit: int, error: type) -> Any:
    try:
        return json.loads(read_small_text(path, limit, error))
    except (ValueError, RecursionError):
        raise error(f"{path} is not valid JSON", "fix the file, or use the one saved with the model") from None


def vocabulary_metadata(folder: Path, c: ModelConfig) -> list[tuple[str, int, Any]]:
    """tokenizer.ggml.* for a byte-level BPE tokenizer.json (GPT-2, Llama 3, SmolLM2, Qwen2), as
    convert_hf_to_gguf.py's _set_vocab_gpt2 writes it: every id below the model's vocabulary size
    (ids the tokenizer lacks as [PAD{id}], unused), added tokens as control or user-defined, the
    merges, the special ids and BOS/EOS flags of tokenizer_config.json (config.json's ids where it
    has none), and the chat template."""
    path = folder / "tokenizer.json"
    if not path.exists():
        raise TokenizerError(f"{folder} has no tokenizer.json",
                             "a GGUF holds the tokenizer: the folder needs its tokenizer.json")
    tj = _read_json(path, TOKENIZER_BYTES, TokenizerError)
    model = tj.get("model") if isinstance(tj, dict) else None
    decoder = tj.get("decoder") if isinstance(tj, dict) else None
    if (not isinstance(model, dict) or model.get("type") != "BPE"
            or not isinstance(decoder, dict) or decoder.get("type") != "ByteLevel"):
        raise TokenizerError(f"{path}: only byte-level BPE tokenizers (GPT-2, Llama 3, SmolLM2, Qwen2) "
                             "are written to GGUF so far", "a SentencePiece tokenizer cannot be written yet")
    pre = _pre_name(tj.get("pre_tokenizer"))
    if pre is None:
        raise TokenizerError(f"{path}: its pre-tokenizer is not one llama.cpp knows by a name tfcli knows",
                             f"tfcli knows: {', '.join(sorted(PRE_TOKENIZERS))}")
    vocab, added = model.get("vocab"), tj.get("added_tokens") or []
    if (not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values())
            or not isinstance(added, list)):
        raise TokenizerError(f"{path} has no vocabulary of token ids", "use the tokenizer.json saved with the model")
    by_id = {i: t for t, i in vocab.items()}
    special: dict[int, bool] = {}
    for a in added:
        if isinstance(a, dict) and isinstance(a.get("id"), int) and isinstance(a.get("content"), str):
            by_id[a["id"]], special[a["id"]] = a["content"], bool(a.get("special"))
    if max(by_id, default=-1) >= c.vocab_size:
        raise TokenizerError(f"{path}: token id {max(by_id):,} is beyond the model's {c.vocab_size:,} embeddings",
                             "the tokenizer and the model do not belong together")
    tokens, types = [], []
    for i in range(c.vocab_size):
        token = by_id.get(i)
        tokens.append(f"[PAD{i}]" if token is None else token)
        kind = (_UNUSED if token is None else _NORMAL if i not in special
                else _CONTROL if special[i] or _looks_special(token) else _USER_DEFINED)
        types.append(kind)
    merges = []
    for m in model.get("merges") or []:
        if isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) and " " not in p for p in m):
            m = " ".join(m)
        if not isinstance(m, str) or m.count(" ") != 1:
            raise TokenizerError(f"{path}: the merge {shown(m)} is not two byte-level pieces",
                                 "use the tokenizer.json saved with the model")
        merges.append(m)
    keys = [
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, pre),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
    ]
    tok_cfg_path = folder / "tokenizer_config.json"
    tok_cfg = _read_json(tok_cfg_path, TEMPLATE_BYTES, TokenizerError) if tok_cfg_path.exists() else {}
    tok_cfg = tok_cfg if isinstance(tok_cfg, dict) else {}
    ids = {t: i for i, t in enumerate(tokens)}
    raw = read_config_json(folder / "config.json")
    for what, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"),
                      ("pad", "padding_token_id")):
        i = _special_id(tok_cfg.get(f"{what}_token"), ids,
                        raw.get(f"{what}_token_id") if isinstance(raw, dict) else None)
        if i is not None and 0 <= i < len(tokens):
            keys.append((f"tokenizer.ggml.{key}", U32, i))
    for flag, adds in (("add_bos_token", tok_cfg.get("add_bos_token")),
                       ("add_eos_token", tok_cfg.get("add_eos_token"))):
        if not isinstance(adds, bool):
            adds = _post_processor_adds(tj.get("post_processor"), "bos" if flag == "add_bos_token" else "eos",
                                        tokens, keys)
        if adds is not None:
            keys.append((f"tokenizer.ggml.{flag}", BOOL, adds))
    from tfcli.engine.chat import load_chat_template

    template = load_chat_template(folder)
    if template is not None:
        keys.append(("tokenizer.chat_template", STRING, template.source))
    return keys


def _special_id(token: Any, ids: dict[str, int], fallback: Any) -> int | None:
    """A special token's id: tokenizer_config.json's token ("<|im_end|>" or {"content": ...}), else
    config.json's id (the first of a list), as gguf-py's SpecialVocab looks them up."""
    if isinstance(token, dict):
        token = token.get("content")
    if isinstance(token, str) and token in ids:
        return ids[token]
    if isinstance(fallback, list):
        fallback = fallback[0] if fallback else None
    return fallback if isinstance(fallback, int) and not isinstance(fallback, bool) else None


def _post_processor_adds(post: Any, what: str, tokens: list[str], keys: list) -> bool | None:
    """Whether tokenizer.json's TemplateProcessing puts the BOS first ("bos") or the EOS last ("eos")
    of a single sequence (Llama 3's adds <|begin_of_text|>); None when it says nothing."""
    if (not isinstance(post, dict) or post.get("type") != "TemplateProcessing"
            or not isinstance(post.get("single"), list)):
        return None
    single = post["single"]
    if not single:
        return None
    end = single[0] if what == "bos" else single[-1]
    key = f"tokenizer.ggml.{what}_token_id"
    i = next((v for k, _, v in keys if k == key), None)
    marked = end.get("SpecialToken", {}).get("id") if isinstance(end, dict) else None
    return marked is not None and i is not None and tokens[i] == marked


# --- writing ----------------------------------------------------------------------------------------------


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype: int, value: Any) -> bytes:
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        itype, items = value
        head = struct.pack("<IQ", itype, len(items))
        if itype == STRING:
            return head + b"".join(_string(s) for s in items)
        return head + np.asarray(items, dtype=_SCALARS[itype]).tobytes()
    return struct.pack(_SCALARS[vtype], value)


def header(plan: GGUFPlan) -> bytes:
    """Everything before the tensor data: the header, the metadata, the tensor table, padding."""
    parts = [b"GGUF", struct.pack("<IQQ", 3, len(plan.tensors), len(plan.metadata))]
    for key, vtype, value in plan.metadata:
        parts += [_string(key), struct.pack("<I", vtype), _value(vtype, value)]
    offset = 0
    for e in plan.tensors:
        dims = e.shape[::-1]  # ggml's order: ne[0] is the row length
        parts += [_string(e.name), struct.pack(f"<I{len(dims)}Q", len(dims), *dims),
                  struct.pack("<IQ", e.type_id, offset)]
        offset += e.nbytes + _pad(e.nbytes)
    head = b"".join(parts)
    return head + bytes(_pad(len(head)))


def _pad(n: int) -> int:
    return -n % ALIGNMENT


def tensor_data(ckpt: Checkpoint, plan: GGUFPlan) -> Iterator[tuple[Entry, np.ndarray]]:
    """Each tensor's bytes (uint8, float16 or float32 array), one at a time, in the plan's order."""
    c, hf_config = plan.config, _shape_config(plan.config)
    hf_config["num_hidden_layers"] = c.n_layer
    for e in plan.tensors:
        if not e.hf:  # rope_freqs: what each frequency is divided by (llama3_factors, as llama.cpp writes it)
            s = c.extra.scaling
            from tfcli.engine.families.llama import llama3_factors

            inv_freq = ops.rope_frequencies(c.head_dim, c.rope_theta)  # [Dh/2]
            yield e, llama3_factors(inv_freq, s.factor, s.low_freq_factor, s.high_freq_factor,
                                    s.original_context).astype("<f4")
            continue
        w = ckpt.tensors.get(e.hf, e.shape)  # [rows, cols] or [n] float32
        heads = transform(plan.family, e.hf, hf_config).get("heads")
        if heads:
            w = permute_rope_rows(w, heads)
        if e.type_id == 0:
            yield e, np.ascontiguousarray(w, dtype="<f4")
        elif e.type_id == 1:
            yield e, np.asarray(w, dtype="<f2")
        else:
            kind = next(k for k, (t, _) in KINDS.items() if t == e.type_id)
            yield e, quantize(w, kind)[1]


def write_gguf(folder: Path, out: Path, kind: str, *, replace: bool = False,
               progress: Progress | None = None) -> WriteResult:
    """Write the model folder `folder` as the GGUF file `out`, its matrices in `kind` (q8_0, q4_0,
    f16, f32). Everything is checked first; the file is written under a hidden name beside `out`
    and renamed into place at the end, so that an error, Ctrl-C or SIGTERM leaves nothing behind.
    An existing `out` is replaced only with `replace`, and only if it is a file."""
    folder, out = Path(folder), Path(out)
    if kind not in KINDS:
        raise UsageError(f"--quantize must be one of {', '.join(KINDS)}, not {shown(kind)}")
    ckpt = source_folder(folder)
    plan = plan_gguf(ckpt, kind)
    _check_out(folder, out, replace)
    head = header(plan)
    total = len(head) + sum(e.nbytes + _pad(e.nbytes) for e in plan.tensors)
    parent = Path(os.path.abspath(out)).parent
    try:
        free = shutil.disk_usage(parent).free
    except OSError as e:
        raise os_error(e, out) from None
    if free < total + 50_000_000:
        raise ResourceError(f"writing {out.name} needs about {total / 1e6:,.0f} MB of disk space; {parent} has "
                            f"{free / 1e6:,.0f} MB free", "free some space or choose another place")
    remove_dead_partials(out)
    tmp = parent / f"{partial_name(out)}{os.getpid()}-{secrets.token_hex(3)}"
    try:
        with open(tmp, "xb") as f:
            f.write(head)
            done = len(head)
            for e, data in tensor_data(ckpt, plan):
                f.write(memoryview(np.ascontiguousarray(data)).cast("B"))
                f.write(bytes(_pad(e.nbytes)))
                done += e.nbytes + _pad(e.nbytes)
                if progress:
                    progress("quantize", done, total)
        _check_out(folder, out, replace)  # nothing appeared there meanwhile that may not be replaced
        os.replace(tmp, out)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno is not None:  # disk full, quota, read-only, I/O error
            raise os_error(e, out) from None
        raise
    types = Counter(BLOCK_TYPES[e.type_id].name for e in plan.tensors)
    n_params = sum(int(np.prod(e.shape)) for e in plan.tensors if e.hf)
    row = next((e.shape[-1] for e in plan.tensors if e.name in plan.widened), 0)
    return WriteResult(out, n_params, total, dict(types), plan.widened, row)


def _check_out(folder: Path, out: Path, replace: bool) -> None:
    """Refuse an OUT that may not become the new file: a folder, a link, the inside of the model
    folder, or an existing file without --force."""
    if out.suffix.lower() != ".gguf":
        raise UsageError(f"{out} does not end in .gguf", "name the GGUF file to write, e.g. model.q8_0.gguf")
    if out.is_symlink():
        raise CheckpointError(f"{out} is a symbolic link", "give a new file name, or the file itself")
    if out.is_dir():
        raise CheckpointError(f"{out} is a folder", "give the name of the GGUF file to write")
    if Path(os.path.realpath(folder)) in Path(os.path.realpath(out)).parents:
        raise CheckpointError(f"{out} is inside the model folder {folder}", "write the GGUF file elsewhere")
    if out.exists() and not replace:
        raise CheckpointError(f"{out} already exists", "choose another name, or pass --force to replace it")
