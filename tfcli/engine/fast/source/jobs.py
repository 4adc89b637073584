"""The compiled kernels' sources: numba functions over the stored blocks, compiled once per
machine by build.py (in a process of its own) into machine code that kernels.py loads. Imported
only there: importing it imports numba.

Each kernel is a job `(a, c)`: `a` an int64 array of addresses and sizes laid out as arguments.py says,
`c` which chunk of the weight rows lo..hi-1 to compute (chunks are cut as _chunk says, so that a
row's result never depends on how many chunks there are). The pool (pool.py) runs a job's chunks
on its threads; `first`, when given, runs once before them on the caller's thread (quantizing x).
Nothing here allocates: every buffer comes from the caller, in `a`.

The textbook is engine/formats.py: each block type's NumPy `dequantize`, then `x @ W.T`. Here the
same product runs on the stored bytes, the way llama.cpp's ggml-cpu kernels do it (its
`ggml_vec_dot_*` in ggml-cpu/quants.c): x is quantized once per call to 8-bit blocks
(activations.py is the NumPy twin, and says what that costs), and each block of weights is
unpacked in registers and dotted with up to 4 rows of x at a time, in integers, with one float
multiply-add per block, on rows interleaved 8 at a time (one instruction serves 8 weight rows): the
32-weight types as blocks32/ lays out and multiplies them, the k-quants as k_quants/ does:

    Q4_0 Q5_0 Q8_0   x in blocks of 32 values, one float32 scale: w.x = dw dx sum(qw qx)
    Q4_1 Q5_1        the same, plus the block's sum of qx for the minimum: + mw dx sum(qx)
    Q4_K Q5_K Q6_K   x in blocks of 256 values, one scale, sums by 16 for the minimums
    F32 F16 BF16     float32 x as is, each weight row (converted to float32 once) dotted with 4 rows of x at a time
"""

from __future__ import annotations

import numpy as np
from numba import carray, types
from numba.extending import intrinsic

from . import llvm, llvm_q8
from .blocks32 import dot as x8_dot
from .k_quants import dot as k_dot
from ...formats import GGMLType
from ..arguments import PART_WIDTH, X8, PartColumn, Product


def _pointer(numba_type):
    @intrinsic
    def at(typingctx, address):
        """The int64 address as a pointer to numba_type (to build an array over it with carray)."""

        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

        return types.CPointer(numba_type)(address), codegen

    return at


_f32, _i8, _i16, _i32, _i64, _u8 = (
    _pointer(t) for t in (types.float32, types.int8, types.int16, types.int32, types.int64, types.uint8)
)


# --- the activations (NumPy twin: activations.py) ----------------------------------------------------


def _quantize_x(x, block, sum_size, q, d, sums):
    """x [T, K] float32 -> q [T*K] int8, d [T, K/block] float32, sums [T, K/sum_size] int32: per block
    d = max|x| / 127 and q = rint(x / d) (activations.quantize computes the same numbers), 32 values
    at a time in vector registers (llvm_q8.py)."""
    T, K = x.shape
    for t in range(T):
        for b in range(K // block):
            amax = np.float32(0)
            for k in range(t * K + b * block, t * K + (b + 1) * block, 32):
                amax = max(amax, llvm_q8.amax32(x, k))
            d[t, b] = amax
        for b in range(K // block):  # in vector lanes: no call between the divisions
            d[t, b] = d[t, b] / np.float32(127)
        for b in range(K // block):
            scale = d[t, b]
            inv = np.float32(1) / scale if scale > 0 else np.float32(0)
            for k in range(t * K + b * block, t * K + (b + 1) * block, 32):
                llvm_q8.round32(x, k, inv, q, k)
        for g in range(K // sum_size):
            at = t * K + g * sum_size
            sums[t, g] = llvm_q8.sum16(q, at) + (llvm_q8.sum16(q, at + 16) if sum_size == 32 else 0)


def _quantize_rows(a, first, end):
    """Rows first..end-1 of a product's x (its slots `a`) quantized into its buffers: xq, xd, xs, and
    xm = xd * xs for blocks of 32. Each row on its own: the same bits however the rows are cut."""
    n, k, block, sum_size = a[Product.T], a[Product.K], a[Product.BLOCK], a[Product.SUM_SIZE]
    d, sums = carray(_f32(a[Product.XD]), (n, k // block)), carray(_i32(a[Product.XS]), (n, k // sum_size))
    q = carray(_i8(a[Product.XQ] + first * k), ((end - first) * k,))
    _quantize_x(carray(_f32(a[Product.X]), (n, k))[first:end], block, sum_size, q, d[first:end], sums[first:end])
    if block == 32:
        xm = carray(_f32(a[Product.XM]), (n, k // 32))  # x's block sums, scaled, for the minimum term
        for t in range(first, end):
            for b in range(k // 32):
                xm[t, b] = d[t, b] * np.float32(sums[t, b])


def quantize(a, c):
    """first: quantize x for the product (xq, xd, xs; and xm = xd * xs, blocks of 32)."""
    _quantize_rows(a, 0, a[Product.T])


# --- unpacking one weight row: int8 q, float scales (the layouts are formats.py's) ------------------


def _unpack_blocks32(kind, nbytes, row, wq, wd, wm):
    """A row of 32-weight blocks -> wq [K] int16 (the q the block's formula multiplies by d: Q4_0's
    nibble - 8, Q5_0's 5 bits - 16, Q4_1's nibble), wd [K/32] its scales d, wm [K/32] its minimums m."""
    for b in range(wd.size):
        o, j = b * nbytes, 32 * b
        wd[b] = llvm.half(row, o)
        if kind == GGMLType.Q4_0:  # d · qs[16]
            llvm.unpack_q4(row, o + 2, wq, j, 8)
        elif kind == GGMLType.Q4_1:  # d · m · qs[16]
            wm[b] = llvm.half(row, o + 2)
            llvm.unpack_q4(row, o + 4, wq, j, 0)
        elif kind == GGMLType.Q5_0:  # d · qh u32 · qs[16]
            llvm.unpack_q5(row, o + 6, o + 2, wq, j, 16)
        elif kind == GGMLType.Q5_1:  # d · m · qh u32 · qs[16]
            wm[b] = llvm.half(row, o + 2)
            llvm.unpack_q5(row, o + 8, o + 4, wq, j, 0)
        else:  # Q8_0: d · qs i8[32]
            llvm.unpack_q8(row, o + 2, wq, j)


def _k_scales(row, o, sc, mn, j):
    """The 12 bytes at row[o:] -> the 6-bit scales sc[j:j+8] and mins mn[j:j+8] of a Q4_K/Q5_K block
    (formats._k_scales)."""
    for i in range(4):
        sc[j + i] = row[o + i] & 63
        mn[j + i] = row[o + 4 + i] & 63
        sc[j + 4 + i] = (row[o + 8 + i] & 15) | ((row[o + i] >> 6) << 4)
        mn[j + 4 + i] = (row[o + 8 + i] >> 4) | ((row[o + 4 + i] >> 6) << 4)


def _unpack_k(kind, nbytes, row, wq, wd, wdmin, sc, mn):
    """A row of 256-weight k-quant blocks -> wq [K] int16 (Q4_K, Q5_K: q; Q6_K: q - 32), wd, wdmin
    [K/256] the float16 d and dmin, sc and mn the sub-block scales and mins ([K/32] each; Q6_K: sc [K/16])."""
    for s in range(wd.size):
        o, j = s * nbytes, 256 * s
        if kind == GGMLType.Q6_K:  # ql[128] · qh[64] · scales i8[16] · d
            k_dot.unpack_q6k_half(row, o, o + 128, wq, j)
            k_dot.unpack_q6k_half(row, o + 64, o + 160, wq, j + 128)
            for i in range(16):
                sc[16 * s + i] = np.int8(row[o + 192 + i])
            wd[s] = llvm.half(row, o + 208)
            continue
        wd[s], wdmin[s] = llvm.half(row, o), llvm.half(row, o + 2)
        _k_scales(row, o + 4, sc, mn, 8 * s)
        for r in range(4):  # a run of 32 bytes: sub-blocks 2r (low nibbles), 2r+1 (high)
            if kind == GGMLType.Q4_K:  # d · dmin · scales[12] · qs[128]
                k_dot.unpack_q4k_run(row, o + 16 + 32 * r, wq, j + 64 * r)
            else:  # Q5_K: d · dmin · scales[12] · qh[32] · qs[128]
                k_dot.unpack_q5k_run(row, o + 48 + 32 * r, o + 16, r, wq, j + 64 * r)


def _float_row(kind, row, w):
    """A row of F16 or BF16 weights (bytes) -> w [K] float32."""
    K = w.size
    if kind == GGMLType.F16:
        for k in range(0, K - K % 16, 16):
            llvm.halves16(row, 2 * k, w, k)
        for k in range(K - K % 16, K):
            w[k] = llvm.half(row, 2 * k)
    else:  # BF16: the top half of a float32
        bits = w.view(np.uint32)
        for k in range(K):
            bits[k] = np.uint32(row[2 * k] | (np.uint32(row[2 * k + 1]) << 8)) << 16


# --- float rows: F32, F16, BF16 ---------------------------------------------------------------------


def _dot_rows(x, w, out, n):
    """out[:, n] = x @ w for a float32 row w [K]: 4 rows of x per pass over w, so w is read once for 4.
    A last group of fewer than 4 rows repeats its last row in the spare accumulators: every row goes
    through the same loop, whose sums the compiler may reorder (fastmath) but the same way for every
    row, so a row's result is the same bits whatever T (batch invariance; a separate one-row loop was
    vectorized differently on AVX2 CPUs and gave other bits)."""
    T, K = x.shape
    for t in range(0, T, 4):
        t1, t2, t3 = min(t + 1, T - 1), min(t + 2, T - 1), min(t + 3, T - 1)
        a0 = a1 = a2 = a3 = np.float32(0)
        for k in range(K):
            wk = w[k]
            a0 += x[t, k] * wk
            a1 += x[t1, k] * wk
            a2 += x[t2, k] * wk
            a3 += x[t3, k] * wk
        out[t, n] = a0
        out[t1, n], out[t2, n], out[t3, n] = a1, a2, a3  # a row repeated gets the bits it already has


# --- rows of x against weight rows lo..hi-1 ----------------------------------------------------------

X_TILE = 128  # rows of x a product of interleaved rows takes through all its groups at a time (_rows_x8)
WIDE_ROWS = 16  # from this many rows of x, two groups side by side (fewer: a step bound by memory, one stream)


def _rows_x8(xq, xd, xs, xm, groups, kind, out, lo, hi):
    """Weight rows lo..hi-1 of a part interleaved 8 at a time (blocks32/; `groups` [G, record bytes
    x nb]): for each group of 8 (two at a time where the CPU has 512-bit VNNI and x has WIDE_ROWS rows or
    more), 4 rows of x at a time (a tile of X_TILE rows through every group, then the next), then the last
    T % 4 one at a time, one group at a time (x8_dot.py), each writing the lanes of rows lo..hi-1 alone.
    Every row's numbers are the same whichever way it is reached."""
    T, nb = xd.shape
    K = 32 * nb
    gb, ld = groups.shape[1], out.shape[1]
    wide = x8_dot.WIDE and T >= WIDE_ROWS  # two groups side by side
    # rows of x in tiles of X_TILE for every group (x's bytes stay in the core's own cache), then the rest
    for t0 in range(0, T - T % 4, X_TILE):
        t1 = min(t0 + X_TILE, T - T % 4)
        g, end = lo // 8, (hi + 7) // 8
        while g < end:
            two = wide and g + 1 < end
            a, b = max(lo - 8 * g, 0), min(hi - 8 * g, 16 if two else 8)
            for t in range(t0, t1, 4):
                if two:
                    x8_dot.dot_x16x4(
                        kind, groups, g * gb, gb, xq, t * K, xd, xs, xm, t * nb, nb, out, t * ld + 8 * g, ld, a, b
                    )
                else:
                    x8_dot.dot_x8x4(
                        kind, groups, g * gb, gb, xq, t * K, xd, xs, xm, t * nb, nb, out, t * ld + 8 * g, ld, a, b
                    )
            g += 2 if two else 1
    # one group at a time: two side by side are two streams from memory, which the CPU's prefetchers
    # follow worse than one (a decode step's rows read at about half the rate, AMD EPYC Zen 4)
    for g in range(lo // 8, (hi + 7) // 8):
        a, b = max(lo - 8 * g, 0), min(hi - 8 * g, 8)
        for t in range(T - T % 4, T):
            x8_dot.dot_x8x1(
                kind, groups, g * gb, gb, xq, t * K, xd, xs, xm, t * nb, nb, out, t * ld + 8 * g, ld, a, b
            )


def _rows_kx8(xq, xd, xs, groups, kind, out, lo, hi):
    """Weight rows lo..hi-1 of a k-quant part interleaved 8 at a time (k_quants/__init__.py; `groups` [G,
    record bytes x ns]), as _rows_x8 takes the 32-weight types: a tile of X_TILE rows of x, 4 at a time,
    through every group, then the last T % 4 one at a time (k_quants/dot.py). sum over blocks of
    dx (d sum_j sc_j sum(qw qx) - dmin sum_j mn_j sum(qx)), j the sub-blocks (llama.cpp's ggml_vec_dot_q4_K_q8_K)."""
    T, ns = xd.shape
    K = 256 * ns
    gb, ld = groups.shape[1], out.shape[1]
    g0, end = lo // 8, (hi + 7) // 8
    for t0 in range(0, T - T % 4, X_TILE):
        t1 = min(t0 + X_TILE, T - T % 4)
        for g in range(g0, end):
            a, b = max(lo - 8 * g, 0), min(hi - 8 * g, 8)
            for t in range(t0, t1, 4):
                k_dot.dot_kx8x4(kind, groups, g * gb, xq, t * K, xd, xs, t * ns, t * 16 * ns, ns, out, t * ld + 8 * g,
                                ld, a, b)
    for g in range(g0, end):
        a, b = max(lo - 8 * g, 0), min(hi - 8 * g, 8)
        for t in range(T - T % 4, T):
            k_dot.dot_kx8x1(kind, groups, g * gb, xq, t * K, xd, xs, t * ns, t * 16 * ns, ns, out, t * ld + 8 * g, ld,
                            a, b)


# --- the jobs: chunk c of a product (x @ W[lo:hi].T into out[:, lo:hi]) or of a dequantization ------


def _chunk(lo, hi, chunks):
    """Weight rows per chunk when lo..hi-1 is cut into `chunks` (a multiple of 16, the last chunk shorter)."""
    return ((hi - lo + chunks - 1) // chunks + 15) // 16 * 16


def _span(a, c):
    """Rows (first, end) of chunk c."""
    size = _chunk(a[Product.LO], a[Product.HI], a[Product.CHUNKS])
    return a[Product.LO] + c * size, min(a[Product.HI], a[Product.LO] + (c + 1) * size)


def _part(a, p, first, end):
    """Part p's rows in chunk [first, end) of all the rows: (its rows, out from its first column, lo, hi), lo >= hi when
    none."""
    parts = carray(_i64(a[Product.PARTS]), (a[Product.NPARTS], PART_WIDTH))
    start = 0
    for q in range(p):
        start += parts[q, PartColumn.N]
    n = parts[p, PartColumn.N]
    stored = (n + 7) // 8 if parts[p, PartColumn.KIND] & X8 else n  # interleaved: groups of 8 rows (interleave.py)
    rows = carray(_u8(parts[p, PartColumn.ROWS]), (stored, parts[p, PartColumn.RB]))
    out = carray(_f32(a[Product.OUT] + 4 * parts[p, PartColumn.COL]), (a[Product.T], a[Product.LD]))
    return rows, out, parts[p, PartColumn.KIND], max(first - start, 0), min(end - start, n)


def product_quantized(a, c):
    """Blocks of 32 weights (Q4_0 .. Q8_0, x in blocks of 32) or k-quants (Q4_K .. Q6_K, x in blocks
    of 256), as a[Product.BLOCK] says: quantized x against chunk c of the parts' rows."""
    n, k, block = a[Product.T], a[Product.K], a[Product.BLOCK]
    first, end = _span(a, c)
    xq, xd = carray(_i8(a[Product.XQ]), (n * k,)), carray(_f32(a[Product.XD]), (n, k // block))
    for p in range(a[Product.NPARTS]):
        rows, out, kind, lo, hi = _part(a, p, first, end)
        if lo >= hi:
            continue
        if kind & X8 and (kind - X8 == GGMLType.Q4_K or kind - X8 == GGMLType.Q5_K or kind - X8 == GGMLType.Q6_K):
            _rows_kx8(xq, xd, carray(_i32(a[Product.XS]), (n, k // 16)), rows, kind - X8, out, lo, hi)
        elif kind & X8:
            _rows_x8(
                xq, xd, carray(_i32(a[Product.XS]), (n, k // 32)), carray(_f32(a[Product.XM]), (n, k // 32)), rows,
                kind - X8, out, lo, hi,
            )


def product_floats(a, c):
    """F32, F16, BF16: an F16 or BF16 weight row is converted to float32 once (into chunk c's row of the scratch W32
    [chunks, K])."""
    first, end = _span(a, c)
    x = carray(_f32(a[Product.X]), (a[Product.T], a[Product.K]))
    w = carray(_f32(a[Product.W32]), (a[Product.CHUNKS], a[Product.K]))[c]
    for p in range(a[Product.NPARTS]):
        rows, out, kind, lo, hi = _part(a, p, first, end)
        if kind == GGMLType.F32:
            floats = rows.view(np.float32)  # [n, K]
            for n in range(lo, hi):
                _dot_rows(x, floats[n], out, n)
        else:
            for n in range(lo, hi):
                _float_row(kind, rows[n], w)
                _dot_rows(x, w, out, n)


def dequantize(a, c):
    """W[first:end] into out[first:end] ([*, K] float32, row stride LD), bit for bit formats' dequantizers.
    Scratch, a row per chunk: WQ [chunks, K] int16, WD WM [chunks, K/32] float32, SC [chunks, K/16], MN [chunks, K/32]
    int32; F16, BF16: W32 [chunks, K] float32."""
    first, end = _span(a, c)
    kind, k, chunks = a[Product.KIND], a[Product.K], a[Product.CHUNKS]
    rows = carray(_u8(a[Product.ROWS]), (a[Product.HI], a[Product.RB]))
    out = carray(_f32(a[Product.OUT]), (a[Product.HI], a[Product.LD]))
    wq, wd = carray(_i16(a[Product.WQ]), (chunks, k))[c], carray(_f32(a[Product.WD]), (chunks, k // 32))[c]
    wm = carray(_f32(a[Product.WM]), (chunks, k // 32))[c]
    sc, mn = carray(_i32(a[Product.SC]), (chunks, k // 16))[c], carray(_i32(a[Product.MN]), (chunks, k // 32))[c]
    if kind == GGMLType.F16 or kind == GGMLType.BF16:
        w = carray(_f32(a[Product.W32]), (chunks, k))[c]
        for n in range(first, end):
            _float_row(kind, rows[n], w)
            out[n, :k] = w
    elif kind == GGMLType.Q4_K or kind == GGMLType.Q5_K or kind == GGMLType.Q6_K:
        _dequantize_k(
            rows, kind, a[Product.RB] // (k // 256), out, first, end, wq, wd[: k // 256], wm[: k // 256], sc, mn
        )
    else:
        _dequantize_blocks32(rows, kind, a[Product.RB] // (k // 32), out, first, end, wq, wd, wm)


def _dequantize_blocks32(rows, kind, nbytes, out, lo, hi, wq, wd, wm):
    """formats._q4_0 .. _q8_0, operation for operation: w = q * d (+ m)."""
    with_min = kind == GGMLType.Q4_1 or kind == GGMLType.Q5_1
    wm[:] = 0
    for n in range(lo, hi):
        _unpack_blocks32(kind, nbytes, rows[n], wq, wd, wm)
        for k in range(wq.size):
            w = np.float32(wq[k]) * wd[k // 32]
            out[n, k] = w + wm[k // 32] if with_min else w


def _dequantize_k(rows, kind, nbytes, out, lo, hi, wq, wd, wdmin, sc, mn):
    """formats._k_weights, operation for operation: w = (d * sc_j) * q - (dmin * mn_j)."""
    wdmin[:] = 0
    for n in range(lo, hi):
        _unpack_k(kind, nbytes, rows[n], wq, wd, wdmin, sc, mn)
        for k in range(wq.size):
            if kind == GGMLType.Q6_K:  # no minimum: formats subtracts dmin * 0 = +0.0, which changes no bit
                out[n, k] = (wd[k // 256] * np.float32(sc[k // 16])) * np.float32(wq[k])
            else:
                low = wdmin[k // 256] * np.float32(mn[k // 32])
                out[n, k] = (wd[k // 256] * np.float32(sc[k // 32])) * np.float32(wq[k]) - low


# --- shared with attention_job.py and block_job.py ---------------------------------------------------


@intrinsic
def _float_bits(typingctx, bits):
    """The float32 whose bits are the int32 `bits`."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return types.float32(types.int32), codegen


def _exp(x):
    """exp(x) for float32 x <= 0, within 2 float32 steps of np.exp (Cephes' expf: x = n ln2 + r,
    |r| <= ln2 / 2, exp(r) by a polynomial of degree 6, times 2^n built from its bits). Plain
    arithmetic, so that LLVM runs a loop of them in vector registers; np.exp would be a call each."""
    x = max(x, np.float32(-87.0))
    n = np.floor(x * np.float32(1.44269504) + np.float32(0.5))
    r = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    return p * _float_bits(np.int32((np.int32(n) + 127) << 23))


HELPERS = (  # compiled into the jobs that call them
    "_quantize_x", "_quantize_rows", "_unpack_blocks32", "_k_scales", "_unpack_k", "_float_row", "_chunk", "_span",
    "_dequantize_blocks32", "_dequantize_k", "_part",
)  # fmt: skip
ROWS_OF_X = ("_rows_x8", "_rows_kx8")  # compiled on their own, called by the jobs
JOBS = ("quantize", "product_quantized", "product_floats", "dequantize")  # and attention_job.py's, block_job.py's
