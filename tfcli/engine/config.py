"""ModelConfig: the few numbers and traits that fix a transformer's shapes.

One frozen dataclass serves every family. Each family (engine/families/) reads its own config.json
into it; the parameter accounting (tfcli/analysis/) reads the same object, so a shape is described
once. Field names use the axes of STYLE.md (L layers, D width, H/Hkv heads, Dh head size, F MLP
width, V vocabulary); each comment says what the value means and where the families take it from.

No NumPy here: `tfcli params` builds ModelConfigs and must start fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, shown



# The kinds of norm, MLP and positions a block may have: what each computes and stores, as `params`,
# `neurons` and the views describe it. A ModelConfig names its kinds by the keys of these tables; a
# family with a new kind adds its line here, and every command that describes a model knows it.
@dataclass(frozen=True)
class Norm:
    label: str  # as the views print it
    vectors: int  # parameter vectors of D per norm: scale and shift (2), or scale only (1)
    stores: str  # what those vectors are


@dataclass(frozen=True)
class MLPKind:
    label: str
    matrices: int  # D x F matrices: up and down (2), or gate, up and down (3)
    hidden: str  # the hidden activation [T, F] as `tfcli neurons` writes it
    hidden_zh: str


@dataclass(frozen=True)
class Positions:
    label: str
    table: bool  # a learned T x D table of parameters (else rotations, no parameters)


NORMS: dict[str, Norm] = {
    "layernorm": Norm("LayerNorm", 2, "scale and shift"),  # GPT-2/3
    "rmsnorm": Norm("RMSNorm", 1, "scale only"),  # Llama, Qwen, Phi-3: x / rms(x) · w
    "rmsnorm1p": Norm("RMSNorm (1 + w)", 1, "scale only, stored as w in 1 + w"),  # Gemma: x / rms(x) · (1 + w)
}
MLPS: dict[str, MLPKind] = {
    "gelu": MLPKind("GELU MLP", 2, "GELU(x W_up)", "GELU(x W_up)"),  # GPT-2/3
    # Llama, Qwen, Phi-3
    "swiglu": MLPKind("SwiGLU MLP", 3, "silu(x W_gate) · (x W_up) (SwiGLU)", "silu(x W_gate) · (x W_up)（SwiGLU）"),
    "geglu": MLPKind(
        "GeGLU MLP", 3, "GELU(x W_gate) · (x W_up) (GeGLU)", "GELU(x W_gate) · (x W_up)（GeGLU）"
    ),  # Gemma
}
POSITIONS: dict[str, Positions] = {
    "learned": Positions("learned positions", True),  # GPT-2/3: a T x D table
    "rope": Positions("RoPE positions", False),  # rotations of queries and keys, no parameters
}


@dataclass(frozen=True)
class ModelConfig:
    family: str  # the engine/families/ module that runs it: "gpt2", "llama", "qwen2"
    vocab_size: int  # V
    n_ctx: int  # longest sequence the model was trained for (GPT-2 n_positions; Llama max_position_embeddings)
    n_layer: int  # L
    d_model: int  # D, the width of the residual stream
    n_head: int  # H query heads
    n_kv_head: int  # Hkv key/value heads; < H is grouped-query attention (GPT-2: always H)
    head_dim: int  # Dh; D / H in GPT-2 and most Llamas, some set it apart (then H x Dh != D)
    d_ff: int  # F: GPT-2 n_inner (default 4 D); Llama/Qwen2 intermediate_size
    norm_eps: float  # GPT-2 layer_norm_epsilon (1e-5); Llama/Qwen2 rms_norm_eps
    tie_embeddings: bool  # the unembedding is the token embedding matrix, stored once
    # Traits: what kind of block it is. The family sets them; the engine and the accounting read them.
    norm: str = "layernorm"  # a key of NORMS
    mlp: str = "gelu"  # a key of MLPS
    positions: str = "learned"  # a key of POSITIONS
    qkv_bias: bool = True  # biases on the Q, K and V projections (GPT-2 yes; Llama attention_bias; Qwen2 always)
    o_bias: bool = True  # a bias on the attention output projection (GPT-2 yes; Llama attention_bias; Qwen2 no)
    mlp_bias: bool = True  # biases on the MLP projections (GPT-2 yes; Llama mlp_bias; Qwen2 no)
    rope_theta: float = 10000.0  # RoPE base (Llama 10,000; Qwen2 1,000,000)
    rotary_dim: int = 0  # R: dimensions of each head RoPE rotates; 0: all Dh (Phi-4-mini: 3/4 of them)
    qk_norm: bool = False  # an RMSNorm of Dh on each head's queries and keys before RoPE (Qwen3, Gemma 3)
    norms_per_block: int = 2  # norms of D in one block: before attention and MLP; Gemma 3 also after each
    # per layer, a sliding window (Gemma 3's sliding layers, Phi-3) or None; (): none slides
    windows: tuple[int | None, ...] = ()
    extra: Any = None  # what only the family's own code reads (a frozen dataclass of its own: RoPE scaling, windows)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @property
    def q_per_kv(self) -> int:
        """How many query heads share one key/value head (1 for plain multi-head attention)."""
        return self.n_head // self.n_kv_head

    @property
    def d_attn(self) -> int:
        """Width of all query heads together (H x Dh); equals D in GPT-2/3."""
        return self.n_head * self.head_dim

    @property
    def d_kv(self) -> int:
        """Width of all key (or value) heads together (Hkv x Dh)."""
        return self.n_kv_head * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Matrices of D x F in one MLP: up and down (GELU), or gate, up and down (SwiGLU, GeGLU)."""
        return MLPS[self.mlp].matrices

    def kv_cache_bytes(self, n_positions: int, value_bytes: int = 4, block: int = 1) -> int:
        """K and V for every layer: 2 x L x Hkv x positions x Dh/block x value_bytes, value_bytes the bytes
        of a block of `block` numbers (4 or 2 bytes for 1: float32, float16; 34 for 32: Q8_0;
        engine/kvcache.py's KV_TYPES), where a sliding layer holds at most its window and SLIDING_EXTRA
        positions more (engine/kvcache.py)."""
        held = sum(
            n_positions if not w else min(n_positions, w + SLIDING_EXTRA)
            for w in (self.windows or (None,) * self.n_layer)
        )
        return 2 * held * self.n_kv_head * (self.head_dim // block) * value_bytes


# positions a sliding layer's cache may hold beyond its window: kvcache.SLACK and one pass's new ones
SLIDING_EXTRA = 1024

# Far beyond any real model, small enough that products of two of them cannot overflow int64.
MAX_DIM = 1 << 24


class ConfigReader:
    """Typed, bounded access to config.json values, with one-line errors naming the key."""

    def __init__(self, raw: dict[str, Any]):
        self.raw = raw

    def int(self, *keys: str, default: int | None = None) -> int:
        for key in keys:
            if key in self.raw and self.raw[key] is not None:
                return positive_int(self.raw[key], key)
        if default is not None:
            return default
        raise ConfigError(
            f"config.json has no {keys[0]!r}",
            "the model folder's config.json is incomplete; use the one saved with the weights",
        )

    def opt_int(self, key: str) -> int | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, list):  # some configs list several; the first is the one used to start
            value = value[0] if value else None
            if value is None:
                return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(
                f"config.json: {key} must be a non-negative integer, not {shown(value)}", "fix the value in config.json"
            )
        return value

    def int_tuple(self, key: str) -> tuple[int, ...]:
        value = self.raw.get(key)
        values = value if isinstance(value, list) else ([] if value is None else [value])
        for v in values:
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(
                    f"config.json: {key} must be a non-negative integer or a list of them, not {shown(value)}",
                    "fix the value in config.json",
                )
        return tuple(values)

    def float(self, key: str, default: float) -> float:
        return positive_float(self.raw.get(key, default), key)


def positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value > MAX_DIM:
        raise ConfigError(
            f"config.json: {key} must be a positive integer up to {MAX_DIM:,}, not {shown(value)}",
            "fix the value in config.json",
        )
    return value


def settings_object(raw: dict, key: str, where: str = "") -> dict:
    """The object config.json holds under `key` ({} when it is absent or null), or a ConfigError
    naming the field when it is anything else: a `"rope_scaling": [1, 2]` is refused, not ignored."""
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(
            f"config.json: {where}{key} must be an object, not {shown(value)}",
            "fix the value in config.json (or remove it)",
        )
    return value


def positive_float(value: Any, key: str) -> float:
    # float() first: an integer too large for a float (10**400) is as wrong as infinity.
    number = (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e308
        else math.nan
    )
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(
            f"config.json: {key} must be a positive number, not {shown(value)}", "fix the value in config.json"
        )
    return number
