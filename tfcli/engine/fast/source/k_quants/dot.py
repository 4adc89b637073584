"""The k-quants' vector code (LLVM, through numba intrinsics): a block's runs unpacked in registers for
the dequantizer (the twins of formats._q4_k, _q5_k, _q6_k, which tests hold equal), and the products of
up to 4 rows of x with 8 weight rows interleaved as this package lays them out (k_quants/__init__.py).

The products follow llama.cpp's ggml_vec_dot_q4_K_q8_K and its siblings (ggml-cpu/arch/x86/quants.c),
with its repacked 8-row layout's idea (ggml-cpu/repack.cpp): x in 8-bit blocks of 256 with sums by 16
(jobs.quantize), one 32-byte vector of weights serving 8 weight rows. For each sub-block, vpmaddubsw's
int16 pairs are summed over RUN16 vectors (exact: the bound is in __init__.py) and one vpmaddwd
multiplies them by the 8 rows' scales of that sub-block into int32 lanes, one lane pair per weight row,
so each row's block total lands in its own lane: per block and row of x, one conversion and one fma for
8 weight rows. The minimums (Q4_K, Q5_K: dmin mn_j; Q6_K's -32) are integers too, x's sums by 16
times the rows' mins, in a second accumulator, rounded as the row-by-row kernels rounded them.

Imported by jobs.py only, in build.py's process (it imports numba).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ....formats import BLOCK_TYPES, GGMLType
from ..llvm import (
    FLOAT, I8, I16, I32, _at, _fma, _intrinsic, _load, _nibbles, _plus, _prefetch, _scalar, _splat, _store_wide,
    _switch, _ubytes_sbytes, _vec, _words, intp,
)
from . import Q6K_D, Q6K_Q, Q6K_SCALES, RUN16, TYPES

# --- unpacking one stored row's block, for the dequantizer (jobs._unpack_k) ---------------------------


@intrinsic
def unpack_q4k_run(typingctx, src, i, dst, j):
    """dst[j:j+64] = the nibbles of src[i:i+32]: sub-block 2r of a Q4_K block in the low nibbles, 2r+1 in the high."""

    def codegen(context, builder, sig, args):
        q = _nibbles(builder, _load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 32)))
        _store_wide(context, builder, sig.args[2], args[2], args[3], q)

    return types.void(src, intp, dst, intp), codegen


@intrinsic
def unpack_q5k_run(typingctx, src, iqs, iqh, r, dst, j):
    """As unpack_q4k_run for run r of a Q5_K block, with the fifth bits: bit 2r of src[iqh+l] for weight l of
    the low nibbles, bit 2r+1 for weight l of the high ones."""

    def codegen(context, builder, sig, args):
        q = _nibbles(builder, _load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 32)))
        qh = _load(context, builder, sig.args[0], args[0], args[2], _vec(I8, 32))
        twice = builder.shuffle_vector(qh, qh, ir.Constant(_vec(I32, 64), list(range(32)) * 2))  # [64]
        shift = builder.trunc(builder.mul(args[3], ir.Constant(args[3].type, 2)), I8)
        shifts = builder.add(_splat(shift, I8, 64, builder), ir.Constant(_vec(I8, 64), [0] * 32 + [1] * 32))
        bits = builder.and_(builder.lshr(twice, shifts), _splat(1, I8, 64))
        _store_wide(
            context, builder, sig.args[4], args[4], args[5], builder.or_(q, builder.shl(bits, _splat(4, I8, 64)))
        )

    return types.void(src, intp, intp, intp, dst, intp), codegen


@intrinsic
def unpack_q6k_half(typingctx, src, iql, iqh, dst, j):
    """dst[j:j+128] = q - 32 for half a Q6_K block: weight 32g + l (g < 4) has the low (g = 0, 1) or high
    (g = 2, 3) nibble of src[iql + l + 32 (g % 2)] as its low 4 bits, bits 2g, 2g+1 of src[iqh + l] as its top 2."""

    def codegen(context, builder, sig, args):
        ql = [
            _load(context, builder, sig.args[0], args[0], _plus(builder, args[1], 32 * h), _vec(I8, 32)) for h in (0, 1)
        ]
        qh = _load(context, builder, sig.args[0], args[0], args[2], _vec(I8, 32))
        for g in range(4):
            low = builder.and_(ql[g % 2], _splat(0x0F, I8, 32)) if g < 2 else builder.lshr(ql[g % 2], _splat(4, I8, 32))
            top = builder.and_(builder.lshr(qh, _splat(2 * g, I8, 32)), _splat(3, I8, 32))
            q = builder.sub(builder.or_(low, builder.shl(top, _splat(4, I8, 32))), _splat(32, I8, 32))
            _store_wide(context, builder, sig.args[3], args[3], _plus(builder, args[4], 32 * g), q)

    return types.void(src, intp, intp, dst, intp), codegen


# --- rows of x against 8 interleaved weight rows ------------------------------------------------------


def _lane_pairs(builder, v8):
    """[8] int16 (one value per weight row) -> [16] int16: row r's value in lanes 2r and 2r+1 (a vpmaddwd operand)."""
    return builder.shuffle_vector(v8, v8, ir.Constant(_vec(I32, 16), [r // 2 for r in range(16)]))


def _k_scales8(builder, b):
    """b(i): byte i of the 8 rows' packed scales ([8] bytes) -> ([8] [8] int16 scales, [8] [8] int16 mins): formats.
    _k_scales on 8 rows at once (bytes 0-3, 4-7: 6 bits of scales, mins 0-3; bytes 8-11 the low 4 bits of
    scales and mins 4-7, whose top 2 bits are the top 2 of bytes 0-7)."""
    m63, m15, s4, s6 = (_splat(v, I8, 8) for v in (63, 15, 4, 6))
    sc = [builder.and_(b(j), m63) for j in range(4)]
    mn = [builder.and_(b(4 + j), m63) for j in range(4)]
    sc += [builder.or_(builder.and_(b(8 + j), m15), builder.shl(builder.lshr(b(j), s6), s4)) for j in range(4)]
    mn += [builder.or_(builder.lshr(b(8 + j), s4), builder.shl(builder.lshr(b(4 + j), s6), s4)) for j in range(4)]
    wide = lambda v: builder.zext(v, _vec(I16, 8))  # noqa: E731
    return [wide(v) for v in sc], [wide(v) for v in mn]


def _steps(builder, kind: int, load32):
    """A block's weights in the order the kernel takes them: steps, each a list of sub-blocks (its
    accumulators' slots) and a function k -> [(unsigned weights [32] bytes, byte of x's block, slot)] for
    k < RUN16[kind]: the vectors summed in int16 before their sub-block's vpmaddwd. load32(at): the
    32 bytes at `at` of the record."""
    lo4, s4 = _splat(0x0F, I8, 32), _splat(4, I8, 32)
    steps = []
    if kind == GGMLType.Q6_K:  # the runs as READ_ORDER lays them: weight 128h + 32g + l as formats._q6_k
        for h in (0, 1):
            for mp in range(4):  # l = 4m..4m+3 for m = 2mp, 2mp+1: one sub-block 8h + 2g + mp // 2 per g
                def pieces(k, h=h, mp=mp):
                    m = 2 * mp + k
                    at = Q6K_Q + 96 * (8 * h + m)  # ql 16h+m, ql 16h+8+m, qh 8h+m (READ_ORDER)
                    a, b, c = load32(at), load32(at + 32), load32(at + 64)
                    low = [builder.and_(a, lo4), builder.and_(b, lo4), builder.lshr(a, s4), builder.lshr(b, s4)]
                    top = [builder.and_(builder.lshr(c, _splat(2 * g, I8, 32)), _splat(3, I8, 32)) for g in range(4)]
                    w = [builder.or_(low[g], builder.shl(top[g], s4)) for g in range(4)]
                    return [(w[g], 128 * h + 32 * g + 4 * m, g) for g in range(4)]

                steps.append(([8 * h + 2 * g + mp // 2 for g in range(4)], pieces))
        return steps
    qs_at = 384 if kind == GGMLType.Q5_K else 128
    per = RUN16[kind]
    for r in range(4):  # run r: sub-block 2r in the low nibbles, 2r+1 in the high
        for k0 in range(0, 8, per):
            def pieces(k, r=r, k0=k0):
                v = load32(qs_at + 256 * r + 32 * (k0 + k))
                low, high = builder.and_(v, lo4), builder.lshr(v, s4)
                if kind == GGMLType.Q5_K:
                    qh = load32(128 + 32 * (k0 + k))
                    one = _splat(1, I8, 32)
                    low = builder.or_(low, builder.shl(builder.and_(builder.lshr(qh, _splat(2 * r, I8, 32)), one), s4))
                    high = builder.or_(
                        high, builder.shl(builder.and_(builder.lshr(qh, _splat(2 * r + 1, I8, 32)), one), s4)
                    )
                x_at = 64 * r + 4 * (k0 + k)
                return [(low, x_at, 0), (high, x_at + 32, 1)]

            steps.append(([2 * r, 2 * r + 1], pieces))
    return steps


def _dot_kx8(rows: int):
    """For r < rows and the 8 weight rows of one group (records at src[i:], ns of them): out[oo + r os + l] =
    row l's dot product with row r of x, for lanes lo <= l < hi (a masked store). `kind` picks Q4_K, Q5_K or
    Q6_K. Row r of x: xq[ix + r K] (K = 256 ns), its block scales xd[ixd + r ns], its sums by 16
    xs[ixs + r K/16]. Per block: acc_l += float(sum_j sc_j qw.qx) (d_l dx); low_l += (-dmin_l dx)
    float(sum_j mn_j sum(qx)_j) (Q6_K: -32 d_l dx times sum_j sc_j sum(qx)_j); out = acc + low."""

    @intrinsic
    def dot(typingctx, kind, src, i, xq, ix, xd, xs, ixd, ixs, ns, out, oo, os, lo, hi):
        def codegen(context, builder, sig, args):
            _switch(builder, args[0], TYPES, lambda kind: _emit(context, builder, sig.args[1:], args[1:], kind, rows))

        return types.void(kind, src, intp, xq, intp, xd, xs, intp, intp, intp, out, intp, intp, intp, intp), codegen

    return dot


def _emit(context, builder, t, args, kind: int, rows: int) -> None:
    """dot_kx8's code for one block type."""
    src_, i_, xq_, ix_, xd_, xs_, ixd_, ixs_, ns_, out_, oo_, os_, lo_, hi_ = args
    record = 8 * BLOCK_TYPES[kind].nbytes
    K, K16 = builder.mul(ns_, ir.Constant(ns_.type, 256)), builder.mul(ns_, ir.Constant(ns_.type, 16))
    fv = _vec(FLOAT, 8)
    zeros = ir.Constant(fv, [ir.Constant(FLOAT, 0.0)] * 8)
    acc = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)]
    low = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)]
    with cgutils.for_range(builder, ns_) as loop:
        b = loop.index
        o = builder.add(i_, builder.mul(b, ir.Constant(b.type, record)))
        # into the second-level cache, which these kernels read faster from than the first (AMD EPYC Zen 4,
        # 8,960 x 1,536 matrices from memory, one row of x: one core Q4_K 18-19 -> 28-30 GB/s, Q6_K 20-21 ->
        # 28-31; the 32-weight types the other way round, 30-31 -> 22-26, so they keep the first). Other CPUs:
        # not measured
        _prefetch(context, builder, t[0], src_, o, record, level=2)

        def load(at, elem, n):
            return _load(context, builder, t[0], src_, _plus(builder, o, at), _vec(elem, n))

        if kind == GGMLType.Q6_K:
            d8 = builder.fpext(load(Q6K_D, ir.HalfType(), 8), fv)
            sc = [builder.sext(load(Q6K_SCALES + 8 * s, I8, 8), _vec(I16, 8)) for s in range(16)]  # [16] of [8] int16
            scales = [_lane_pairs(builder, v) for v in sc]
            # (sc_2i, sc_2i+1) of each row, against x's (sums_2i, sums_2i+1): the -32 term by 16 weights
            mins = [
                builder.shuffle_vector(sc[2 * i], sc[2 * i + 1], ir.Constant(_vec(I32, 16), [
                    r // 2 + 8 * (r % 2) for r in range(16)]))
                for i in range(8)
            ]
            minimum = builder.fmul(d8, ir.Constant(fv, [ir.Constant(FLOAT, -32.0)] * 8))  # w = d sc (q - 32)
        else:
            d8 = builder.fpext(load(0, ir.HalfType(), 8), fv)
            sc, mn = _k_scales8(builder, lambda i: load(32 + 8 * i, I8, 8))
            scales = [_lane_pairs(builder, v) for v in sc]
            mins = [_lane_pairs(builder, v) for v in mn]  # mn_j against (sums_2j, sums_2j+1)
            minimum = builder.fneg(builder.fpext(load(16, ir.HalfType(), 8), fv))
        xos = [builder.add(builder.add(ix_, builder.mul(K, ir.Constant(K.type, r))), builder.mul(b, ir.Constant(
            b.type, 256))) for r in range(rows)]

        def x4(r, at):
            """Bytes at..at+3 of row r's block of x, broadcast to the 8 lanes."""
            v = builder.load(_at(context, builder, t[2], xq_, _plus(builder, xos[r], at), I32), align=1)
            return builder.bitcast(_splat(v, I32, 8, builder), _vec(I8, 32))

        isum = [None] * rows
        for subs, pieces in _steps(builder, kind, lambda at: load(at, I8, 32)):
            s16 = [[None] * len(subs) for _ in range(rows)]
            for k in range(RUN16[kind]):
                for w, x_at, slot in pieces(k):
                    for r in range(rows):
                        p = _ubytes_sbytes(builder, w, x4(r, x_at))  # [16] int16
                        s16[r][slot] = p if s16[r][slot] is None else builder.add(s16[r][slot], p)
            for r in range(rows):
                for slot, s in enumerate(subs):
                    p = _words(builder, s16[r][slot], scales[s])  # [8] int32: each weight row's
                    isum[r] = p if isum[r] is None else builder.add(isum[r], p)
        for r in range(rows):
            xb = builder.add(builder.add(ixd_, builder.mul(ns_, ir.Constant(ns_.type, r))), b)
            dx = _splat(_scalar(context, builder, t[4], xd_, xb), FLOAT, 8, builder)
            at = builder.add(builder.add(ixs_, builder.mul(K16, ir.Constant(K16.type, r))), builder.mul(b, ir.Constant(
                b.type, 16)))
            imin = None
            for j, m in enumerate(mins):  # x's sums 2j, 2j+1 as int16 (at most 16 x 127), in each lane pair
                two = builder.trunc(_load(context, builder, t[5], xs_, _plus(builder, at, 2 * j), _vec(I32, 2)),
                                    _vec(I16, 2))
                pair = builder.bitcast(_splat(builder.bitcast(two, I32), I32, 8, builder), _vec(I16, 16))
                p = _words(builder, m, pair)
                imin = p if imin is None else builder.add(imin, p)
            builder.store(_fma(builder, builder.sitofp(isum[r], fv), builder.fmul(d8, dx), builder.load(acc[r])),
                          acc[r])
            builder.store(_fma(builder, builder.fmul(minimum, dx), builder.sitofp(imin, fv), builder.load(low[r])),
                          low[r])
    numbers = ir.Constant(_vec(I32, 8), list(range(8)))
    lo32, hi32 = builder.trunc(lo_, I32), builder.trunc(hi_, I32)
    mask = builder.and_(
        builder.icmp_signed(">=", numbers, _splat(lo32, I32, 8, builder)),
        builder.icmp_signed("<", numbers, _splat(hi32, I32, 8, builder)),
    )
    for r in range(rows):
        y = builder.fadd(builder.load(acc[r]), builder.load(low[r]))
        at = _at(context, builder, t[9], out_, builder.add(oo_, builder.mul(os_, ir.Constant(os_.type, r))), fv)
        _intrinsic(builder, "llvm.masked.store.v8f32.p0", ir.VoidType(), y, at, ir.Constant(I32, 4), mask)


# dot_kx8x4(kind, src, i, xq, ix, xd, xs, ixd, ixs, ns, out, oo, os, lo, hi): 4 rows of x against a group of 8
# interleaved weight rows; dot_kx8x1 one row
dot_kx8x1, dot_kx8x4 = _dot_kx8(1), _dot_kx8(4)
