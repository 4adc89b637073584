"""Which model family a GGUF file holds, its metadata as that family's config.json, and its tensor names.

Each family in tfcli.engine.families that llama.cpp can write has a `GGUF` table (GGUFNames): its
`general.architecture`, llama.cpp's tensor names with their Hugging Face keys, the config.json entries
fixed for the family, and whether llama.cpp's converter reordered the Q and K rows. Everything here
reads that table; a family with one converts, and there is no second list of names in the store.
The hyperparameters are llama.cpp's generic LLM keys (gguf.md, "LLM"), `{arch}.block_count` and so on.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

from tfcli.engine.errors import GGUFError, shown
from tfcli.engine.families import FAMILIES

from tfcli.engine.formats import BLOCK_TYPES
from tfcli.engine.gguffile import CORRUPT, GGUFFile
from .tokenizer import end_of_generation_ids, vocabulary

# GGUF's `general.architecture` -> the family module that converts it.
CONVERTIBLE: dict[str, ModuleType] = {fam.GGUF.arch: fam for fam in FAMILIES.values() if fam.GGUF is not None}

# Sizes in the metadata beyond this are corrupt (config.py's bound on config.json says the same).
_MAX_COUNT = 1 << 24

EMBEDDING = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"  # the one tensor a family may leave out: tied to the embedding then


def tied(g: GGUFFile, fam: ModuleType) -> bool:
    """A file without the family's output matrix ties it to the token embedding (llama.cpp does the same)."""
    return not any(hn == LM_HEAD and gn in g.tensors for gn, hn in fam.GGUF.names.items())


def family_of(g: GGUFFile) -> ModuleType:
    """The family whose GGUF table has the file's general.architecture; GGUFError otherwise."""
    arch = g.get("general.architecture")
    if not isinstance(arch, str) or arch not in CONVERTIBLE:
        raise GGUFError(f"{g.path.name}: architecture {shown(arch)} is not supported",
                        f"tfcli converts: {', '.join(CONVERTIBLE)}")
    return CONVERTIBLE[arch]


def hf_name(fam: ModuleType, gguf_name: str) -> str | None:
    """The Hugging Face key of a GGUF tensor name in a family's table, or None if it has no such tensor."""
    names = fam.GGUF.names
    if "{i}" not in gguf_name and gguf_name in names:
        return names[gguf_name]
    parts = gguf_name.split(".", 2)  # "blk", "7", "attn_q.weight"
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
        template = names.get(f"blk.{{i}}.{parts[2]}")
        if template is not None:
            return template.format(i=int(parts[1]))
    return None


def tensor_names(g: GGUFFile, fam: ModuleType, config: dict[str, Any]) -> list[tuple[str, str]]:
    """(GGUF name, HF name) for every tensor, in model order: the family's table, each per-layer name
    once per layer, lm_head only when not tied. Refuses a file with a tensor missing or one too many."""
    n_layer, what = config["num_hidden_layers"], f"{fam.NAME} model"
    if n_layer > len(g.tensors):
        # Checked before the list of names is built: block_count may claim millions of layers.
        claim = f"the metadata says {n_layer:,} layers but the file has only {len(g.tensors):,} tensors"
        raise GGUFError(f"{g.path.name}: {claim}", f"the file is not a complete {what}")
    table = fam.GGUF.names.items()
    whole = [(gn, hn) for gn, hn in table if "{i}" not in gn and not (hn == LM_HEAD and config["tie_word_embeddings"])]
    layers = [(gn.format(i=i), hn.format(i=i)) for i in range(n_layer) for gn, hn in table if "{i}" in gn]
    # Model order: the embedding, the layers, then the final norm and lm_head.
    order = [t for t in whole if t[1] == EMBEDDING] + layers + [t for t in whole if t[1] != EMBEDDING]
    missing = [n for n, _ in order if n not in g.tensors]
    if missing:
        raise GGUFError(f"{g.path.name}: tensor {shown(missing[0])} is missing ({len(missing)} missing in all)",
                        f"the file is not a complete {what}")
    extra = sorted(set(g.tensors) - {n for n, _ in order} - set(fam.GGUF.settings_tensors))
    if extra:
        raise GGUFError(f"{g.path.name}: tensor {shown(extra[0])} does not belong to a {n_layer}-layer {what}",
                        f"the file is not a plain {what}")
    return order


def expected_shape(hf: str, c: dict[str, Any]) -> tuple[int, ...]:
    """The shape config.json implies for a tensor (a bias: the rows of its weight)."""
    D, F, V, Dh = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * Dh, c["num_key_value_heads"] * Dh
    module, kind = hf.rsplit(".", 2)[-2:]  # "q_proj", "weight"; "input_layernorm", "weight"; ...
    weight = {
        "embed_tokens": (V, D), "lm_head": (V, D), "norm": (D,),
        "input_layernorm": (D,), "post_attention_layernorm": (D,),
        "q_proj": (q, D), "k_proj": (kv, D), "v_proj": (kv, D), "o_proj": (D, q),
        "gate_proj": (F, D), "up_proj": (F, D), "down_proj": (D, F), "q_norm": (Dh,), "k_norm": (Dh,),
        "pre_feedforward_layernorm": (D,), "post_feedforward_layernorm": (D,),
        "qkv_proj": (q + 2 * kv, D), "gate_up_proj": (2 * F, D),
    }[module]  # fmt: skip
    return weight if kind == "weight" else weight[:1]


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo the row order llama.cpp gives attn_q / attn_k of a permuted_qk family, back to Hugging Face's.

    Hugging Face's RoPE rotates the two halves of each head (dims i and i + Dh/2 form a pair);
    llama.cpp's for Llama rotates neighbours (2i, 2i+1). Its converter (convert_hf_to_gguf.py,
    `LlamaModel.permute`, applied to weights and biases) therefore reorders each head's rows from
    [2, Dh/2] to [Dh/2, 2]. We swap them back. (Qwen2 runs with NEOX RoPE, halves as in Hugging Face:
    its rows are stored as they are.)
    """
    rows = w.shape[0]  # [n_heads*Dh, D], or [n_heads*Dh] for a bias
    head_dim = rows // n_heads
    v = w.reshape(n_heads, head_dim // 2, 2, -1)  # llama.cpp order: [heads, Dh/2, 2, D]
    return v.swapaxes(1, 2).reshape(w.shape)  # HF order: [heads, 2, Dh/2, D] -> [n_heads*Dh, D]


def permute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's row order for attn_q / attn_k of a permuted_qk family, from Hugging Face's: what
    its converter's `LlamaModel.permute` does (K with the key/value heads), the inverse of
    unpermute_rope_rows. Used when tfcli writes a GGUF."""
    rows = w.shape[0]  # [n_heads*Dh, D], or [n_heads*Dh] for a bias
    v = w.reshape(n_heads, 2, rows // n_heads // 2, -1)  # HF order: [heads, 2, Dh/2, D]
    return v.swapaxes(1, 2).reshape(w.shape)  # llama.cpp order: [heads, Dh/2, 2, D] -> [n_heads*Dh, D]


def transform(fam: ModuleType, hf: str, config: dict[str, Any]) -> dict[str, Any]:
    """What llama.cpp's converter did to a tensor, to undo: {"heads": n} when its rows are in the
    RoPE order of n heads (Q and K of a permuted_qk family), {"shift": s} when s was added to a
    norm weight (Gemma's norms scale by 1 + w and are stored as 1 + w), else {}. The index of a GGUF
    run in place records it (engine/gguf_weights.py); a conversion applies it (restore)."""
    if fam.GGUF.norm_shift and hf.endswith("norm.weight"):
        return {"shift": fam.GGUF.norm_shift}
    if fam.GGUF.permuted_qk and hf.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias")):
        return {"heads": config["num_attention_heads"] if ".q_proj." in hf else config["num_key_value_heads"]}
    return {}


def restore(fam: ModuleType, hf: str, w: np.ndarray, config: dict[str, Any]) -> np.ndarray:
    """A tensor as Hugging Face stores it, `transform` undone (in float32 the engine's 1 + (stored - 1)
    is the stored value)."""
    t = transform(fam, hf, config)
    if "shift" in t:
        return w - np.float32(t["shift"])
    return unpermute_rope_rows(w, t["heads"]) if "heads" in t else w


def _round32(x: float) -> float:
    """A float32 from the file as the shortest decimal that round-trips (9.999999747e-06 -> 1e-05)."""
    return float(str(np.float32(x)))


class Metadata:
    """A GGUF's `{arch}.` keys, each checked for its type as it is read, and the family's settings
    tensors: what a family's GGUF `settings` reads (llama.GGUFMetadata)."""

    def __init__(self, g: GGUFFile, fam: ModuleType):
        self.g, self.arch, self.name, self.settings_tensors = g, fam.GGUF.arch, g.path.name, fam.GGUF.settings_tensors

    def get(self, suffix: str, default: Any = None) -> Any:
        return self.g.get(f"{self.arch}.{suffix}", default)

    def _key(self, suffix: str, default: Any) -> Any:
        value = self.get(suffix, default)
        if value is None:
            raise GGUFError(f"{self.name} has no {self.arch}.{suffix}", "the file's metadata is incomplete")
        return value

    def count(self, suffix: str, default: Any = None) -> int:
        value = self._key(suffix, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_COUNT:
            raise GGUFError(f"{self.name}: {self.arch}.{suffix} must be a positive integer up to {_MAX_COUNT:,}, "
                            f"not {shown(value)}", CORRUPT)
        return value

    def number(self, suffix: str, default: Any = None) -> float:
        value = self._key(suffix, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise GGUFError(f"{self.name}: {self.arch}.{suffix} must be a positive number, not {shown(value)}", CORRUPT)
        return _round32(value)

    def tensor(self, name: str) -> np.ndarray | None:
        assert name in self.settings_tensors, name  # a family reads only the tensors its table names as settings
        if name not in self.g.tensors:
            return None
        if self.g.tensors[name].type_id not in BLOCK_TYPES:
            raise GGUFError(f"{self.name}: tensor {shown(name)} is {self.g.tensors[name].type_name}, "
                            "which tfcli cannot dequantize", CORRUPT)
        return self.g.tensor(name)


def config_json(g: GGUFFile, fam: ModuleType) -> dict[str, Any]:
    """config.json for the family's Hugging Face class from a GGUF's metadata: the family's fixed
    entries (architectures, model_type, biases...) from its table, the sizes from llama.cpp's
    generic LLM keys, and what only the family has (RoPE scaling, windows...) from its `settings`.

    Every value is checked for its type here, and the result by ModelConfig's own rules in
    check_convertible: a file from an unknown converter is as untrusted as its bytes.
    """
    meta = Metadata(g, fam)
    if meta.get("expert_count", 0):
        raise GGUFError(f"{g.path.name}: mixture-of-experts models are not supported",
                        f"tfcli converts plain {fam.NAME} models")
    n_head = meta.count("attention.head_count")
    d_model = meta.count("embedding_length")
    tokens, _types, _merges = vocabulary(g)
    bos, pad = g.get("tokenizer.ggml.bos_token_id"), g.get("tokenizer.ggml.padding_token_id")
    theta = meta.number("rope.freq_base", 10000.0)
    # The family's fixed entries (architectures, model_type, hidden_act, biases) from its table,
    # the sizes from the file.
    config = {
        **fam.GGUF.config,
        "vocab_size": meta.count("vocab_size", len(tokens) or None),
        "hidden_size": d_model,
        "intermediate_size": meta.count("feed_forward_length"),
        "num_hidden_layers": meta.count("block_count"),
        "num_attention_heads": n_head,
        "num_key_value_heads": meta.count("attention.head_count_kv", n_head),
        "head_dim": meta.count("attention.key_length", d_model // n_head or None),
        "max_position_embeddings": meta.count("context_length"),
        "rms_norm_eps": meta.number("attention.layer_norm_rms_epsilon"),
        # transformers 5 reads rope_parameters, earlier versions rope_theta; write both.
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "tie_word_embeddings": tied(g, fam),
        "bos_token_id": bos,
        "eos_token_id": end_of_generation_ids(g),
        "pad_token_id": pad if isinstance(pad, int) and not isinstance(pad, bool) else None,
        "torch_dtype": "float32",
        "initializer_range": 0.02,
        "use_cache": True,
    }
    return config | fam.GGUF.settings(meta, config)
