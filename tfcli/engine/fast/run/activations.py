"""The 8-bit activations the compiled kernels multiply weights by, in NumPy: the textbook twin of
jobs._quantize_x, which tests hold equal to it bit for bit.

As llama.cpp does (ggml-quants.c quantize_row_q8_0 / q8_1 / q8_K), each row of x is cut into
blocks, and a block is stored as integers q and one float32 scale d, x ~ d * q; the dot product of
a block of weights with a block of x is then a sum of integer products and one float multiply:

    d = max|x| / 127,   q = rint(x / d)      (q = 0 where the block is all zeros)

    blocks of 32  (weights Q4_0 Q5_0 Q8_0; with Q4_1 Q5_1 the block's sum of q too, for the minimum term)
    blocks of 256 (weights Q4_K Q5_K Q6_K), with the sum of q of every 16 values (the minimums)

Each value of x is then within 1/254 of its block's largest. Bytes, not 16-bit integers, because
the CPU multiplies twice as many of them per instruction (vpdpbusd, vpmaddubsw: llvm.py): a decode
step's products took 0.55-0.8x the time. What it costs, measured against the textbook (float32 x,
benchmarks/README.md): the next-token distributions move by a KL divergence of about 0.005 nats,
as llama.cpp's own do on the same files, and a text's perplexity does not move in its fourth digit.
The scale stays in float32 and halves round to even (np.rint): NumPy and numba round the same way.
"""

from __future__ import annotations

import numpy as np

KQUANT_TYPES = frozenset({12, 13, 14})  # Q4_K, Q5_K, Q6_K take Q8_K-style activations
QMAX = 127  # the largest |q|


def layout(type_id: int) -> tuple[int, int]:
    """(values per scale, values per sum) of the activations for weights of type_id."""
    return (256, 16) if type_id in KQUANT_TYPES else (32, 32)


def quantize(x: np.ndarray, type_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [T, K] float32 -> (q [T, K] int8, d [T, K/block] float32, sums [T, K/group] int32)."""
    block, group = layout(type_id)
    T, K = x.shape
    blocks = np.asarray(x, np.float32).reshape(T, K // block, block)  # [T, K/block, block]
    d = np.abs(blocks).max(axis=2) / np.float32(QMAX)  # [T, K/block]
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0))  # [T, K/block]
    q = np.clip(np.rint(blocks * inv[:, :, None]), -QMAX, QMAX).astype(np.int8).reshape(T, K)  # [T, K]
    sums = q.reshape(T, K // group, group).sum(axis=2, dtype=np.int32)  # [T, K/group]
    return q, d, sums


def dequantize(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(q [T, K] int8, d [T, K/block] float32) -> d * q [T, K] float32: the x the kernels multiply by."""
    T, K = q.shape
    block = K // d.shape[1]
    return (q.reshape(T, -1, block).astype(np.float32) * d[:, :, None]).reshape(T, K)  # [T, K/block, block] -> [T, K]
