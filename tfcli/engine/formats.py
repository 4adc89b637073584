"""GGUF's tensor types, and dequantizers for the ones tfcli reads (float32 out).

Quantized tensors are stored as blocks of 32 weights that share a float16 scale (and, for the `_1`
types, a float16 minimum), or, for the k-quants (`_K`), as blocks of 256 weights whose sub-blocks
of 16 or 32 carry small integer scales of their own. Each block layout below is that of llama.cpp's
ggml-common.h, and each dequantizer follows its `dequantize_row_*` in ggml-quants.c.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from .errors import GGUFError

class GGMLType(IntEnum):
    """ggml's tensor type ids (ggml.h `enum ggml_type`), all of them, so that a refusal can name what
    it refuses. The one place tfcli writes them: the kernels (engine/fast/) compare against these
    names, and numba reads a member as the constant it is."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


TYPE_NAMES = {int(t): t.name for t in GGMLType}


def _f32(blocks: np.ndarray) -> np.ndarray:  # [N, 4] -> [N, 1]
    return blocks.view("<f4")


def _f16(blocks: np.ndarray) -> np.ndarray:  # [N, 2] -> [N, 1]
    return blocks.view("<f2").astype(np.float32)


def _bf16(blocks: np.ndarray) -> np.ndarray:  # [N, 2] -> [N, 1]
    # bfloat16 is the top half of a float32: shift the 16 stored bits into place.
    return (blocks.view("<u2").astype(np.uint32) << 16).view(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[N, 16] bytes -> [N, 32] 4-bit values: the low nibbles are weights 0..15, the high ones 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """[N, 4] bytes (one little-endian u32 per block) -> [N, 32] bits; bit j belongs to weight j."""
    return ((qh.view("<u4") >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)  # [N, 1] >> [32] -> [N, 32]


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    # block_q4_0: d f16 · qs u8[16]               w = (q - 8) * d,      q in 0..15
    d = _f16(blocks[:, 0:2])  # [N, 1]
    q = _nibbles(blocks[:, 2:18]).astype(np.int8) - 8  # [N, 32]
    return q.astype(np.float32) * d


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    # block_q4_1: d f16 · m f16 · qs u8[16]       w = q * d + m,        q in 0..15
    d, m = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # [N, 1] each
    q = _nibbles(blocks[:, 4:20])  # [N, 32]
    return q.astype(np.float32) * d + m


def _q5_0(blocks: np.ndarray) -> np.ndarray:
    # block_q5_0: d f16 · qh u32 · qs u8[16]      w = (q - 16) * d,     q = nibble | fifth bit << 4
    d = _f16(blocks[:, 0:2])  # [N, 1]
    q = _nibbles(blocks[:, 6:22]) | (_fifth_bits(blocks[:, 2:6]) << 4)  # [N, 32], 0..31
    return (q.astype(np.int8) - 16).astype(np.float32) * d


def _q5_1(blocks: np.ndarray) -> np.ndarray:
    # block_q5_1: d f16 · m f16 · qh u32 · qs u8[16]   w = q * d + m
    d, m = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # [N, 1] each
    q = _nibbles(blocks[:, 8:24]) | (_fifth_bits(blocks[:, 4:8]) << 4)  # [N, 32]
    return q.astype(np.float32) * d + m


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    # block_q8_0: d f16 · qs i8[32]               w = q * d
    d = _f16(blocks[:, 0:2])  # [N, 1]
    return blocks[:, 2:34].view(np.int8).astype(np.float32) * d  # [N, 32]


# The k-quants: super-blocks of 256 weights in sub-blocks of 16 or 32, each sub-block with its own
# scale (and minimum), themselves quantized against the block's float16 d (and dmin).
QK_K = 256


def _k_weights(d: np.ndarray, dmin: np.ndarray, scales: np.ndarray, mins: np.ndarray, q: np.ndarray) -> np.ndarray:
    """w = (d * scale_j) * q - (dmin * min_j) for sub-block j. d, dmin [N, 1]; scales, mins [N, S]; q [N, S, 256/S]."""
    step = (d * scales.astype(np.float32))[:, :, None]  # [N, S, 1]
    low = (dmin * mins.astype(np.float32))[:, :, None]  # [N, S, 1]
    return (step * q.astype(np.float32) - low).reshape(len(q), QK_K)


def _k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[N, 12] bytes -> the 6-bit scales and mins [N, 8] of a Q4_K/Q5_K block. Bytes 0-3 hold
    scales 0-3 and bytes 4-7 mins 0-3 in their low 6 bits; bytes 8-11 hold the low 4 bits of
    scales 4-7 (low nibble) and mins 4-7 (high nibble), whose top 2 bits are the top 2 bits of bytes 0-7."""
    a, b, c = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]  # [N, 4] each
    scales = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 6) << 4)], axis=1)  # [N, 8]
    mins = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 6) << 4)], axis=1)  # [N, 8]
    return scales, mins


def _pairs_of_nibbles(qs: np.ndarray) -> np.ndarray:
    """[N, 128] bytes -> [N, 8, 32] 4-bit values: each run of 32 bytes holds sub-block 2i in its
    low nibbles and sub-block 2i+1 in its high nibbles."""
    runs = qs.reshape(len(qs), 4, 1, 32)  # [N, 4, 1, 32]
    return np.concatenate([runs & 0x0F, runs >> 4], axis=2).reshape(len(qs), 8, 32)


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """[N, 64] bytes -> [N, 256] 2-bit values: for each half of the block, 32 bytes read four
    times, at bit 0, 2, 4 and 6 (Q2_K and Q3_K)."""
    halves = qs.reshape(len(qs), 2, 1, 32)  # [N, 2, 1, 32]
    # [N, 2, 4, 32] -> [N, 256]
    return ((halves >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3).reshape(len(qs), QK_K)


def _q2_k(blocks: np.ndarray) -> np.ndarray:
    # block_q2_K: scales u8[16] · qs u8[64] · d f16 · dmin f16
    #   16 sub-blocks of 16: w = (d * scale_j) * q - (dmin * min_j), scale_j / min_j the low / high nibble of scales[j]
    scales = blocks[:, 0:16]  # [N, 16]
    d, dmin = _f16(blocks[:, 80:82]), _f16(blocks[:, 82:84])  # [N, 1] each
    return _k_weights(d, dmin, scales & 0x0F, scales >> 4, _crumbs(blocks[:, 16:80]).reshape(-1, 16, 16))


def _q3_k(blocks: np.ndarray) -> np.ndarray:
    # block_q3_K: hmask u8[32] · qs u8[64] · scales u8[12] · d f16
    #   16 sub-blocks of 16: w = (d * (scale_j - 32)) * (q - 4 * (1 - high bit)); q's 2 low bits as in Q2_K,
    #   its high bit for weight 32k + l (k = 0..7) is bit k of hmask[l]. The 6-bit scales: low 4 bits
    #   in the nibbles of bytes 0-7 (scales 0-7 low, 8-15 high), top 2 bits in bytes 8-11 (2 bits each, by fours).
    n = len(blocks)
    hmask, packed, d = blocks[:, 0:32], blocks[:, 96:108], _f16(blocks[:, 108:110])  # [N, 32], [N, 12], [N, 1]
    low4 = np.concatenate([packed[:, 0:8] & 0x0F, packed[:, 0:8] >> 4], axis=1)  # [N, 16]
    # [N, 4, 4] -> [N, 16]
    top2 = ((packed[:, None, 8:12] >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3).reshape(n, 16)
    scales = (low4 | (top2 << 4)).astype(np.int8) - np.int8(32)  # [N, 16], -32..31
    high = (hmask[:, None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # [N, 8, 32]
    # [N, 256], -4..3
    q = _crumbs(blocks[:, 32:96]).astype(np.int8) - np.int8(4) * (1 - high.reshape(n, QK_K)).astype(np.int8)
    return _k_weights(d, np.zeros_like(d), scales, np.zeros_like(scales), q.reshape(n, 16, 16))


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    # block_q4_K: d f16 · dmin f16 · scales u8[12] · qs u8[128]
    #   8 sub-blocks of 32: w = (d * scale_j) * q - (dmin * min_j), q in 0..15
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # [N, 1] each
    scales, mins = _k_scales(blocks[:, 4:16])  # [N, 8] each
    return _k_weights(d, dmin, scales, mins, _pairs_of_nibbles(blocks[:, 16:144]))


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    # block_q5_K: d f16 · dmin f16 · scales u8[12] · qh u8[32] · qs u8[128]
    #   as Q4_K with a fifth bit, q in 0..31: bit j of qh[l] is the top bit of weight l of sub-block j
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # [N, 1] each
    scales, mins = _k_scales(blocks[:, 4:16])  # [N, 8] each
    fifth = (blocks[:, None, 16:48] >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # [N, 8, 32]
    return _k_weights(d, dmin, scales, mins, _pairs_of_nibbles(blocks[:, 48:176]) | (fifth << 4))


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    # block_q6_K: ql u8[128] · qh u8[64] · scales i8[16] · d f16
    #   16 sub-blocks of 16: w = (d * scale_j) * (q - 32), q 6 bits. Each half of 128 weights uses 64
    #   bytes of ql and 32 of qh: weight 32g + l (g = 0..3) has the low (g = 0, 1) or high (g = 2, 3)
    #   nibble of ql[l + 32 (g % 2)] as its low 4 bits, and bits 2g, 2g+1 of qh[l] as its top 2.
    n = len(blocks)
    ql = blocks[:, 0:128].reshape(n, 2, 1, 64)  # [N, half, 1, 64]
    low4 = np.concatenate([ql & 0x0F, ql >> 4], axis=2).reshape(n, 2, 4, 32)  # [N, half, g, 32]
    # [N, half, g, 32]
    top2 = (blocks[:, 128:192].reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3
    q = (low4 | (top2 << 4)).astype(np.int8) - np.int8(32)  # [N, 2, 4, 32], -32..31
    scales = blocks[:, 192:208].view(np.int8)  # [N, 16]
    d = _f16(blocks[:, 208:210])  # [N, 1]
    return _k_weights(d, np.zeros_like(d), scales, np.zeros_like(scales), q.reshape(n, 16, 16))


@dataclass(frozen=True)
class BlockType:
    name: str
    weights: int  # weights per block
    nbytes: int  # bytes per block
    dequantize: Callable[[np.ndarray], np.ndarray]  # [N, nbytes] uint8 -> [N, weights] float32


# The types tfcli dequantizes: the floats, llama.cpp's original block quantizations and its k-quants.
BLOCK_TYPES: dict[int, BlockType] = {
    GGMLType.F32: BlockType("F32", 1, 4, _f32), GGMLType.F16: BlockType("F16", 1, 2, _f16),
    GGMLType.BF16: BlockType("BF16", 1, 2, _bf16), GGMLType.Q4_0: BlockType("Q4_0", 32, 18, _q4_0),
    GGMLType.Q4_1: BlockType("Q4_1", 32, 20, _q4_1), GGMLType.Q5_0: BlockType("Q5_0", 32, 22, _q5_0),
    GGMLType.Q5_1: BlockType("Q5_1", 32, 24, _q5_1), GGMLType.Q8_0: BlockType("Q8_0", 32, 34, _q8_0),
    GGMLType.Q2_K: BlockType("Q2_K", QK_K, 84, _q2_k), GGMLType.Q3_K: BlockType("Q3_K", QK_K, 110, _q3_k),
    GGMLType.Q4_K: BlockType("Q4_K", QK_K, 144, _q4_k), GGMLType.Q5_K: BlockType("Q5_K", QK_K, 176, _q5_k),
    GGMLType.Q6_K: BlockType("Q6_K", QK_K, 210, _q6_k),
}
SUPPORTED_TYPES = ", ".join(b.name for b in BLOCK_TYPES.values())


def dequantize(data: np.ndarray, type_id: int, shape: tuple[int, ...]) -> np.ndarray:
    """Raw bytes of one tensor (uint8) -> float32 array of `shape` (NumPy order, last axis = a row)."""
    bt = BLOCK_TYPES.get(type_id)
    if bt is None:
        name = TYPE_NAMES.get(type_id, type_id)
        raise GGUFError(f"tensor type {name} is not supported", f"tfcli dequantizes {SUPPORTED_TYPES}")
    blocks = np.asarray(data, dtype=np.uint8).reshape(-1, bt.nbytes)  # [N, nbytes]
    return bt.dequantize(blocks).reshape(shape)


# --- quantizing: float32 rows -> blocks (what `--quantize` and `convert --quantize` write) ---------------


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's roundf (halves away from zero), which llama.cpp's quantizers use; NumPy's rint rounds halves to even."""
    return np.copysign(np.floor(np.abs(x) + np.float32(0.5)), x)


def _quantize_q8_0(w: np.ndarray) -> np.ndarray:
    # quantize_row_q8_0_ref: d = max|w| / 127, q = roundf(w / d)        [N, 32] -> [N, 34]
    d = np.abs(w).max(axis=1, keepdims=True) / np.float32(127)  # [N, 1]
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)  # [N, 1]
    q = _round_half_away(w * inv).astype(np.int8)  # [N, 32], -127..127
    return np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=1)


def _quantize_q4_0(w: np.ndarray) -> np.ndarray:
    # quantize_row_q4_0_ref: the weight of largest magnitude m (its sign kept), d = m / -8,
    # q = min(15, trunc(w / d + 8.5)): m itself becomes q = 0, the other end of the range 15.   [N, 32] -> [N, 18]
    m = np.take_along_axis(w, np.abs(w).argmax(axis=1)[:, None], axis=1)  # [N, 1]
    d = m / np.float32(-8)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)  # [N, 1]
    q = np.trunc(w * inv + np.float32(8.5)).astype(np.uint8).clip(0, 15)  # [N, 32]
    # low nibbles: weights 0..15
    return np.concatenate([d.astype(np.float16).view(np.uint8), q[:, :16] | (q[:, 16:] << np.uint8(4))], axis=1)


QUANTIZERS: dict[str, tuple[int, Callable[[np.ndarray], np.ndarray]]] = {
    "q8_0": (GGMLType.Q8_0, _quantize_q8_0),
    "q4_0": (GGMLType.Q4_0, _quantize_q4_0),
}


def quantize(w: np.ndarray, kind: str) -> tuple[int, np.ndarray]:
    """Float32 rows [N, K] (K a multiple of 32) -> (type id, blocks [N, K/32 * bytes per block] uint8),
    as llama.cpp's reference quantizers write them (tests hold them to gguf-py's, bit for bit)."""
    type_id, fn = QUANTIZERS[kind]
    n, k = w.shape
    blocks = fn(np.ascontiguousarray(w, dtype=np.float32).reshape(-1, 32))  # [N*K/32, bytes]
    return type_id, blocks.reshape(n, -1)
