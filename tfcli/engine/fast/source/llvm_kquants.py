"""The k-quants (Q4_K, Q5_K, Q6_K: blocks of 256 weights whose sub-blocks carry 6-bit or 8-bit scales
of their own, formats.py draws them) in LLVM vector code: a block's runs of weights unpacked in
registers (the twins of formats._q4_k, _q5_k, _q6_k, which tests hold equal), and the dot products
of up to 4 rows of x with one weight row of them, following llama.cpp's ggml_vec_dot_q4_K_q8_K
and its siblings (ggml-cpu/arch/x86/quants.c). The building blocks are llvm.py's. Imported by
jobs.py only, in build.py's process."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...formats import BLOCK_TYPES, GGMLType
from .llvm import (
    FLOAT, I8, I16, I32, _fma, _load, _nibbles, _plus, _prefetch, _reduce, _scalar, _splat, _store_wide,
    _ubytes_sbytes, _vec, _words, intp,
)  # fmt: skip


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


# --- rows of x against one stored weight row, unpacked in registers ----------------------------------


def _row_of_x(builder, rows: int, per_block, blocks):
    """The shared frame of the product kernels: for r < rows, acc_r [8] float32 and low_r float32 summed
    over `blocks` blocks; per_block(b, acc, low) adds block b's share to each row's. Returns row r's
    sum(acc_r) + low_r (fixed order: the same bits whatever `rows` is)."""
    zeros = ir.Constant(_vec(FLOAT, 8), [ir.Constant(FLOAT, 0.0)] * 8)
    acc = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)]
    low = [cgutils.alloca_once_value(builder, ir.Constant(FLOAT, 0.0)) for _ in range(rows)]
    with cgutils.for_range(builder, blocks) as loop:
        per_block(loop.index, acc, low)
    return [_reduce(builder, "fadd", builder.load(acc[r]), builder.load(low[r])) for r in range(rows)]


def _add_scaled(builder, acc, isum, scale):
    """acc [8] float32 += float(isum [8] int32) * scale, one rounding (llvm.fma)."""
    builder.store(
        _fma(builder, builder.sitofp(isum, _vec(FLOAT, 8)), _splat(scale, FLOAT, 8, builder), builder.load(acc)), acc
    )


def _add_low(builder, low, m, v):
    """low float32 += m * v, one rounding."""
    builder.store(_fma(builder, m, v, builder.load(low)), low)


def _k_scales_vec(builder, packed):
    """[16] bytes whose first 12 are a Q4_K/Q5_K block's packed scales -> ([8] int16 scales, [8] int16
    mins): formats._k_scales on vectors (bytes 0-3 and 4-7 hold 6 bits each of scales and mins 0-3;
    bytes 8-11 the low 4 bits of scales and mins 4-7, whose top 2 bits are the top 2 of bytes 0-7)."""
    a = builder.shuffle_vector(packed, packed, ir.Constant(_vec(I32, 8), list(range(8))))  # bytes 0-7
    c = builder.shuffle_vector(packed, packed, ir.Constant(_vec(I32, 8), [8, 9, 10, 11] * 2))  # bytes 8-11 twice
    low6 = builder.and_(a, _splat(63, I8, 8))  # [scales 0-3, mins 0-3]
    nibble = builder.lshr(
        builder.and_(c, ir.Constant(_vec(I8, 8), [0x0F] * 4 + [0xF0] * 4)), ir.Constant(_vec(I8, 8), [0] * 4 + [4] * 4)
    )
    # [scales 4-7, mins 4-7]
    high = builder.or_(nibble, builder.shl(builder.lshr(a, _splat(6, I8, 8)), _splat(4, I8, 8)))
    pick = lambda first: builder.zext(
        builder.shuffle_vector(
            low6, high, ir.Constant(_vec(I32, 8), [first + k for k in range(4)] + [8 + first + k for k in range(4)])
        ),
        _vec(I16, 8),
    )  # noqa: E731
    return pick(0), pick(4)


def _dot_k(kind: int, rows: int):
    """For r < rows: one stored row of k-quant blocks (bytes at src[i:], ns blocks of 256 weights)
    dotted with row r of x (8-bit, blocks of 256 with sums by 16), float32: sum over blocks of
    dx (d sum_j sc_j (qw . qx)_j - dmin sum_j mn_j sum(qx)_j), as llama.cpp's ggml_vec_dot_q4_K_q8_K
    and _q6_K_q8_K do it. Each block is unpacked in registers to unsigned bytes once for all the rows
    (Q6_K's q - 32 as q with -32 moved into the minimum term). For each 32 weights, vpmaddubsw
    sums pairs of products in 16 bits (at most 2 x 63 x 127) and vpmaddwd multiplies those by the
    sub-block scales into int32 lanes, where the whole block adds up (at most 8 x 2 x 16,002 x 128),
    turned to float once. Row r of x: xq[ix + r K], its block scales xd[ixd + r ns], its sums by 16
    xs[ixs + r K/16]."""
    nbytes = BLOCK_TYPES[kind].nbytes
    result = types.float32 if rows == 1 else types.UniTuple(types.float32, rows)

    @intrinsic
    def dot(typingctx, src, i, xq, ix, xd, xs, ixd, ixs, ns):
        def codegen(context, builder, sig, args):
            t = sig.args
            src_, i_, xq_, ix_, xd_, xs_, ixd_, ixs_, ns_ = args
            K = builder.mul(ns_, ir.Constant(ns_.type, 256))
            K16 = builder.mul(ns_, ir.Constant(ns_.type, 16))

            def load8(at, n):
                return _load(context, builder, t[0], src_, at, _vec(I8, n))

            def per_block(s, acc, low):
                o = builder.add(i_, builder.mul(s, ir.Constant(s.type, nbytes)))
                _prefetch(context, builder, t[0], src_, o, nbytes)
                # ([32] unsigned bytes q, [16] int16 scales of its pairs, offset of its first weight in the block)
                groups = []
                if kind == GGMLType.Q6_K:  # Q6_K: ql[128] qh[64] scales i8[16] d
                    d = builder.fpext(_load(context, builder, t[0], src_, _plus(builder, o, 208), ir.HalfType()), FLOAT)
                    sc = builder.sext(load8(_plus(builder, o, 192), 16), _vec(I16, 16))
                    for h in (0, 1):
                        ql = [load8(_plus(builder, o, 64 * h + 32 * k), 32) for k in (0, 1)]
                        qh = load8(_plus(builder, o, 128 + 32 * h), 32)
                        for g in range(4):
                            low4 = (
                                builder.and_(ql[g % 2], _splat(0x0F, I8, 32))
                                if g < 2
                                else builder.lshr(ql[g % 2], _splat(4, I8, 32))
                            )
                            top2 = builder.and_(builder.lshr(qh, _splat(2 * g, I8, 32)), _splat(3, I8, 32))
                            scales = builder.shuffle_vector(
                                sc, sc, ir.Constant(_vec(I32, 16), [8 * h + 2 * g] * 8 + [8 * h + 2 * g + 1] * 8)
                            )
                            groups.append(
                                (builder.or_(low4, builder.shl(top2, _splat(4, I8, 32))), scales, 128 * h + 32 * g)
                            )
                    # w = d sc (q - 32): -32 d sum_g sc_g sum(qx)_g
                    minimum = builder.fmul(d, ir.Constant(FLOAT, -32.0))
                    mins = builder.sext(sc, _vec(I32, 16))  # per 16 weights
                else:  # Q4_K: d dmin scales[12] qs[128]; Q5_K: d dmin scales[12] qh[32] qs[128]
                    d = builder.fpext(_load(context, builder, t[0], src_, o, ir.HalfType()), FLOAT)
                    dmin = builder.fpext(
                        _load(context, builder, t[0], src_, _plus(builder, o, 2), ir.HalfType()), FLOAT
                    )
                    sc, mn = _k_scales_vec(builder, load8(_plus(builder, o, 4), 16))
                    qh = load8(_plus(builder, o, 16), 32) if kind == GGMLType.Q5_K else None
                    for r in range(4):  # a run of 32 bytes: sub-block 2r in the low nibbles, 2r+1 in the high
                        y = load8(_plus(builder, o, (48 if kind == GGMLType.Q5_K else 16) + 32 * r), 32)
                        for half, q in enumerate(
                            (builder.and_(y, _splat(0x0F, I8, 32)), builder.lshr(y, _splat(4, I8, 32)))
                        ):
                            j = 2 * r + half
                            if qh is not None:
                                q = builder.or_(
                                    q,
                                    builder.shl(
                                        builder.and_(builder.lshr(qh, _splat(j, I8, 32)), _splat(1, I8, 32)),
                                        _splat(4, I8, 32),
                                    ),
                                )
                            groups.append(
                                (q, _splat(builder.extract_element(sc, ir.Constant(I32, j)), I16, 16, builder), 32 * j)
                            )
                    minimum = builder.fneg(dmin)  # - dmin sum_j mn_j sum(qx)_j
                    # per 16 weights
                    mins = builder.zext(
                        builder.shuffle_vector(mn, mn, ir.Constant(_vec(I32, 16), [j // 2 for j in range(16)])),
                        _vec(I32, 16),
                    )
                for r in range(rows):
                    xo = builder.add(
                        builder.add(ix_, builder.mul(K, ir.Constant(K.type, r))),
                        builder.mul(s, ir.Constant(s.type, 256)),
                    )
                    xb = builder.add(builder.add(ixd_, builder.mul(ns_, ir.Constant(ns_.type, r))), s)
                    dx = _scalar(context, builder, t[4], xd_, xb)
                    isum = None
                    for q, scales, at in groups:
                        x = _load(context, builder, t[2], xq_, _plus(builder, xo, at), _vec(I8, 32))
                        p = _words(builder, _ubytes_sbytes(builder, q, x), scales)  # [8] int32
                        isum = p if isum is None else builder.add(isum, p)
                    _add_scaled(builder, acc[r], isum, builder.fmul(d, dx))
                    at = builder.add(
                        builder.add(ixs_, builder.mul(K16, ir.Constant(K16.type, r))),
                        builder.mul(s, ir.Constant(s.type, 16)),
                    )
                    imin = _reduce(
                        builder, "add", builder.mul(_load(context, builder, t[5], xs_, at, _vec(I32, 16)), mins)
                    )
                    _add_low(builder, low[r], builder.fmul(minimum, dx), builder.sitofp(imin, FLOAT))

            totals = _row_of_x(builder, rows, per_block, ns_)
            return totals[0] if rows == 1 else context.make_tuple(builder, sig.return_type, totals)

        return result(src, intp, xq, intp, xd, xs, intp, intp, intp), codegen

    return dot


# dot_q4_kx1(src, i, xq, ix, xd, xs, ixd, ixs, ns) -> float32, ..._x4 -> 4 float32, for Q4_K, Q5_K, Q6_K
dot_q4_kx1, dot_q5_kx1, dot_q6_kx1 = (_dot_k(k, 1) for k in (GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K))
dot_q4_kx4, dot_q5_kx4, dot_q6_kx4 = (_dot_k(k, 4) for k in (GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K))
