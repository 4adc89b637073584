"""The compiled decode blocks' source (fast/run/blocks.py runs it): numba jobs, compiled by build.py with
jobs.py's, that take T rows through a model's blocks from the caller's thread, handing each
product, each row's attention and each row's steps between two products to the pool (the jobs of
jobs.py, attention_job.py and block_rows here). Imported only in build.py's process: importing it
imports numba."""

from __future__ import annotations

import numpy as np
from numba import carray

from . import llvm
from .attention_job import _kv_at, _quantized_for, _rms_row
from .jobs import _exp, _f32, _float_bits, _i64
from ..arguments import (
    ATTENTION_THREADS_FROM, CALL_WIDTH, KV_F16, KV_F32, LAYER_WIDTH, PREP, PREP_ONLY, ROW_WIDTH, SLOTS, Attention,
    Blocks, Call, LayerColumn, RowColumn, Stage,
)


def _products(a, layer, m, ready):
    """Matrix m of the layer (LayerColumn.CALLS): its calls of the product jobs, on the pool's threads (tfcli_run);
    `ready`: x already quantized for them (block_rows), so no `first` job."""
    for j in range(2):
        at = LayerColumn.CALLS + (m * 2 + j) * CALL_WIDTH
        first = 0 if ready else layer[at + Call.FIRST]
        job, args, chunks = layer[at + Call.JOB], layer[at + Call.ARGS], layer[at + Call.CHUNKS]
        if args != 0 and llvm.run(a[Blocks.RUN], a[Blocks.POOL], first, job, args, chunks) != 0:
            raise RuntimeError("a product failed")


def _rows(a, n, stage):
    """block_rows' stage for each of the n rows: a chunk each on the pool's threads (one row: on this thread)."""
    a[Blocks.STAGE] = stage
    if llvm.run(a[Blocks.RUN], a[Blocks.POOL] if n > 1 else 0, 0, a[Blocks.ROWJOB], a[Blocks.SELF], n) != 0:
        raise RuntimeError("a block's steps failed")


def _cache_row(row, layer, li):
    """RowColumn `row`'s keys and values at layer li (`layer`, its row of the layer table): (keys' address,
    head and s strides; values' address, head and s strides; the row of position 0)."""
    sliding, index = layer[LayerColumn.SLIDING], layer[LayerColumn.CACHE]
    if row[RowColumn.SLIDES] == 0:  # a batch's cache: every layer keeps every position, layer l at l
        sliding, index = 0, li
    kv, vv = (RowColumn.KW, RowColumn.VW) if sliding else (RowColumn.KG, RowColumn.VG)
    off = row[RowColumn.OFF] if sliding else 0
    kind = row[RowColumn.KV]
    return (
        row[kv] + _kv_bytes(kind, index * row[kv + 1]), row[kv + 2], row[kv + 3],
        row[vv] + _kv_bytes(kind, index * row[vv + 1]), row[vv + 2], row[vv + 3], off,
    )


def _kv_bytes(kind, n):
    """Bytes of n numbers of a cache of kind `kind` (RowColumn.KV): 4 or 2 each, Q8_0 34 for 32 (n a multiple)."""
    return _kv_at(kind, n) * (2 if kind == KV_F16 else 4 if kind == KV_F32 else 1)


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
    attention's and the MLP's outputs and a tanh GELU (the layer table's LayerColumn.QSCALE .. LayerColumn.ACT).

    Each row has its cache and position in the row table (R_*): the rows of one sequence (they see
    each other's keys) or of several. x [T, D] is changed in place. Each row's numbers are the same
    bits whatever T is and whatever the other rows are."""
    n, n_head, n_kv, dh, half = a[Blocks.T], a[Blocks.H], a[Blocks.HKV], a[Blocks.DH], a[Blocks.R2]
    nq, group, threads = (n_head + 2 * n_kv) * dh, n_head // n_kv, a[Blocks.THREADS]
    table = carray(_i64(a[Blocks.LAYERS]), (a[Blocks.L], LAYER_WIDTH))
    rows = carray(_i64(a[Blocks.ROWS]), (n, ROW_WIDTH))
    # [T, SLOTS]: each row's attention slots; the first row's also the call's
    every = carray(_i64(a[Blocks.ASLOTS]), (n, SLOTS))
    s = every[0]
    for li in range(a[Blocks.FROM], a[Blocks.L]):
        layer = table[li]
        a[Blocks.LAYER] = li
        if li == a[Blocks.FROM]:
            # hb = rms_norm(x) * norm1, quantized for W_qkv (later layers: the last stage of the one before)
            _rows(a, n, Stage.START)
        _products(a, layer, 0, True)  # qkv = hb W_qkv, in the stored order of its columns
        tables = (Blocks.COS, Blocks.SIN) if layer[LayerColumn.ROPE] == 0 else (Blocks.COS2, Blocks.SIN2)
        window = layer[LayerColumn.WINDOW]
        used = 0  # floats of the scratch the rows before took (a batch step's rows each have their own)
        # each row's attention slots: its queries, key and value made from its product, then its attention
        # (attention_job.py)
        for t in range(n):
            k_at, k_h, k_s, v_at, v_h, v_s, off = _cache_row(rows[t], layer, li)
            end = rows[t, RowColumn.POS] - off + 1
            first = end - window if window > 0 and end > window else 0
            s_len = end - first
            # kernels.attention's rule
            chunks = threads if n == 1 and threads > 1 and s_len * n_kv * group * dh >= ATTENTION_THREADS_FROM else 1
            split = 1 if n_kv % chunks == 0 else min(group, chunks)
            chunks = min(chunks, n_kv * split)
            r = every[t]
            r[Attention.Q], r[Attention.ROWS], r[Attention.DH] = a[Blocks.QM] + 4 * t * nq, group, dh
            r[Attention.HKV] = n_kv
            kind = r[Attention.KV] = rows[t, RowColumn.KV]  # float32, float16 or Q8_0 keys and values
            r[Attention.K], r[Attention.KH], r[Attention.KS] = k_at + _kv_bytes(kind, first * k_s), k_h, k_s
            r[Attention.V], r[Attention.VH], r[Attention.VS] = v_at + _kv_bytes(kind, first * v_s), v_h, v_s
            r[Attention.S], r[Attention.OUT], r[Attention.CHUNKS] = s_len, a[Blocks.Z] + 4 * t * n_head * dh, chunks
            r[Attention.SCRATCH], r[Attention.SPLIT] = a[Blocks.SCRATCH] + 4 * used, split
            r[Attention.QKV], r[Attention.ORDER] = a[Blocks.QKV] + 4 * t * nq, layer[LayerColumn.ORDER]
            r[Attention.BQKV], r[Attention.QNORM] = layer[LayerColumn.BQKV], layer[LayerColumn.QNORM]
            r[Attention.KNORM] = layer[LayerColumn.KNORM]
            r[Attention.QSCALE], r[Attention.EPS], r[Attention.HALF] = a[Blocks.QSCALE], a[Blocks.EPS], half
            r[Attention.NHEAD], r[Attention.COL] = n_head, end - 1 - first
            r[Attention.COS], r[Attention.SIN] = a[tables[0]] + 4 * t * half, a[tables[1]] + 4 * t * half
            # several rows: each quantizes its output for W_o (_quantized_for)
            r[Attention.QZ] = a[Blocks.LAYERS] + 8 * li * LAYER_WIDTH if n > 1 else 0
            used += group * s_len
        # A row makes its queries, key and value and attends in one chunk, on one thread. Rows of one
        # sequence see each other's keys, and a row whose heads two chunks share needs them made
        # first: then a call that makes them all, and one that attends.
        apart = a[Blocks.SHARED] != 0 or chunks > 1
        s[Attention.COUNT], s[Attention.TABLE] = n, a[Blocks.ASLOTS]
        for step in range(2 if apart else 1):
            mode = PREP if not apart else PREP | PREP_ONLY if step == 0 else 0
            every[:, Attention.PREP] = mode
            # several rows: a chunk each, which the threads take as they come
            s[Attention.SHARE] = n if n > 1 or mode & PREP_ONLY else chunks
            if (
                llvm.run(a[Blocks.RUN], a[Blocks.POOL], 0, a[Blocks.ATTENTION], a[Blocks.ASLOTS], s[Attention.SHARE])
                != 0
            ):
                raise RuntimeError("attention failed")
        _products(a, layer, 1, n > 1)  # o = z W_o (several rows: z quantized by each row's attention)
        _rows(a, n, Stage.O)  # x += o; hb = rms_norm(x) * norm2
        _products(a, layer, 2, True)  # gu = hb [W_gate | W_up]
        _rows(a, n, Stage.MLP)  # act = silu(gate) * up
        _products(a, layer, 3, True)  # mo = act W_down
        _rows(a, n, Stage.MO)  # x += mo; the next layer's hb


def block_rows(a, c):
    """Row c's steps of Transformer.block between two products (stage Blocks.STAGE of layer Blocks.LAYER, as
    decode_blocks' docstring writes them), then its x quantized for the next product: a chunk per
    row, so that the rows of a batch step run them on the pool's threads. Each row's numbers are
    the same bits whatever the other rows are."""
    d_model, ff, li, stage = a[Blocks.D], a[Blocks.F], a[Blocks.LAYER], a[Blocks.STAGE]
    eps = _float_bits(np.int32(a[Blocks.EPS]))
    table = carray(_i64(a[Blocks.LAYERS]), (a[Blocks.L], LAYER_WIDTH))
    layer = table[li]
    x = carray(_f32(a[Blocks.X] + 4 * c * d_model), (d_model,))
    hb = carray(_f32(a[Blocks.HB] + 4 * c * d_model), (d_model,))
    if stage == Stage.START:
        _rms_row(x, carray(_f32(layer[LayerColumn.NORM1]), (d_model,)), hb, eps)
        _quantized_for(layer, 0, c)
    elif stage == Stage.O:
        o = carray(_f32(a[Blocks.O] + 4 * c * d_model), (d_model,))
        if layer[LayerColumn.BO] != 0:
            bias = carray(_f32(layer[LayerColumn.BO]), (d_model,))
            for j in range(d_model):
                o[j] += bias[j]
        if layer[LayerColumn.POST1] != 0:
            _rms_row(o, carray(_f32(layer[LayerColumn.POST1]), (d_model,)), o, eps)
        for j in range(d_model):
            x[j] += o[j]
        _rms_row(x, carray(_f32(layer[LayerColumn.NORM2]), (d_model,)), hb, eps)
        _quantized_for(layer, 2, c)
    elif stage == Stage.MLP:
        gu = carray(_f32(a[Blocks.GU] + 4 * c * 2 * ff), (2 * ff,))
        act = carray(_f32(a[Blocks.ACT] + 4 * c * ff), (ff,))
        if layer[LayerColumn.ACT] == 0:
            for j in range(ff):  # SiLU(gate) * up, sigmoid from exp(-|g|) <= 1
                g = gu[j]
                e = _exp(-abs(g))
                act[j] = (g / (np.float32(1) + e) if g >= 0 else g * e / (np.float32(1) + e)) * gu[ff + j]
        else:
            # tanh GELU(gate) * up (ops.gelu), tanh(y) = sign(y) (1 - e) / (1 + e) with e = exp(-2|y|) <= 1
            for j in range(ff):
                g = gu[j]
                y = (g * g * np.float32(0.044715 * np.sqrt(2.0 / np.pi)) + np.float32(np.sqrt(2.0 / np.pi))) * g
                e = _exp(np.float32(-2) * abs(y))
                th = (np.float32(1) - e) / (np.float32(1) + e)
                act[j] = (np.float32(0.5) * g * (np.float32(1) + (th if y >= 0 else -th))) * gu[ff + j]
        _quantized_for(layer, 3, c)
    else:  # Stage.MO
        mo = carray(_f32(a[Blocks.MO] + 4 * c * d_model), (d_model,))
        if layer[LayerColumn.POST2] != 0:
            _rms_row(mo, carray(_f32(layer[LayerColumn.POST2]), (d_model,)), mo, eps)
        for j in range(d_model):
            x[j] += mo[j]
        if li + 1 < a[Blocks.L]:
            nxt = table[li + 1]
            _rms_row(x, carray(_f32(nxt[LayerColumn.NORM1]), (d_model,)), hb, eps)
            _quantized_for(nxt, 0, c)


# compiled into the jobs
HELPERS = ("_exp", "_rms_row", "_products", "_quantized_for", "_rows", "_cache_row", "_kv_at", "_kv_bytes")
JOBS = ("decode_blocks", "block_rows")
