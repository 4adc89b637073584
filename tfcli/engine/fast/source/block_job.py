"""The compiled decode blocks' source (fast/run/blocks.py runs it): numba jobs, compiled by build.py with
jobs.py's, that take T rows through a model's blocks from the caller's thread, handing each
product, each row's attention and each row's steps between two products to the pool (the jobs of
jobs.py, attention_job.py and block_rows here). Imported only in build.py's process: importing it
imports numba."""

from __future__ import annotations

import numpy as np
from numba import carray

from . import llvm
from .attention_job import _quantized_for, _rms_row
from .jobs import _exp, _f32, _float_bits, _i64
from ..arguments import (A_BQKV, A_CHUNKS, A_COL, A_COS, A_COUNT, A_DH, A_EPS, A_HALF, A_HKV, A_K, A_KH, A_KS, A_KNORM, A_NHEAD, A_ORDER, A_OUT, A_PREP,
                    A_Q, A_QKV, A_QNORM, A_QZ, A_QSCALE, A_ROWS, A_S, A_SCRATCH, A_SHARE, A_SIN, A_SPLIT, A_TABLE, A_TAKE, A_THREADS_FROM, A_V, A_VH, A_VS, B_ACT,
                    B_ASLOTS, B_ATTENTION, B_COS, B_COS2, B_D, B_DH, B_EPS, B_F, B_FROM, B_GU, B_H, B_HB, B_HKV, B_L, B_LAYER, B_LAYERS, B_MO, B_O,
                    B_POOL, B_QKV, B_QM, B_QSCALE, B_R2, B_ROWJOB, B_ROWS, B_RUN, B_SCRATCH, B_SELF, B_SHARED, B_SIN, B_SIN2, B_STAGE, B_T,
                    B_THREADS, B_X, B_Z, LS, L_ACT, L_BO, L_BQKV, L_CACHE, L_CALLS, L_KNORM, L_NORM1, L_NORM2, L_ORDER, L_POST1, L_POST2, L_QNORM,
                    L_ROPE, L_SLIDING, L_WINDOW, PREP, PREP_ONLY, RS, R_KG, R_KW, R_OFF, R_POS, R_SLIDES, R_VG, R_VW, SLOTS, STAGE_MLP, STAGE_MO,
                    STAGE_O, STAGE_START)  # fmt: skip


def _products(a, layer, m, ready):
    """Matrix m of the layer (L_CALLS): its calls of the product jobs, on the pool's threads (tfcli_run);
    `ready`: x already quantized for them (block_rows), so no `first` job."""
    for j in range(2):
        at = L_CALLS + (m * 2 + j) * 4
        first = 0 if ready else layer[at]
        if layer[at + 2] != 0 and llvm.run(a[B_RUN], a[B_POOL], first, layer[at + 1], layer[at + 2], layer[at + 3]) != 0:
            raise RuntimeError("a product failed")


def _rows(a, n, stage):
    """block_rows' stage for each of the n rows: a chunk each on the pool's threads (one row: on this thread)."""
    a[B_STAGE] = stage
    if llvm.run(a[B_RUN], a[B_POOL] if n > 1 else 0, 0, a[B_ROWJOB], a[B_SELF], n) != 0:
        raise RuntimeError("a block's steps failed")


def _cache_row(row, layer, li):
    """Row `row`'s keys and values at layer li (`layer`, its row of the layer table): (keys' address,
    head and s strides; values' address, head and s strides; the row of position 0)."""
    sliding, index = layer[L_SLIDING], layer[L_CACHE]
    if row[R_SLIDES] == 0:  # a batch's cache: every layer keeps every position, layer l at l
        sliding, index = 0, li
    kv, vv = (R_KW, R_VW) if sliding else (R_KG, R_VG)
    off = row[R_OFF] if sliding else 0
    return row[kv] + 4 * index * row[kv + 1], row[kv + 2], row[kv + 3], row[vv] + 4 * index * row[vv + 1], row[vv + 2], row[vv + 3], off


def decode_blocks(a, c):
    """T rows (a decode step, a lookup check, a short prompt, a batch step) through blocks FROM..L-1 of a Llama-style
    (or Gemma 3) model, each step of Transformer.block in turn, handed to the pool as jobs from the caller's
    thread: the products (the same calls kernels.py makes), each row's attention (attention_job.py,
    which first makes its queries, key and value) and each row's steps between two products
    (block_rows, which then quantizes its x for the next product), so that a step costs one call
    instead of a hundred Python ones a block, and the rows of a batch step share the threads:

        h = rms_norm(x) * norm1;  q, k, v = h W_qkv (+ b);  q, k normed per head (Qwen3);  RoPE
        k, v into the cache;  z = attention of each row over the positions it sees;  x += z W_o (+ b_o)
        h = rms_norm(x) * norm2;  x += (silu(h W_gate) * (h W_up)) W_down

    Gemma 3's block adds a factor on the queries, a RoPE table per kind of layer, norms of the
    attention's and the MLP's outputs and a tanh GELU (the layer table's L_QSCALE .. L_ACT).

    Each row has its cache and position in the row table (R_*): the rows of one sequence (they see
    each other's keys) or of several. x [T, D] is changed in place. Each row's numbers are the same
    bits whatever T is and whatever the other rows are."""
    n, n_head, n_kv, dh, half = a[B_T], a[B_H], a[B_HKV], a[B_DH], a[B_R2]
    nq, group, threads = (n_head + 2 * n_kv) * dh, n_head // n_kv, a[B_THREADS]
    table, rows = carray(_i64(a[B_LAYERS]), (a[B_L], LS)), carray(_i64(a[B_ROWS]), (n, RS))
    every = carray(_i64(a[B_ASLOTS]), (n, SLOTS))  # [T, SLOTS]: each row's attention slots; the first row's also the call's
    s = every[0]
    for li in range(a[B_FROM], a[B_L]):
        layer = table[li]
        a[B_LAYER] = li
        if li == a[B_FROM]:
            _rows(a, n, STAGE_START)  # hb = rms_norm(x) * norm1, quantized for W_qkv (later layers: the last stage of the one before)
        _products(a, layer, 0, True)  # qkv = hb W_qkv, in the stored order of its columns
        tables = (B_COS, B_SIN) if layer[L_ROPE] == 0 else (B_COS2, B_SIN2)
        window = layer[L_WINDOW]
        used = 0  # floats of the scratch the rows before took (a batch step's rows each have their own)
        for t in range(n):  # each row's attention slots: its queries, key and value made from its product, then its attention (attention_job.py)
            k_at, k_h, k_s, v_at, v_h, v_s, off = _cache_row(rows[t], layer, li)
            end = rows[t, R_POS] - off + 1
            first = end - window if window > 0 and end > window else 0
            s_len = end - first
            chunks = threads if n == 1 and threads > 1 and s_len * n_kv * group * dh >= A_THREADS_FROM else 1  # kernels.attention's rule
            split = 1 if n_kv % chunks == 0 else min(group, chunks)
            chunks = min(chunks, n_kv * split)
            r = every[t]
            r[A_Q], r[A_ROWS], r[A_DH], r[A_HKV] = a[B_QM] + 4 * t * nq, group, dh, n_kv
            r[A_K], r[A_KH], r[A_KS] = k_at + 4 * first * k_s, k_h, k_s
            r[A_V], r[A_VH], r[A_VS] = v_at + 4 * first * v_s, v_h, v_s
            r[A_S], r[A_OUT], r[A_CHUNKS], r[A_SCRATCH], r[A_SPLIT] = s_len, a[B_Z] + 4 * t * n_head * dh, chunks, a[B_SCRATCH] + 4 * used, split
            r[A_QKV], r[A_ORDER], r[A_BQKV], r[A_QNORM], r[A_KNORM] = a[B_QKV] + 4 * t * nq, layer[L_ORDER], layer[L_BQKV], layer[L_QNORM], layer[L_KNORM]
            r[A_QSCALE], r[A_EPS], r[A_HALF], r[A_NHEAD], r[A_COL] = a[B_QSCALE], a[B_EPS], half, n_head, end - 1 - first
            r[A_COS], r[A_SIN] = a[tables[0]] + 4 * t * half, a[tables[1]] + 4 * t * half
            r[A_QZ] = a[B_LAYERS] + 8 * li * LS if n > 1 else 0  # several rows: each quantizes its output for W_o (_quantized_for)
            used += group * s_len
        for t in range(n):  # the rows by their keys, most first (ties: the lower row first): the chunks take the longest first
            s_len, rank = every[t, A_S], 0
            for j in range(n):
                if every[j, A_S] > s_len or (every[j, A_S] == s_len and j < t):
                    rank += 1
            every[rank, A_TAKE] = t
        # A row makes its queries, key and value and attends in one chunk, on one thread. Rows of one
        # sequence see each other's keys, and a row whose heads two chunks share needs them made
        # first: then a call that makes them all, and one that attends.
        apart = a[B_SHARED] != 0 or chunks > 1
        s[A_COUNT], s[A_TABLE] = n, a[B_ASLOTS]
        for step in range(2 if apart else 1):
            mode = PREP if not apart else PREP | PREP_ONLY if step == 0 else 0
            every[:, A_PREP] = mode
            s[A_SHARE] = n if n > 1 or mode & PREP_ONLY else chunks  # several rows: a chunk each, which the threads take as they come
            if llvm.run(a[B_RUN], a[B_POOL], 0, a[B_ATTENTION], a[B_ASLOTS], s[A_SHARE]) != 0:
                raise RuntimeError("attention failed")
        _products(a, layer, 1, n > 1)  # o = z W_o (several rows: z quantized by each row's attention)
        _rows(a, n, STAGE_O)  # x += o; hb = rms_norm(x) * norm2
        _products(a, layer, 2, True)  # gu = hb [W_gate | W_up]
        _rows(a, n, STAGE_MLP)  # act = silu(gate) * up
        _products(a, layer, 3, True)  # mo = act W_down
        _rows(a, n, STAGE_MO)  # x += mo; the next layer's hb


def block_rows(a, c):
    """Row c's steps of Transformer.block between two products (stage B_STAGE of layer B_LAYER, as
    decode_blocks' docstring writes them), then its x quantized for the next product: a chunk per
    row, so that the rows of a batch step run them on the pool's threads. Each row's numbers are
    the same bits whatever the other rows are."""
    d_model, ff, li, stage = a[B_D], a[B_F], a[B_LAYER], a[B_STAGE]
    eps = _float_bits(np.int32(a[B_EPS]))
    table = carray(_i64(a[B_LAYERS]), (a[B_L], LS))
    layer = table[li]
    x, hb = carray(_f32(a[B_X] + 4 * c * d_model), (d_model,)), carray(_f32(a[B_HB] + 4 * c * d_model), (d_model,))
    if stage == STAGE_START:
        _rms_row(x, carray(_f32(layer[L_NORM1]), (d_model,)), hb, eps)
        _quantized_for(layer, 0, c)
    elif stage == STAGE_O:
        o = carray(_f32(a[B_O] + 4 * c * d_model), (d_model,))
        if layer[L_BO] != 0:
            bias = carray(_f32(layer[L_BO]), (d_model,))
            for j in range(d_model):
                o[j] += bias[j]
        if layer[L_POST1] != 0:
            _rms_row(o, carray(_f32(layer[L_POST1]), (d_model,)), o, eps)
        for j in range(d_model):
            x[j] += o[j]
        _rms_row(x, carray(_f32(layer[L_NORM2]), (d_model,)), hb, eps)
        _quantized_for(layer, 2, c)
    elif stage == STAGE_MLP:
        gu, act = carray(_f32(a[B_GU] + 4 * c * 2 * ff), (2 * ff,)), carray(_f32(a[B_ACT] + 4 * c * ff), (ff,))
        if layer[L_ACT] == 0:
            for j in range(ff):  # SiLU(gate) * up, sigmoid from exp(-|g|) <= 1
                g = gu[j]
                e = _exp(-abs(g))
                act[j] = (g / (np.float32(1) + e) if g >= 0 else g * e / (np.float32(1) + e)) * gu[ff + j]
        else:
            for j in range(ff):  # tanh GELU(gate) * up (ops.gelu), tanh(y) = sign(y) (1 - e) / (1 + e) with e = exp(-2|y|) <= 1
                g = gu[j]
                y = (g * g * np.float32(0.044715 * np.sqrt(2.0 / np.pi)) + np.float32(np.sqrt(2.0 / np.pi))) * g
                e = _exp(np.float32(-2) * abs(y))
                th = (np.float32(1) - e) / (np.float32(1) + e)
                act[j] = (np.float32(0.5) * g * (np.float32(1) + (th if y >= 0 else -th))) * gu[ff + j]
        _quantized_for(layer, 3, c)
    else:  # STAGE_MO
        mo = carray(_f32(a[B_MO] + 4 * c * d_model), (d_model,))
        if layer[L_POST2] != 0:
            _rms_row(mo, carray(_f32(layer[L_POST2]), (d_model,)), mo, eps)
        for j in range(d_model):
            x[j] += mo[j]
        if li + 1 < a[B_L]:
            nxt = table[li + 1]
            _rms_row(x, carray(_f32(nxt[L_NORM1]), (d_model,)), hb, eps)
            _quantized_for(nxt, 0, c)

HELPERS = ("_exp", "_rms_row", "_products", "_quantized_for", "_rows", "_cache_row")  # compiled into the jobs
JOBS = ("decode_blocks", "block_rows")
