"""What one token costs and what the model takes in memory, from its shape alone.

FLOPs per token after Kaplan et al. 2020 (Table 1); the weights at each precision; the KV cache per
token and for a full context; the size of the attention patterns, which grow with the square of the
context.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfcli.engine.config import ModelConfig

from .factors import Row, axis, const, times
from .tally import tally_3b1b

WEIGHT_BITS = {"fp32": 32, "fp16": 16, "int8": 8, "int4": 4}  # bits per stored weight (bf16 as fp16)
CACHE_BYTES = {"fp32": 4, "fp16": 2}  # tfcli keeps fp16 for a GGUF, fp32 for float weights (--kv-type)
# --kv-type q8_0 (engine/kvcache.py): each head's Dh numbers as Dh/32 blocks of 34 bytes (ggml's Q8_0), where Dh
# is a multiple of 32
Q8_0_BLOCK, Q8_0_BYTES = 32, 34


def cache_types(s: ModelConfig) -> tuple[str, ...]:
    """The KV caches tfcli can keep for this shape: fp32, fp16, and q8_0 where Dh is a multiple of 32."""
    return (*CACHE_BYTES, "q8_0") if s.head_dim % Q8_0_BLOCK == 0 else tuple(CACHE_BYTES)


@dataclass(frozen=True)
class Compute:
    """FLOPs for one token (a multiply and an add count as 2), after Kaplan et al. 2020, Table 1.

    matmul_params: N, the weights one token is multiplied by: every matrix in the layers, plus the
        unembedding (a multiply even when tied). Embedding and position tables are looked up, not
        multiplied; biases and norms add a few FLOPs per parameter and are left out.
    attention: 2 x L x T x H·Dh. At position t a token's scores q·k cost 2·t·Dh per head and the
        weighted sum of values as much again; averaged over a full context (t ≈ T/2) that is this.
    """

    matmul_params: int
    attention: int
    forward: int  # 2 N + attention
    training: int  # forward + backward ≈ 3 x forward ≈ 6 N


def attention_flops(s: ModelConfig) -> Row:
    """2·L·T·H·Dh: the attention term of Compute, as a row with its formula."""
    return Row("attention_flops", (const(2), axis("L", s.n_layer), axis("T", s.n_ctx),
                                   times(axis("H", s.n_head), axis("Dh", s.head_dim))), sep="·")


def compute(s: ModelConfig) -> Compute:
    t = tally_3b1b(s)
    n = t.total - t["embedding"]
    attention = attention_flops(s).count
    forward = 2 * n + attention
    return Compute(n, attention, forward, 3 * forward)


def weight_bytes(n_params: int) -> dict[str, int]:
    """The weights stored at each precision (quantisation scales, a few percent more, left out)."""
    return {k: -(-n_params * bits // 8) for k, bits in WEIGHT_BITS.items()}


@dataclass(frozen=True)
class KVCache:
    """Keys and values kept for every past position: 2 x L x Hkv x Dh numbers per token."""

    per_token: dict[str, int]  # bytes, by dtype
    full_context: dict[str, int]  # bytes for T tokens


def kv_per_token(s: ModelConfig, dtype: str) -> Row:
    """2 × L × Hkv × Dh × bytes: a token's keys and values in every layer, as a row with its formula
    (q8_0: 2 × L × Hkv × Dh/32 × 34, its blocks)."""
    if dtype == "q8_0":
        return Row("kv_per_token", (const(2), axis("L", s.n_layer), axis("Hkv", s.n_kv_head),
                                    axis("Dh/32", s.head_dim // Q8_0_BLOCK), const(Q8_0_BYTES)))
    return Row("kv_per_token", (const(2), axis("L", s.n_layer), axis("Hkv", s.n_kv_head), axis("Dh", s.head_dim),
                                const(CACHE_BYTES[dtype])))


def kv_cache(s: ModelConfig) -> KVCache:
    per_token = {k: kv_per_token(s, k).count for k in cache_types(s)}
    return KVCache(per_token, {k: n * s.n_ctx for k, n in per_token.items()})


@dataclass(frozen=True)
class AttentionPattern:
    """Scores of every position against every earlier one: T x T per head per layer.

    It grows with the square of the context, which is what limits context length: doubling T
    doubles the KV cache but quadruples this.
    """

    per_head: int  # numbers, T²
    per_layer: int  # H x T²
    all_layers: int  # L x H x T²
    bytes_per_layer_fp32: int


def attention_pattern(s: ModelConfig) -> AttentionPattern:
    one = s.n_ctx * s.n_ctx
    return AttentionPattern(one, s.n_head * one, s.n_layer * s.n_head * one, 4 * s.n_head * one)
