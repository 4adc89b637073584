"""The compiled attention of a decode step, and of each row of the compiled blocks (block_job.py):
a numba job, compiled by build.py with jobs.py's. Imported only in build.py's process: importing it
imports numba."""

from __future__ import annotations

import numpy as np
from numba import carray

from .llvm_attention import ask, dots, tile_1, tile_4
from .jobs import _exp, _f32, _float_bits, _i64, _quantize_rows
from ..arguments import (A_BQKV, A_CHUNKS, A_COL, A_COS, A_COUNT, A_DH, A_EPS, A_HALF, A_HKV, A_K, A_KH, A_KS, A_KNORM, A_NHEAD, A_ORDER, A_OUT, A_PREP,
                    A_Q, A_QKV, A_QNORM, A_QZ, A_QSCALE, A_ROWS, A_S, A_SCRATCH, A_SHARE, A_SIN, A_SPLIT, A_TABLE, A_TAKE, A_V, A_VH, A_VS, PREP, PREP_ONLY,
                    L_CALLS, LS, SLOTS)  # fmt: skip


ASK_AHEAD = 64  # positions whose values (and the next head's keys) a head asks for before its scores: more were slower after 2,000 positions


def attention(a, c):
    """softmax(q k^T / sqrt(Dh)) v for a decode step (T = 1), chunk c of the Hkv key/value heads: the
    scores of a head's G queries over its S keys, their exponentials, and the values they weight,
    summed before dividing by the exponentials' sum, as fast/run/dense_ops._attention_block does. The keys,
    kept position by position, 16 at a time for each query (llvm_attention.dots); the values 64
    (then 16) columns at a time, read once for the G queries (or for each of A_SPLIT parts of them,
    so that more threads than heads share the work; llvm_attention.tile_*). Each query's numbers
    are the same bits however the queries are cut.

    Several rows of a batch step in one call (A_COUNT > 1): `a` is the first of A_COUNT rows of
    slots (at A_TABLE, SLOTS apart), each row's heads in one chunk (its A_CHUNKS 1), and chunk c
    takes the rows that the rows of slots c, c + A_SHARE, ... name (A_TAKE: the longest first, so
    that the threads, taking chunks as they come, end together): the same code, so the same bits,
    as a row alone.

    A row of the compiled blocks (block_job.py, A_PREP) first turns its Q/K/V product into its
    queries and writes its key and value into its cache (_prep): on the thread that then reads
    them, and for each row of a batch step on the thread its chunk runs on; such a row then quantizes
    its output for W_o's product (A_QZ: its layer's row of the layer table), as block_rows does its x
    for the others: on the two threads, where W_o's first job would quantize all the rows on one."""
    count = a[A_COUNT]
    first, step = (c, a[A_SHARE]) if count > 1 else (0, 1)
    table = carray(_i64(a[A_TABLE]), (count, SLOTS)) if count > 1 else carray(a, (1, SLOTS))  # [rows, SLOTS]
    for k in range(first, max(count, 1), step):
        t = table[k, A_TAKE] if count > 1 else 0
        s = table[t]
        if s[A_PREP] & PREP:
            _prep(s)
        if not s[A_PREP] & PREP_ONLY:
            _attend(s, c if count <= 1 else 0)
            if s[A_QZ] != 0:  # its output quantized for W_o's calls, as their first job would (the same bits)
                _quantized_for(carray(_i64(s[A_QZ]), (LS,)), 1, t)


def _attend(a, c):
    """attention() of one row: its slots `a`, chunk c of its heads."""
    rows, dh, n_kv, s_len, chunks = a[A_ROWS], a[A_DH], a[A_HKV], a[A_S], a[A_CHUNKS]
    q = carray(_f32(a[A_Q]), (n_kv * rows * dh,))
    out = carray(_f32(a[A_OUT]), (n_kv * rows * dh,))
    e = carray(_f32(a[A_SCRATCH]), (chunks * rows * s_len,))
    ks, vs = a[A_KS], a[A_VS]
    scale = np.float32(1.0 / np.sqrt(np.float64(dh)))
    split = a[A_SPLIT]  # a head's queries in this many parts (jobs run the parts: Gemma 3's one head on two threads)
    per = (rows + split - 1) // split
    size = (n_kv * split + chunks - 1) // chunks
    for u in range(c * size, min(n_kv * split, (c + 1) * size)):
        h, part = u // split, u % split
        k = carray(_f32(a[A_K] + 4 * h * a[A_KH]), (s_len * ks,))
        v = carray(_f32(a[A_V] + 4 * h * a[A_VH]), (s_len * vs,))
        _ask_ahead(v, vs, s_len, dh)  # the first of this head's values, read after its scores, asked for now
        if part == split - 1 and h + 1 < n_kv and u + 1 < min(n_kv * split, (c + 1) * size):  # and of the next head's keys
            _ask_ahead(carray(_f32(a[A_K] + 4 * (h + 1) * a[A_KH]), (s_len * ks,)), ks, s_len, dh)
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
                            acc += qr[d] * key[d]
                        e[eo + r * s_len + j] = acc * scale
            for r in range(n):
                row = e[eo + r * s_len : eo + (r + 1) * s_len]  # [S] a view: indices from 0 up, which LLVM runs in vector lanes
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
                wide = d + 64 <= dh
                if wide:
                    tile_4(n, v, d, vs, e, eo, s_len, s_len, out, qo + d, dh)
                else:
                    tile_1(n, v, d, vs, e, eo, s_len, s_len, out, qo + d, dh)
                d += 64 if wide else 16
            for r in range(n):
                row, o = e[eo + r * s_len : eo + (r + 1) * s_len], out[qo + r * dh : qo + (r + 1) * dh]  # views (indices from 0 up: vector lanes)
                for dd in range(d, dh):
                    acc = np.float32(0)
                    for j in range(s_len):
                        acc += row[j] * v[j * vs + dd]
                    o[dd] = acc
                total = np.float32(0)
                for j in range(s_len):
                    total += e[eo + r * s_len + j]  # not the view: a sum in order, as before (in vector lanes it moved Gemma 3's greedy text)
                for dd in range(dh):
                    o[dd] /= total


def _ask_ahead(x, stride, s_len, dh):
    """Ask for the cache lines of the first ASK_AHEAD of the s_len rows of x (Dh floats each, `stride` apart)."""
    for j in range(min(s_len, ASK_AHEAD)):
        for d in range(0, dh, 16):
            ask(x, j * stride + d)


def _quantized_for(layer, m, t):
    """Row t of matrix m's x quantized for each of its calls on quantized weights (`layer`: its row of
    the layer table, L_CALLS), into the call's buffers, as the quantize job does for all the rows
    (jobs._quantize_rows: the same bits)."""
    for j in range(2):
        at = L_CALLS + (m * 2 + j) * 4
        if layer[at] != 0 and layer[at + 2] != 0:
            _quantize_rows(carray(_i64(layer[at + 2]), (SLOTS,)), t, t + 1)


def _prep(r):
    """Row r's steps of Transformer.block between its Q/K/V product (A_QKV, in the stored order of its
    columns) and its attention: the model's order of the columns, the bias, each head's norm (Qwen3,
    Gemma 3), the queries' factor (Gemma 3), RoPE (pair i with i + R/2 of each query and key head,
    ops.apply_rope), into A_Q; then its key and value into column A_COL of its cache."""
    n_head, n_kv, dh, half = r[A_NHEAD], r[A_HKV], r[A_DH], r[A_HALF]
    nq = (n_head + 2 * n_kv) * dh
    kh, ks, vh, vs, col = r[A_KH], r[A_KS], r[A_VH], r[A_VS], r[A_COL]
    keys, values = carray(_f32(r[A_K]), (n_kv * kh,)), carray(_f32(r[A_V]), (n_kv * vh,))
    qkv, qm = carray(_f32(r[A_QKV]), (nq,)), carray(_f32(r[A_Q]), (nq,))
    if r[A_ORDER] != 0:
        order = carray(_i64(r[A_ORDER]), (nq,))
        for j in range(nq):
            qm[j] = qkv[np.uint64(order[j])]  # an index never negative: no wrap-around test
    else:
        for j in range(nq):
            qm[j] = qkv[j]
    if r[A_BQKV] != 0:
        bias = carray(_f32(r[A_BQKV]), (nq,))
        for j in range(nq):
            qm[j] += bias[j]
    eps = _float_bits(np.int32(r[A_EPS]))
    if r[A_QNORM] != 0:
        qn, kn = carray(_f32(r[A_QNORM]), (dh,)), carray(_f32(r[A_KNORM]), (dh,))
        for hd in range(n_head + n_kv):
            head = qm[hd * dh : (hd + 1) * dh]
            _rms_row(head, qn if hd < n_head else kn, head, eps)
    qscale = _float_bits(np.int32(r[A_QSCALE]))
    if qscale != 1:  # Gemma 3: scores scaled by query_pre_attn_scalar^-1/2, not Dh^-1/2
        for j in range(n_head * dh):
            qm[j] *= qscale
    cos, sin = carray(_f32(r[A_COS]), (half,)), carray(_f32(r[A_SIN]), (half,))
    for hd in range(n_head + n_kv):
        head = qm[hd * dh : (hd + 1) * dh]  # a view, as below: indices from 0 up, which LLVM runs in vector lanes
        for i in range(half):
            x1, x2 = head[i], head[half + i]
            head[i] = x1 * cos[i] - x2 * sin[i]
            head[half + i] = x2 * cos[i] + x1 * sin[i]
    for g in range(n_kv):
        key, value = qm[(n_head + g) * dh : (n_head + g + 1) * dh], qm[(n_head + n_kv + g) * dh : (n_head + n_kv + g + 1) * dh]
        krow, vrow = keys[g * kh + col * ks : g * kh + col * ks + dh], values[g * vh + col * vs : g * vh + col * vs + dh]
        for e in range(dh):
            krow[e] = key[e]
            vrow[e] = value[e]


def _rms_row(x, g, out, eps):
    """out = x / sqrt(mean(x^2) + eps) * g for one vector x [n] (ops.rms_norm); the sum of squares in float64."""
    s = 0.0
    for i in range(x.shape[0]):
        s += np.float64(x[i]) * np.float64(x[i])
    r = np.sqrt(np.float32(s / x.shape[0]) + eps)
    for i in range(x.shape[0]):
        out[i] = x[i] / r * g[i]


HELPERS = ("_attend", "_prep", "_rms_row", "_exp", "_quantize_rows", "_quantized_for", "_ask_ahead")  # compiled into the job
JOBS = ("attention",)
