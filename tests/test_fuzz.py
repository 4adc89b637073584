"""Fuzzing the readers of untrusted files: the safetensors header reader, the GGUF reader and
converter, the config.json parser, the tokenizer.json loader (and encoding with what it loaded) and
the chat template renderer. On random and mutated input each one either succeeds (and
then what it returns is consistent) or raises TfcliError; nothing else escapes, nothing hangs, and
reading never allocates much more than the file itself could justify.

Hypothesis runs derandomized with bounded examples (seconds, the same cases in every run); next to
it, deterministic mutations of real small files: truncation at every boundary, bit flips.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfcli.store.manifest import verify_manifest
from tfcli.engine.families import config_from_hf, load_config
from tfcli.engine.errors import TfcliError
from tfcli.engine.weightfile import DTYPES, read_header

from conftest import TINY_GPT2, TINY_LLAMA

FUZZ = settings(
    max_examples=150, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def outcome(fn, *args):
    """fn(*args), or the TfcliError it raised; any other exception fails the test with its traceback."""
    try:
        return fn(*args)
    except TfcliError as e:
        assert "\n" not in str(e), str(e)  # one line
        return e


def peak_allocation(fn, *args) -> tuple[object, int]:
    """outcome(fn, *args) and the most memory Python and NumPy held at once during it."""
    tracemalloc.start()
    try:
        result = outcome(fn, *args)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def justified(file_size: int) -> int:
    """What reading a file may hold at once: a small multiple of its size (Python objects for the
    header's JSON or metadata are larger than their bytes), plus a constant."""
    return 64 * file_size + 2_000_000


# --- safetensors -------------------------------------------------------------------------------------


def _safetensors(header: bytes, body: bytes, n: int | None = None) -> bytes:
    return (len(header) if n is None else n).to_bytes(8, "little") + header + body


def _check_header(path: Path) -> None:
    """read_header succeeds with a consistent result or raises TfcliError, within its memory."""
    size = path.stat().st_size
    result, peak = peak_allocation(read_header, path)
    assert peak <= justified(size), (peak, size)
    if isinstance(result, TfcliError):
        return
    _metadata, tensors = result
    n = int.from_bytes(path.read_bytes()[:8], "little")
    spans = []
    for t in tensors.values():
        assert 8 + n <= t.start <= t.end <= size
        assert t.numel * DTYPES[t.dtype].itemsize == t.end - t.start
        spans.append((t.start, t.end))
    spans = sorted(s for s in spans if s[1] > s[0])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


@FUZZ
@given(data=st.binary(max_size=300))
def test_safetensors_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.getbasetemp() / "random.safetensors"
    path.write_bytes(data)
    _check_header(path)


_dims = st.one_of(st.integers(0, 8), st.integers(-3, 10**13), st.sampled_from([2**31, 2**63, 10**30]))
_offsets = st.one_of(st.integers(-8, 300), st.integers(-(10**13), 10**13))
_entry = st.one_of(
    st.fixed_dictionaries(
        {
            "dtype": st.one_of(st.sampled_from(sorted(DTYPES)), st.sampled_from(["F8", "", "f32", 1, None, [1]])),
            "shape": st.one_of(st.lists(_dims, max_size=4), st.sampled_from([None, "4", 4, [1.0], [True]])),
            "data_offsets": st.one_of(st.lists(_offsets, min_size=2, max_size=2), st.lists(_offsets, max_size=3), st.just("0,4")),
        }
    ),
    st.sampled_from([None, 1, "x", [], {}]),
)


@FUZZ
@given(
    entries=st.dictionaries(st.text(max_size=12), _entry, max_size=6),
    metadata=st.one_of(st.none(), st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2), st.just([1])),
    body=st.integers(0, 256),
    length_delta=st.sampled_from([0, 0, 0, 1, -1, 10**6]),
)
def test_safetensors_structured_headers(tmp_path_factory, entries, metadata, body, length_delta):
    header = dict(entries)
    if metadata is not None:
        header["__metadata__"] = metadata
    head = json.dumps(header).encode()
    path = tmp_path_factory.getbasetemp() / "structured.safetensors"
    path.write_bytes(_safetensors(head, bytes(body), n=max(0, len(head) + length_delta)))
    _check_header(path)


def _real_safetensors() -> tuple[bytes, int, list[tuple[int, int]]]:
    data = (TINY_GPT2 / "model.safetensors").read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    spans = [tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__"]
    return data, n, spans


def test_safetensors_truncated_at_every_boundary(tmp_path):
    """Cut before and after every field that matters: the length, the header, each tensor."""
    data, n, spans = _real_safetensors()
    cuts = set(range(0, 17)) | {8 + n + d for d in (-2, -1, 0, 1)}
    for begin, end in spans:
        cuts |= {8 + n + begin, 8 + n + begin + 1, 8 + n + end - 1}
    path = tmp_path / "model.safetensors"
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        path.write_bytes(data[:cut])
        with pytest.raises(TfcliError):
            read_header(path)


def test_safetensors_bit_flips_load_or_fail_cleanly(tmp_path):
    """Every bit of the length field, and bytes across the whole header flipped: the folder then
    either loads into a model or fails with a TfcliError."""
    from tfcli.engine.loader import build, read_checkpoint

    data, n, _ = _real_safetensors()
    folder = tmp_path / "model"
    shutil.copytree(TINY_GPT2, folder)
    path = folder / "model.safetensors"
    flips = [(i // 8, 1 << (i % 8)) for i in range(64)]
    flips += [(i, mask) for i in range(8, 8 + n, 11) for mask in (0x01, 0x20, 0xFF)]
    outcomes = {"loaded": 0, "refused": 0}
    for offset, mask in flips:
        mutated = bytearray(data)
        mutated[offset] ^= mask
        path.write_bytes(bytes(mutated))
        result = outcome(lambda: build(read_checkpoint(folder)))
        outcomes["refused" if isinstance(result, TfcliError) else "loaded"] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == len(flips)


# --- GGUF --------------------------------------------------------------------------------------------

gguf = pytest.importorskip("gguf")

from tfcli.store import gguf as tg  # noqa: E402

# GGUF value types (gguf.md): struct formats of the scalars, then STRING and ARRAY.
_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


def _put(out: bytearray, vtype: int, value) -> None:
    if vtype in _FMT:
        out += struct.pack(_FMT[vtype], value)
    elif vtype == STRING:
        raw = value.encode("utf-8", "surrogatepass")
        out += struct.pack("<Q", len(raw)) + raw
    else:
        etype, items = value
        out += struct.pack("<IQ", etype, len(items))
        for item in items:
            _put(out, etype, item)


def gguf_bytes(metadata: list[tuple[str, int, object]], tensors: list[tuple[str, list[int], int, bytes]], alignment: int = 32) -> bytes:
    """A GGUF v3 file: metadata (key, type, value; an array's value is (element type, items)) and
    tensors (name, dims in ggml order, ggml type, raw bytes), each aligned as llama.cpp aligns them."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, vtype, value in metadata:
        _put(out, STRING, key)
        out += struct.pack("<I", vtype)
        _put(out, vtype, value)
    offset, blobs = 0, []
    for name, dims, ttype, raw in tensors:
        _put(out, STRING, name)
        out += struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ttype, offset)
        blobs.append(raw + bytes(-len(raw) % alignment))
        offset += len(blobs[-1])
    out += bytes(-len(out) % alignment)
    return bytes(out) + b"".join(blobs)


@pytest.fixture(scope="module")
def tiny_llama_gguf(tmp_path_factory):
    """The tiny Llama as (metadata, tensors) for gguf_bytes, read back from a file the gguf package wrote."""
    from gguf import GGUFReader
    from gguf.constants import GGUFValueType as T

    from test_gguf import MIXED, write_gguf

    path = write_gguf(tmp_path_factory.mktemp("fuzz") / "tiny.gguf", types=MIXED)
    reader = GGUFReader(path)
    metadata = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        types = [int(t) for t in field.types]
        value = field.contents()
        if types[0] == T.ARRAY:
            value = (types[1], value)
        metadata.append((key, types[0], value))
    tensors = [(t.name, [int(d) for d in t.shape], int(t.tensor_type), bytes(t.data.reshape(-1).view("u1"))) for t in reader.tensors]
    return metadata, tensors


def test_gguf_writer_here_round_trips(tiny_llama_gguf, tmp_path):
    """The serializer the fuzzing uses writes what the gguf package wrote: it converts."""
    path = tmp_path / "copy.gguf"
    path.write_bytes(gguf_bytes(*tiny_llama_gguf))
    assert tg.convert(path, tmp_path / "out").n_params > 0


def _convert(path: Path, out: Path):
    shutil.rmtree(out, ignore_errors=True)
    return tg.convert(path, out, replace=True)


def _check_gguf(path: Path, out: Path) -> object:
    """Read and convert: a folder, or a TfcliError; memory within what the file justifies."""
    result, peak = peak_allocation(_convert, path, out)
    assert peak <= justified(path.stat().st_size), (peak, path.stat().st_size)
    if not isinstance(result, TfcliError):
        assert verify_manifest(out) == []
    return result


@FUZZ
@given(tail=st.binary(max_size=400), version=st.sampled_from([2, 3, 3, 4]))
def test_gguf_random_bytes_after_the_magic(tmp_path_factory, tail, version):
    base = tmp_path_factory.getbasetemp()
    path = base / "random.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<I", version) + tail)
    _check_gguf(path, base / "random-out")


def _scalar(vtype: int):
    return {
        0: st.integers(0, 255), 1: st.integers(-128, 127), 2: st.integers(0, 2**16 - 1), 3: st.integers(-(2**15), 2**15 - 1),
        4: st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2, 3, 6, 96, 2**24, 2**24 + 1])),
        5: st.integers(-(2**31), 2**31 - 1), 10: st.integers(0, 2**64 - 1), 11: st.integers(-(2**63), 2**63 - 1),
        6: st.floats(width=32), 12: st.floats(), 7: st.booleans(), STRING: st.text(max_size=12),
    }[vtype]  # fmt: skip


@st.composite
def typed_values(draw, depth: int = 0):
    vtype = draw(st.sampled_from(sorted(_FMT) + [STRING] + ([ARRAY] if depth < 2 else [])))
    if vtype != ARRAY:
        return vtype, draw(_scalar(vtype))
    etype = draw(st.sampled_from(sorted(_FMT) + [STRING] + ([ARRAY] if depth < 1 else [])))
    if etype == ARRAY:
        items = draw(st.lists(typed_values(depth + 2).filter(lambda tv: tv[0] == ARRAY).map(lambda tv: tv[1]), max_size=3))
    else:
        items = draw(st.lists(_scalar(etype), max_size=5))
    return ARRAY, (etype, items)


_KEYS = [
    "general.architecture", "general.alignment", "llama.block_count", "llama.context_length", "llama.embedding_length",
    "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.freq_base",
    "llama.attention.layer_norm_rms_epsilon", "llama.rope.dimension_count", "llama.attention.key_length", "llama.vocab_size",
    "llama.expert_count", "llama.rope.scaling.type", "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template",
]  # fmt: skip


@FUZZ
@given(
    changes=st.lists(st.tuples(st.sampled_from(_KEYS), st.one_of(st.none(), typed_values())), min_size=1, max_size=3),
    tensor_change=st.one_of(
        st.none(),
        st.tuples(st.integers(0, 29), st.sampled_from(["dims", "type", "name", "drop", "twice"]), st.lists(st.integers(0, 2**64 - 1), max_size=5), st.integers(0, 40)),
    ),
)
def test_gguf_mutated_metadata_and_tensors(tmp_path_factory, tiny_llama_gguf, changes, tensor_change):
    """The tiny Llama with metadata values replaced by values of any type (or deleted), and a
    tensor's dims, type or name changed: conversion gives a folder or a TfcliError."""
    metadata, tensors = list(tiny_llama_gguf[0]), list(tiny_llama_gguf[1])
    for key, new in changes:
        metadata = [m for m in metadata if m[0] != key]
        if new is not None:
            metadata.append((key, new[0], new[1]))
    if tensor_change is not None:
        i, what, dims, ttype = tensor_change
        name, old_dims, old_type, raw = tensors[i]
        if what == "drop":
            del tensors[i]
        elif what == "twice":
            tensors.append(tensors[i])
        else:
            tensors[i] = (
                name + ("x" if what == "name" else ""),
                dims[: tg._MAX_DIMS + 1] if what == "dims" else old_dims,
                ttype if what == "type" else old_type,
                raw,
            )
    base = tmp_path_factory.getbasetemp()
    path = base / "mutated.gguf"
    path.write_bytes(gguf_bytes(metadata, tensors))
    _check_gguf(path, base / "mutated-out")


def _tiny_gguf_file(tiny_llama_gguf) -> bytes:
    return gguf_bytes(*tiny_llama_gguf)


def test_gguf_truncated_anywhere_in_the_header(tiny_llama_gguf, tmp_path):
    data = _tiny_gguf_file(tiny_llama_gguf)
    g_size = len(data)
    path = tmp_path / "cut.gguf"
    with tg.GGUFFile(_write(path, data)) as g:
        data_start = g.data_start
    cuts = set(range(0, 40)) | set(range(40, data_start, 97)) | {data_start - 1, data_start, data_start + 1, g_size - 1}
    for cut in sorted(cuts):
        path.write_bytes(data[:cut])
        with pytest.raises(TfcliError):
            tg.GGUFFile(path)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_gguf_bit_flips_convert_or_fail_cleanly(tiny_llama_gguf, tmp_path):
    """Every bit of the fixed header (magic, version, counts, the first key's length) and bytes
    across the metadata and tensor table flipped."""
    data = _tiny_gguf_file(tiny_llama_gguf)
    with tg.GGUFFile(_write(tmp_path / "ok.gguf", data)) as g:
        data_start = g.data_start
    flips = [(i // 8, 1 << (i % 8)) for i in range(32 * 8)]
    flips += [(i, mask) for i in range(32, data_start, 41) for mask in (0x01, 0xFF)]
    path, out = tmp_path / "flipped.gguf", tmp_path / "out"
    refused = 0
    for offset, mask in flips:
        mutated = bytearray(data)
        mutated[offset] ^= mask
        path.write_bytes(bytes(mutated))
        result = outcome(_convert, path, out)  # (memory is watched by the tests above; here, only what escapes)
        refused += isinstance(result, TfcliError)
    assert refused > len(flips) // 4


def _gguf_claiming(**fields) -> bytes:
    """A GGUF header that claims something absurd, and nothing behind it."""
    head = b"GGUF" + struct.pack("<IQQ", 3, fields.get("n_tensors", 0), fields.get("n_kv", 1))
    if "key_length" in fields:
        return head + struct.pack("<Q", fields["key_length"]) + b"abc"
    if "array" in fields:
        etype, count = fields["array"]
        return head + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", ARRAY, etype, count) + bytes(64)
    if "n_dims" in fields or "dims" in fields:
        dims = fields.get("dims", [])
        head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
        return head + struct.pack("<Q", 1) + b"t" + struct.pack("<I", fields.get("n_dims", len(dims))) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", 0, 0) + bytes(64)
    return head + bytes(64)


@pytest.mark.parametrize(
    "fields",
    [
        {"n_kv": 10**9},
        {"n_kv": 2**64 - 1},
        {"n_tensors": 10**12},
        {"key_length": 10**12},
        {"key_length": 2**64 - 1},
        {"array": (STRING, 10**12)},
        {"array": (0, 10**12)},
        {"array": (ARRAY, 10**9)},
        {"array": (10, 2**60)},
        {"n_dims": 10**9},
        {"dims": [2**63, 2**63]},
        {"dims": [10**12]},
    ],
    ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()),
)
def test_gguf_absurd_claims_are_refused_without_allocating(tmp_path, fields):
    path = _write(tmp_path / "claims.gguf", _gguf_claiming(**fields))
    result, peak = peak_allocation(tg.GGUFFile, path)
    assert isinstance(result, TfcliError)
    assert peak < 1_000_000


def test_gguf_metadata_nested_past_the_stack(tmp_path):
    deep = b"".join(struct.pack("<IQ", ARRAY, 1) for _ in range(5000)) + struct.pack("<IQ", 0, 0)
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", ARRAY) + deep
    with pytest.raises(TfcliError, match="nested too deeply"):
        tg.GGUFFile(_write(tmp_path / "deep.gguf", data))


# --- config.json -------------------------------------------------------------------------------------

_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from([0, -1, 1 << 24, (1 << 24) + 1, 10**400]), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
_BASES = [json.loads((TINY_GPT2 / "config.json").read_text()), json.loads((TINY_LLAMA / "config.json").read_text())]
_CONFIG_KEYS = sorted(set(_BASES[0]) | set(_BASES[1]) | {"n_ctx", "rope_scaling", "rope_theta", "head_dim", "rope_parameters", "hidden_act"})


def _check_config(raw) -> None:
    cfg = outcome(config_from_hf, raw)
    if isinstance(cfg, TfcliError):
        return
    dims = (cfg.vocab_size, cfg.n_ctx, cfg.n_layer, cfg.d_model, cfg.n_head, cfg.n_kv_head, cfg.head_dim)
    assert all(isinstance(d, int) and 0 < d <= 1 << 24 for d in dims), dims
    assert 0 < cfg.d_ff <= 4 << 24  # GPT-2's default MLP width is 4 x n_embd
    assert cfg.n_head % cfg.n_kv_head == 0 and cfg.family in ("gpt2", "llama", "qwen2")
    assert math.isfinite(cfg.norm_eps) and cfg.norm_eps > 0 and math.isfinite(cfg.rope_theta) and cfg.rope_theta > 0
    assert cfg.family != "gpt2" or cfg.d_model == cfg.n_head * cfg.head_dim


_ODD_VALUES = [0, -1, 1 << 24, (1 << 24) + 1, 10**400, 10**5000, 1.5, float("inf"), float("nan"), True, "8", "", [], [1, "x"], {}, {"rope_type": [1]}, None]


@pytest.mark.parametrize("base", _BASES, ids=["gpt2", "llama"])
def test_config_every_key_with_every_odd_value(base):
    """Exhaustive single changes: each key set to each odd value (None removes it), with the
    model_type kept and with it removed (then `architectures` decides the family)."""
    for key in _CONFIG_KEYS:
        for value in _ODD_VALUES:
            for drop_type in (False, True):
                raw = {k: v for k, v in base.items() if not (drop_type and k == "model_type")}
                _check_config(_changed(raw, {key: value}))


@FUZZ
@given(raw=_json_values)
def test_config_any_json_value(raw):
    _check_config(raw)


@FUZZ
@given(base=st.sampled_from(_BASES), changes=st.dictionaries(st.sampled_from(_CONFIG_KEYS), st.one_of(st.just(None), _json_values), min_size=1, max_size=4))
def test_config_mutated_real_configs(base, changes):
    _check_config(_changed(base, changes))


def _changed(raw: dict, changes: dict) -> dict:
    """raw with each key set to its new value, or removed where the value is None."""
    out = dict(raw)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@FUZZ
@given(data=st.one_of(st.binary(max_size=200), st.builds(lambda s, i, b: s[:i] + bytes([b]) + s[i + 1 :], st.just((TINY_LLAMA / "config.json").read_bytes()), st.integers(0, 700), st.integers(0, 255))))
def test_config_file_bytes(tmp_path_factory, data):
    path = tmp_path_factory.getbasetemp() / "config.json"
    path.write_bytes(data)
    outcome(load_config, path)


# --- tokenizer.json ----------------------------------------------------------------------------------

from tfcli.engine.tokenizer import Tokenizer  # noqa: E402

_TOKENIZERS = {name: json.loads((src / "tokenizer.json").read_text()) for name, src in (("gpt2", TINY_GPT2), ("llama", TINY_LLAMA))}
_TEXTS = ["Hello, world", "a" * 60 + "b", "  \n\t x", "今天天气很好", "<|endoftext|> ☃ 👍", ""]
# Parts of a tokenizer.json a mutation replaces: the pipeline's stages and the model's tables.
_TOKENIZER_PATHS = [("pre_tokenizer",), ("normalizer",), ("decoder",), ("post_processor",), ("added_tokens",), ("model",), ("model", "type"),
                    ("model", "vocab"), ("model", "merges"), ("model", "unk_token"), ("model", "byte_fallback"), ("truncation",), ("padding",)]  # fmt: skip
_REGEXES = ["(a+)+$", "(", "a{99999999}", "\\p{Nope}", "x{1000}{1000}", "(?=a)", "", ".*", "[^\\s]+", "(\\w+\\s?)*$"]
_STAGES = st.one_of(
    _json_values,
    st.builds(lambda r, b: {"type": "Split", "pattern": {"Regex": r}, "behavior": b, "invert": False}, st.sampled_from(_REGEXES), st.sampled_from(["Isolated", "Removed", "Nope"])),
    st.builds(lambda k: {"type": k}, st.sampled_from(["ByteLevel", "Whitespace", "Metaspace", "BPE", "WordPiece", "Unigram", "Sequence", "NFKC", "Nope"])),
)


def _check_tokenizer(path: Path) -> None:
    """Loading succeeds or raises TfcliError; then every text encodes and decodes, or raises TfcliError."""
    tok = outcome(Tokenizer, path)
    if isinstance(tok, TfcliError):
        return
    assert tok.vocab_size >= 0 and tok.longest_piece >= 0
    for text in _TEXTS:
        ids = outcome(tok.prompt, text)
        if isinstance(ids, TfcliError):
            continue
        assert all(isinstance(i, int) and 0 <= i < max(tok.vocab_size, 1) for i in ids), (ids, tok.vocab_size)
        outcome(tok.decode, ids)


@FUZZ
@given(base=st.sampled_from(sorted(_TOKENIZERS)), changes=st.lists(st.tuples(st.sampled_from(_TOKENIZER_PATHS), _STAGES), min_size=1, max_size=3))
def test_tokenizer_mutated_real_files(tmp_path_factory, base, changes):
    raw = json.loads(json.dumps(_TOKENIZERS[base]))
    for path, value in changes:
        node = raw
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[path[-1]] = value
    target = tmp_path_factory.getbasetemp() / "tokenizer.json"
    target.write_text(json.dumps(raw))
    _check_tokenizer(target)


@FUZZ
@given(data=st.one_of(st.binary(max_size=300), st.builds(lambda s, i, b: s[:i] + bytes([b]) + s[i + 1 :], st.just((TINY_GPT2 / "tokenizer.json").read_bytes()), st.integers(0, 6000), st.integers(0, 255))))
def test_tokenizer_file_bytes(tmp_path_factory, data):
    target = tmp_path_factory.getbasetemp() / "tokenizer.json"
    target.write_bytes(data)
    _check_tokenizer(target)


def test_tokenizer_truncated_at_every_kilobyte(tmp_path):
    data = (TINY_LLAMA / "tokenizer.json").read_bytes()
    for cut in range(0, len(data), 1024):
        (tmp_path / "tokenizer.json").write_bytes(data[:cut])
        assert isinstance(outcome(Tokenizer, tmp_path / "tokenizer.json"), TfcliError)


# --- chat templates -------------------------------------------------------------------------------

_FRAGMENTS = [
    "{% for m in messages %}", "{% endfor %}", "{{ m.content }}", "{{ m.role }}", "{% if add_generation_prompt %}", "{% endif %}",
    "{% for i in range(99999) %}", "{% for j in range(99999) %}", "x", "{{ 'x' * 99999 }}", "{{ 'ab' * 10**9 }}", "{{ [0] * 10**8 }}",
    "{% set ns = namespace(s='xy') %}", "{% set ns.s = ns.s ~ ns.s %}", "{{ ns.s }}", "{{ ns.s|length }}", "{{ 'x'|center(10**9) }}",
    "{{ '%99999999d' % 1 }}", "{{ '{:>99999999}'.format(1) }}", "{{ 7 ** 99999999 }}", "{{ 2 ** 64 }}", "{{ raise_exception('no') }}",
    "{{ messages|tojson }}", "{{ bos_token }}", "{{ eos_token }}", "{% macro f(n) %}{{ f(n) }}{% endmacro %}", "{{ f(1) }}",
    "{{ lipsum(10**9) }}", "{{ range(10**9)|list }}", "{{ ''.join(['x'] * 10**9) }}", "{{ 'x'.ljust(10**8) }}", "{{ (messages * 10**9)|length }}",
    "{{ x.__class__ }}", "{{ ''.__class__.__mro__ }}", "{% raw %}", "{% endraw %}", "{{", "}}", "{%", "%}", "{# c #}",
]  # fmt: skip
_MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
_TEMPLATE_SECONDS = 0.3  # the render bound for the fuzz (2 s in use): many templates, each stopped quickly


def _check_template(source: str) -> None:
    """The render returns text within the bounds, or one TfcliError line, in about the time bound."""
    from tfcli.engine import chat

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chat, "RENDER_SECONDS", _TEMPLATE_SECONDS)
        start = time.monotonic()
        result, peak = peak_allocation(chat.ChatTemplate(source, "<s>", "</s>").render, _MESSAGES)
        elapsed = time.monotonic() - start
    assert elapsed < _TEMPLATE_SECONDS + 2.0, (elapsed, source)
    assert peak < 200_000_000, (peak, source)
    if not isinstance(result, TfcliError):
        assert isinstance(result, str) and len(result) <= chat.OUTPUT_CHARS + 4 * 14, (len(result), source)


@settings(max_examples=60, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=8))
def test_template_from_fragments(parts):
    _check_template("".join(parts))


@FUZZ
@given(source=st.text(alphabet=st.sampled_from(list("{}%#()[]|'~*+-.,: abcxyz0123456789_\n")), max_size=60))
def test_template_random_text(source):
    _check_template(source)
