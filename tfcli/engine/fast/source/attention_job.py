"""The compiled attention of a decode step, and of each row of the compiled blocks (block_job.py):
a numba job, compiled by build.py with jobs.py's. Imported only in build.py's process: importing it
imports numba."""

from __future__ import annotations

import numpy as np
from numba import carray

from numba import types

from .llvm import _FEATURES
from .llvm_attention import dots, half_put, kv_get, kv_put, tile_1, tile_4
from .jobs import _exp, _f32, _float_bits, _i64, _pointer, _quantize_rows
from ..arguments import (
    CALL_WIDTH, KV_F16, KV_Q8_0, LAYER_WIDTH, PREP, PREP_ONLY, SLOTS, Attention, Call, LayerColumn,
)

_u16 = _pointer(types.uint16)  # a float16 cache's bits
_i8 = _pointer(types.int8)  # a Q8_0 cache's bytes


def attention(a, c):
    """softmax(q k^T / sqrt(Dh)) v for a decode step (T = 1), chunk c of the Hkv key/value heads: the
    scores of a head's G queries over its S keys, their exponentials, and the values they weight,
    summed before dividing by the exponentials' sum, as fast/run/dense_ops._attention_block does. The keys,
    kept position by position, 16 at a time for each query (llvm_attention.dots); the values 64
    (then 16) columns at a time, read once for the G queries (or for each of Attention.SPLIT parts of them,
    so that more threads than heads share the work; llvm_attention.tile_*). Each query's numbers
    are the same bits however the queries are cut.

    Several rows of a batch step in one call (Attention.COUNT > 1): `a` is the first of Attention.COUNT rows of
    slots (at Attention.TABLE, SLOTS apart), each row's heads in one chunk (its Attention.CHUNKS 1), and chunk c
    takes the rows of slots c, c + Attention.SHARE, ... (the threads take chunks as they come): the same code, so
    the same bits, as a row alone.

    A row of the compiled blocks (block_job.py, Attention.PREP) first turns its Q/K/V product into its
    queries and writes its key and value into its cache (_prep): on the thread that then reads
    them, and for each row of a batch step on the thread its chunk runs on; such a row then quantizes
    its output for W_o's product (Attention.QZ: its layer's row of the layer table), as block_rows does its x
    for the others: on the two threads, where W_o's first job would quantize all the rows on one."""
    count = a[Attention.COUNT]
    first, step = (c, a[Attention.SHARE]) if count > 1 else (0, 1)
    table = carray(_i64(a[Attention.TABLE]), (count, SLOTS)) if count > 1 else carray(a, (1, SLOTS))  # [rows, SLOTS]
    for k in range(first, max(count, 1), step):
        t = k if count > 1 else 0
        s = table[t]
        if s[Attention.PREP] & PREP:
            _prep(s)
        if not s[Attention.PREP] & PREP_ONLY:
            _attend(s, c if count <= 1 else 0)
            if s[Attention.QZ] != 0:  # its output quantized for W_o's calls, as their first job would (the same bits)
                _quantized_for(carray(_i64(s[Attention.QZ]), (LAYER_WIDTH,)), 1, t)


# 64 columns of values at a time (tile_4) where 32 vector registers hold its up to 16 sums of 16 floats;
# on AVX2's 16 they spill, so 16 columns at a time there (tile_1: each value still read once; with the scores
# one key at a time, a step at depth 1024 took 5% less CPU time on an AMD Zen 1, within its noise for q8_0).
# Each output number gets the same fmas in the same order either way: the same bits.
WIDE_TILES = "avx512f" in _FEATURES


def _kv_at(kind, n):
    """The element of a cache's array (Attention.KV `kind`) where its number n is (n a multiple of 32 for
    Q8_0: a block's first byte, 34 bytes for 32 numbers), or its elements before number n."""
    return n // 32 * 34 if kind == KV_Q8_0 else n


def _attend(a, c):
    """attention() of one row: its slots `a`, chunk c of its heads, on a float32, a float16 or a Q8_0
    cache (Attention.KV): the same code, compiled for each (_heads)."""
    n_kv, s_len, kind = a[Attention.HKV], a[Attention.S], a[Attention.KV]
    kn = (n_kv - 1) * a[Attention.KH] + s_len * a[Attention.KS]  # numbers from the first key to past the last
    vn = (n_kv - 1) * a[Attention.VH] + s_len * a[Attention.VS]
    if kind == KV_F16:
        _heads(a, c, carray(_u16(a[Attention.K]), (kn,)), carray(_u16(a[Attention.V]), (vn,)))
    elif kind == KV_Q8_0:
        keys = carray(_i8(a[Attention.K]), (_kv_at(kind, kn),))  # bytes
        _heads(a, c, keys, carray(_i8(a[Attention.V]), (_kv_at(kind, vn),)))
    else:
        _heads(a, c, carray(_f32(a[Attention.K]), (kn,)), carray(_f32(a[Attention.V]), (vn,)))


def _heads(a, c, keys, values):
    """_attend over the keys and values of every head (float32, float16 bits as uint16, or Q8_0 blocks' bytes:
    offsets count numbers, which kv_get, dots and the tiles find in the blocks)."""
    rows, dh, n_kv, s_len = a[Attention.ROWS], a[Attention.DH], a[Attention.HKV], a[Attention.S]
    chunks = a[Attention.CHUNKS]
    q = carray(_f32(a[Attention.Q]), (n_kv * rows * dh,))
    out = carray(_f32(a[Attention.OUT]), (n_kv * rows * dh,))
    e = carray(_f32(a[Attention.SCRATCH]), (chunks * rows * s_len,))
    ks, vs, kind = a[Attention.KS], a[Attention.VS], a[Attention.KV]
    scale = np.float32(1.0 / np.sqrt(np.float64(dh)))
    # a head's queries in this many parts (jobs run the parts: Gemma 3's one head on two threads)
    split = a[Attention.SPLIT]
    per = (rows + split - 1) // split
    size = (n_kv * split + chunks - 1) // chunks
    for u in range(c * size, min(n_kv * split, (c + 1) * size)):
        h, part = u // split, u % split
        # head h's [S, Dh] (views)
        k, v = keys[_kv_at(kind, h * a[Attention.KH]) :], values[_kv_at(kind, h * a[Attention.VH]) :]
        for r0 in range(part * per, min(rows, (part + 1) * per), 4):
            n = min(4, min(rows, (part + 1) * per) - r0)
            qo = (h * rows + r0) * dh
            eo = c * rows * s_len + r0 * s_len
            if dh % 16 == 0:  # the scores e[r, j] = (q_r . k_j) * scale, 16 keys at a time
                for j in range(0, s_len, 16):
                    for r in range(n):  # the 16 keys read again from the nearest cache for each row
                        dots(min(16, s_len - j), k, j * ks, ks, q, qo + r * dh, dh, scale, e, eo + r * s_len + j)
            else:
                for j in range(s_len):
                    key = k[j * ks : j * ks + dh]  # views: indices from 0 up, a dot product in vector lanes
                    for r in range(n):
                        qr = q[qo + r * dh : qo + (r + 1) * dh]
                        acc = np.float32(0)
                        for d in range(dh):
                            acc += qr[d] * kv_get(key, d)
                        e[eo + r * s_len + j] = acc * scale
            for r in range(n):
                # [S] a view: indices from 0 up, which LLVM runs in vector lanes
                row = e[eo + r * s_len : eo + (r + 1) * s_len]
                t0 = t1 = t2 = t3 = row[0]  # the largest score, in four chains (a maximum is exact in any order)
                for j in range(0, s_len - 3, 4):
                    t0, t1, t2, t3 = max(t0, row[j]), max(t1, row[j + 1]), max(t2, row[j + 2]), max(t3, row[j + 3])
                for j in range(s_len - s_len % 4, s_len):
                    t0 = max(t0, row[j])
                top = max(max(t0, t1), max(t2, t3))
                for j in range(s_len):
                    row[j] = _exp(row[j] - top)
            d = 0
            while d + 16 <= dh:  # 64 (then 16) columns of the weighted values: out[r, d:] = e_r . v[:, d:]
                wide = WIDE_TILES and d + 64 <= dh
                if wide:
                    tile_4(n, v, d, vs, e, eo, s_len, s_len, out, qo + d, dh)
                else:
                    tile_1(n, v, d, vs, e, eo, s_len, s_len, out, qo + d, dh)
                d += 64 if wide else 16
            for r in range(n):
                # views (indices from 0 up: vector lanes)
                row, o = e[eo + r * s_len : eo + (r + 1) * s_len], out[qo + r * dh : qo + (r + 1) * dh]
                for dd in range(d, dh):
                    acc = np.float32(0)
                    for j in range(s_len):
                        acc += row[j] * kv_get(v, j * vs + dd)
                    o[dd] = acc
                total = np.float32(0)
                for j in range(s_len):
                    # not the view: a sum in order, as before (in vector lanes it moved Gemma 3's greedy text)
                    total += e[eo + r * s_len + j]
                for dd in range(dh):
                    o[dd] /= total


def _quantized_for(layer, m, t):
    """Row t of matrix m's x quantized for each of its calls on quantized weights (`layer`: its row of
    the layer table, LayerColumn.CALLS), into the call's buffers, as the quantize job does for all the rows
    (jobs._quantize_rows: the same bits)."""
    for j in range(2):
        at = LayerColumn.CALLS + (m * 2 + j) * CALL_WIDTH
        if layer[at + Call.FIRST] != 0 and layer[at + Call.ARGS] != 0:
            _quantize_rows(carray(_i64(layer[at + Call.ARGS]), (SLOTS,)), t, t + 1)


def _prep(r):
    """Row r's steps of Transformer.block between its Q/K/V product (Attention.QKV, in the stored order of its
    columns) and its attention: the model's order of the columns, the bias, each head's norm (Qwen3,
    Gemma 3), the queries' factor (Gemma 3), RoPE (pair i with i + R/2 of each query and key head,
    ops.apply_rope), into Attention.Q; then its key and value into column Attention.COL of its cache."""
    n_head, n_kv, dh, half = r[Attention.NHEAD], r[Attention.HKV], r[Attention.DH], r[Attention.HALF]
    nq = (n_head + 2 * n_kv) * dh
    qkv, qm = carray(_f32(r[Attention.QKV]), (nq,)), carray(_f32(r[Attention.Q]), (nq,))
    if r[Attention.ORDER] != 0:
        order = carray(_i64(r[Attention.ORDER]), (nq,))
        for j in range(nq):
            qm[j] = qkv[np.uint64(order[j])]  # an index never negative: no wrap-around test
    else:
        for j in range(nq):
            qm[j] = qkv[j]
    if r[Attention.BQKV] != 0:
        bias = carray(_f32(r[Attention.BQKV]), (nq,))
        for j in range(nq):
            qm[j] += bias[j]
    eps = _float_bits(np.int32(r[Attention.EPS]))
    if r[Attention.QNORM] != 0:
        qn, kn = carray(_f32(r[Attention.QNORM]), (dh,)), carray(_f32(r[Attention.KNORM]), (dh,))
        for hd in range(n_head + n_kv):
            head = qm[hd * dh : (hd + 1) * dh]
            _rms_row(head, qn if hd < n_head else kn, head, eps)
    qscale = _float_bits(np.int32(r[Attention.QSCALE]))
    if qscale != 1:  # Gemma 3: scores scaled by query_pre_attn_scalar^-1/2, not Dh^-1/2
        for j in range(n_head * dh):
            qm[j] *= qscale
    cos, sin = carray(_f32(r[Attention.COS]), (half,)), carray(_f32(r[Attention.SIN]), (half,))
    for hd in range(n_head + n_kv):
        head = qm[hd * dh : (hd + 1) * dh]  # a view, as below: indices from 0 up, which LLVM runs in vector lanes
        for i in range(half):
            x1, x2 = head[i], head[half + i]
            head[i] = x1 * cos[i] - x2 * sin[i]
            head[half + i] = x2 * cos[i] + x1 * sin[i]
    kh, vh, kind = r[Attention.KH], r[Attention.VH], r[Attention.KV]
    if kind == KV_F16:
        _keep(r, qm, carray(_u16(r[Attention.K]), (n_kv * kh,)), carray(_u16(r[Attention.V]), (n_kv * vh,)))
    elif kind == KV_Q8_0:
        keys = carray(_i8(r[Attention.K]), (_kv_at(kind, n_kv * kh),))
        _keep_blocks(r, qm, keys, carray(_i8(r[Attention.V]), (_kv_at(kind, n_kv * vh),)))
    else:
        _keep(r, qm, carray(_f32(r[Attention.K]), (n_kv * kh,)), carray(_f32(r[Attention.V]), (n_kv * vh,)))


def _keep(r, qm, keys, values):
    """Row r's key and value heads (after its queries in qm) into column Attention.COL of its cache
    (float32, or float16 bits rounded to nearest: kv_put)."""
    n_head, n_kv, dh = r[Attention.NHEAD], r[Attention.HKV], r[Attention.DH]
    kh, ks, vh, vs, col = r[Attention.KH], r[Attention.KS], r[Attention.VH], r[Attention.VS], r[Attention.COL]
    for g in range(n_kv):
        key = qm[(n_head + g) * dh : (n_head + g + 1) * dh]
        value = qm[(n_head + n_kv + g) * dh : (n_head + n_kv + g + 1) * dh]
        krow = keys[g * kh + col * ks : g * kh + col * ks + dh]
        vrow = values[g * vh + col * vs : g * vh + col * vs + dh]
        for e in range(dh):
            kv_put(krow, e, key[e])
            kv_put(vrow, e, value[e])


def _keep_blocks(r, qm, keys, values):
    """_keep on a Q8_0 cache: row r's key and value heads quantized into their blocks at column Attention.COL."""
    n_head, n_kv, dh = r[Attention.NHEAD], r[Attention.HKV], r[Attention.DH]
    kh, ks, vh, vs, col = r[Attention.KH], r[Attention.KS], r[Attention.VH], r[Attention.VS], r[Attention.COL]
    for g in range(n_kv):
        key = qm[(n_head + g) * dh : (n_head + g + 1) * dh]
        value = qm[(n_head + n_kv + g) * dh : (n_head + n_kv + g + 1) * dh]
        _q8_row(key, keys[_kv_at(KV_Q8_0, g * kh + col * ks) :])
        _q8_row(value, values[_kv_at(KV_Q8_0, g * vh + col * vs) :])


def _q8_row(x, out):
    """x [Dh] float32 -> its Dh/32 Q8_0 blocks at out's first bytes, bit for bit as formats._quantize_q8_0
    (ggml's quantize_row_q8_0_ref): d = max|x| / 127 rounded to float16, q = round(x * (1 / d)), halves
    away from zero (floor(|y| + 0.5), as formats._round_half_away), each product in float32."""
    for b in range(x.shape[0] // 32):
        amax = np.float32(0)
        for j in range(32):
            amax = max(amax, abs(x[b * 32 + j]))
        d = amax / np.float32(127)
        inv = np.float32(1) / d if d != 0 else np.float32(0)
        half_put(out, b * 34, d)
        for j in range(32):
            y = x[b * 32 + j] * inv
            t = np.int8(np.floor(abs(y) + np.float32(0.5)))
            out[b * 34 + 2 + j] = t if y >= 0 else -t


def _rms_row(x, g, out, eps):
    """out = x / sqrt(mean(x^2) + eps) * g for one vector x [n] (ops.rms_norm); the sum of squares in float64."""
    s = 0.0
    for i in range(x.shape[0]):
        s += np.float64(x[i]) * np.float64(x[i])
    r = np.sqrt(np.float32(s / x.shape[0]) + eps)
    for i in range(x.shape[0]):
        out[i] = x[i] / r * g[i]


# compiled into the job
HELPERS = (
    "_attend", "_heads", "_prep", "_keep", "_keep_blocks", "_q8_row", "_kv_at", "_rms_row", "_exp", "_quantize_rows",
    "_quantized_for",
)
JOBS = ("attention",)
