"""The compiled decode blocks' source (fast/blocks.py runs it): a numba job, compiled by build.py with
jobs.py's, that takes T rows through a model's blocks on the caller's thread and hands each
product and attention to the pool as the jobs of jobs.py and attention_job.py. Imported only in build.py's process:
importing it imports numba."""

from __future__ import annotations

import numpy as np
from numba import carray

from . import llvm
from .attention_job import _rms_row
from .jobs import _exp, _f32, _float_bits, _i64
from .slots import (A_BQKV, A_CHUNKS, A_COL, A_COS, A_COUNT, A_DH, A_EPS, A_HALF, A_HKV, A_K, A_KD, A_KH, A_KNORM, A_NHEAD, A_ORDER, A_OUT, A_PREP,
                    A_Q, A_QKV, A_QNORM, A_QSCALE, A_ROWS, A_S, A_SCRATCH, A_SHARE, A_SIN, A_SPLIT, A_TABLE, A_THREADS_FROM, A_V, A_VH, A_VS, B_ACT,
                    B_ASLOTS, B_ATTENTION, B_COS, B_COS2, B_D, B_DH, B_EPS, B_F, B_FROM, B_GU, B_H, B_HB, B_HKV, B_L, B_LAYERS, B_MO, B_O, B_POOL,
                    B_QKV, B_QM, B_QSCALE, B_R2, B_ROWS, B_RUN, B_SCRATCH, B_SHARED, B_SIN, B_SIN2, B_T, B_THREADS, B_X, B_Z, LS, L_ACT, L_BO,
                    L_BQKV, L_CACHE, L_CALLS, L_KNORM, L_NORM1, L_NORM2, L_ORDER, L_POST1, L_POST2, L_QNORM, L_ROPE, L_SLIDING, L_WINDOW, PREP,
                    PREP_ONLY, RS, R_KG, R_KW, R_OFF, R_POS, R_SLIDES, R_VG, R_VW, SLOTS)  # fmt: skip


def _products(a, layer, m):
    """Matrix m of the layer (L_CALLS): its calls of the product jobs, on the pool's threads (tfcli_run)."""
    for j in range(2):
        at = L_CALLS + (m * 2 + j) * 4
        if layer[at + 2] != 0 and llvm.run(a[B_RUN], a[B_POOL], layer[at], layer[at + 1], layer[at + 2], layer[at + 3]) != 0:
            raise RuntimeError("a product failed")


def _cache_row(row, layer, li):
    """Row `row`'s keys and values at layer li (`layer`, its row of the layer table): (keys' address,
    head and d strides; values' address, head and s strides; the column of position 0)."""
    sliding, index = layer[L_SLIDING], layer[L_CACHE]
    if row[R_SLIDES] == 0:  # a batch's cache: every layer keeps every position, layer l at l
        sliding, index = 0, li
    kv, vv = (R_KW, R_VW) if sliding else (R_KG, R_VG)
    off = row[R_OFF] if sliding else 0
    return row[kv] + 4 * index * row[kv + 1], row[kv + 2], row[kv + 3], row[vv] + 4 * index * row[vv + 1], row[vv + 2], row[vv + 3], off


def decode_blocks(a, c):
    """T rows (a decode step, a lookup check, a short prompt, a batch step) through blocks FROM..L-1 of a Llama-style
    (or Gemma 3) model, each step of Transformer.block in turn on the caller's thread, the products and the
    attention handed to the pool as jobs of their own (the same calls kernels.py makes), so that a
    step costs one call instead of a hundred Python ones a block:

        h = rms_norm(x) * norm1;  q, k, v = h W_qkv (+ b);  q, k normed per head (Qwen3);  RoPE
        k, v into the cache;  z = attention of each row over the positions it sees;  x += z W_o (+ b_o)
        h = rms_norm(x) * norm2;  x += (silu(h W_gate) * (h W_up)) W_down

    Gemma 3's block adds a factor on the queries, a RoPE table per kind of layer, norms of the
    attention's and the MLP's outputs and a tanh GELU (the layer table's L_QSCALE .. L_ACT).

    Each row has its cache and position in the row table (R_*): the rows of one sequence (they see
    each other's keys) or of several. x [T, D] is changed in place. Each row's numbers are the same
    bits whatever T is and whatever the other rows are."""
    n, d_model, n_head, n_kv, dh, ff, half = a[B_T], a[B_D], a[B_H], a[B_HKV], a[B_DH], a[B_F], a[B_R2]
    nq, group, threads = (n_head + 2 * n_kv) * dh, n_head // n_kv, a[B_THREADS]
    eps = _float_bits(np.int32(a[B_EPS]))
    x, hb = carray(_f32(a[B_X]), (n, d_model)), carray(_f32(a[B_HB]), (n, d_model))
    o, mo = carray(_f32(a[B_O]), (n, d_model)), carray(_f32(a[B_MO]), (n, d_model))
    gu, act = carray(_f32(a[B_GU]), (n, 2 * ff)), carray(_f32(a[B_ACT]), (n, ff))
    table, rows = carray(_i64(a[B_LAYERS]), (a[B_L], LS)), carray(_i64(a[B_ROWS]), (n, RS))
    s = carray(_i64(a[B_ASLOTS]), (SLOTS,))
    for li in range(a[B_FROM], a[B_L]):
        layer = table[li]
        norm1, norm2 = carray(_f32(layer[L_NORM1]), (d_model,)), carray(_f32(layer[L_NORM2]), (d_model,))
        for t in range(n):
            _rms_row(x[t], norm1, hb[t], eps)
        _products(a, layer, 0)  # qkv = hb W_qkv, in the stored order of its columns
        tables = (B_COS, B_SIN) if layer[L_ROPE] == 0 else (B_COS2, B_SIN2)
        window = layer[L_WINDOW]
        used = 0  # floats of the scratch the rows before took (a batch step's rows each have their own)
        for t in range(n):  # each row's attention slots: its queries, key and value made from its product, then its attention (attention_job.py)
            k_at, k_h, k_d, v_at, v_h, v_s, off = _cache_row(rows[t], layer, li)
            end = rows[t, R_POS] - off + 1
            first = end - window if window > 0 and end > window else 0
            s_len = end - first
            chunks = threads if n == 1 and threads > 1 and s_len * n_kv * group * dh >= A_THREADS_FROM else 1  # kernels.attention's rule
            split = 1 if n_kv % chunks == 0 else min(group, chunks)
            chunks = min(chunks, n_kv * split)
            r = carray(_i64(a[B_ASLOTS] + 8 * SLOTS * t), (SLOTS,))  # row t's slots
            r[A_Q], r[A_ROWS], r[A_DH], r[A_HKV] = a[B_QM] + 4 * t * nq, group, dh, n_kv
            r[A_K], r[A_KH], r[A_KD] = k_at + 4 * first, k_h, k_d
            r[A_V], r[A_VH], r[A_VS] = v_at + 4 * first * v_s, v_h, v_s
            r[A_S], r[A_OUT], r[A_CHUNKS], r[A_SCRATCH], r[A_SPLIT] = s_len, a[B_Z] + 4 * t * n_head * dh, chunks, a[B_SCRATCH] + 4 * used, split
            r[A_QKV], r[A_ORDER], r[A_BQKV], r[A_QNORM], r[A_KNORM] = a[B_QKV] + 4 * t * nq, layer[L_ORDER], layer[L_BQKV], layer[L_QNORM], layer[L_KNORM]
            r[A_QSCALE], r[A_EPS], r[A_HALF], r[A_NHEAD], r[A_COL] = a[B_QSCALE], a[B_EPS], half, n_head, end - 1 - first
            r[A_COS], r[A_SIN] = a[tables[0]] + 4 * t * half, a[tables[1]] + 4 * t * half
            used += group * s_len
        # A row makes its queries, key and value and attends in one chunk, on one thread. Rows of one
        # sequence see each other's keys, and a row whose heads two chunks share needs them made
        # first: then a call that makes them all, and one that attends.
        apart = a[B_SHARED] != 0 or chunks > 1
        share = n if n > 1 else chunks  # several rows: a chunk each, which the threads take as they come
        s[A_COUNT], s[A_TABLE] = n, a[B_ASLOTS]
        for step in range(2 if apart else 1):
            for t in range(n):
                carray(_i64(a[B_ASLOTS] + 8 * SLOTS * t), (SLOTS,))[A_PREP] = (PREP | PREP_ONLY if step == 0 else 0) if apart else PREP
            s[A_SHARE] = n if step == 0 and apart else share
            if llvm.run(a[B_RUN], a[B_POOL], 0, a[B_ATTENTION], a[B_ASLOTS], s[A_SHARE]) != 0:
                raise RuntimeError("attention failed")
        _products(a, layer, 1)  # o = z W_o
        if layer[L_BO] != 0:
            bias = carray(_f32(layer[L_BO]), (d_model,))
            for t in range(n):
                for j in range(d_model):
                    o[t, j] += bias[j]
        for t in range(n):
            if layer[L_POST1] != 0:
                _rms_row(o[t], carray(_f32(layer[L_POST1]), (d_model,)), o[t], eps)
            for j in range(d_model):
                x[t, j] += o[t, j]
            _rms_row(x[t], norm2, hb[t], eps)
        _products(a, layer, 2)  # gu = hb [W_gate | W_up]
        if layer[L_ACT] == 0:
            for t in range(n):  # SiLU(gate) * up, sigmoid from exp(-|g|) <= 1
                for j in range(ff):
                    g = gu[t, j]
                    e = _exp(-abs(g))
                    act[t, j] = (g / (np.float32(1) + e) if g >= 0 else g * e / (np.float32(1) + e)) * gu[t, ff + j]
        else:
            for t in range(n):  # tanh GELU(gate) * up (ops.gelu), tanh(y) = sign(y) (1 - e) / (1 + e) with e = exp(-2|y|) <= 1
                for j in range(ff):
                    g = gu[t, j]
                    y = (g * g * np.float32(0.044715 * np.sqrt(2.0 / np.pi)) + np.float32(np.sqrt(2.0 / np.pi))) * g
                    e = _exp(np.float32(-2) * abs(y))
                    th = (np.float32(1) - e) / (np.float32(1) + e)
                    act[t, j] = (np.float32(0.5) * g * (np.float32(1) + (th if y >= 0 else -th))) * gu[t, ff + j]
        _products(a, layer, 3)  # mo = act W_down
        for t in range(n):
            if layer[L_POST2] != 0:
                _rms_row(mo[t], carray(_f32(layer[L_POST2]), (d_model,)), mo[t], eps)
            for j in range(d_model):
                x[t, j] += mo[t, j]


HELPERS = ("_exp", "_rms_row", "_products", "_cache_row")  # compiled into the job
JOBS = ("decode_blocks",)
