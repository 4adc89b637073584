"""The product kernels on weight rows interleaved 8 at a time (interleave.py's layout), in LLVM vector code.

One 32-byte vector of a record holds 4 weights of each of 8 weight rows, and 4 bytes of a row of x
broadcast to its 8 lanes make the other operand: one vpdpbusd adds to each of the 8 rows' int32
sums, so a block of 32 weights is 8 of them for 8 weight rows, and each row's block total lands in
its own lane with no sum across lanes. Then, per block and row of x, one conversion and one fma
with the 8 rows' scales times x's. The row-by-row kernels (llvm._dot_blocks32) spend that per
block per weight row; here it is shared by 8.

The integer sums are exact, so the biases are subtracted there, not as float minimums: Q4_0's
w = d (q - 8) gives d dx (sum(q qx) - 8 sum(qx)), Q5_0's the same with 16, and Q8_0 (signed bytes)
is multiplied as q + 128 (unsigned) with 128 sum(qx) taken off. Q4_1 and Q5_1 add m dx sum(qx) in
a second accumulator. Each weight row's result is one lane, summed over blocks in order: the same
bits whatever rows of x a call covers, and whichever group or chunk computes it.

Imported by jobs.py only, in build.py's process (it imports numba through llvm.py).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..formats import BLOCK_TYPES
from .llvm import _VNNI, F32, I8, I32, _at, _dot4, _fma, _intrinsic, _load, _plus, _prefetch, _scalar, _signed_dot4, _splat, _vec, intp


def _dot_x8(kind: int, rows: int):
    """For r < rows and the 8 weight rows of a group (records at src[i:], nb of them): out[oo + r os + l]
    = row l's dot product with row r of x, for lanes lo <= l < hi (a masked store: a part's rows need
    not fill its last group, nor a chunk's its first). x in 8-bit blocks of 32 (jobs.quantize): row r's
    q at xq[ix + r K], its scales, sums and scaled sums at xd, xs, xm[ixb + r nb]."""
    nbytes = BLOCK_TYPES[kind].nbytes
    record = 8 * nbytes
    has_min, has_fifth = kind in (3, 7), kind in (6, 7)
    hb_at = 32 if kind == 7 else 16
    qs_at = record - (256 if kind == 8 else 128)
    bias = {2: 8, 6: 16, 8: 128}.get(kind)

    @intrinsic
    def dot(typingctx, src, i, xq, ix, xd, xs, xm, ixb, nb, out, oo, os, lo, hi):
        def codegen(context, builder, sig, args):
            t = sig.args
            src_, i_, xq_, ix_, xd_, xs_, xm_, ixb_, nb_, out_, oo_, os_, lo_, hi_ = args
            K = builder.mul(nb_, ir.Constant(nb_.type, 32))
            f8 = _vec(F32, 8)
            zeros = ir.Constant(f8, [ir.Constant(F32, 0.0)] * 8)
            izero = ir.Constant(_vec(I32, 8), [ir.Constant(I32, 0)] * 8)
            acc = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)]
            low = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)] if has_min else None
            with cgutils.for_range(builder, nb_) as loop:
                b = loop.index
                o = builder.add(i_, builder.mul(b, ir.Constant(b.type, record)))
                _prefetch(context, builder, t[0], src_, o, record)
                d8 = builder.fpext(_load(context, builder, t[0], src_, o, _vec(ir.HalfType(), 8)), f8)
                m8 = builder.fpext(_load(context, builder, t[0], src_, _plus(builder, o, 16), _vec(ir.HalfType(), 8)), f8) if has_min else None
                if kind == 8:
                    w = [_load(context, builder, t[0], src_, _plus(builder, o, qs_at + 32 * j), _vec(I8, 32)) for j in range(8)]
                    if _VNNI:  # q + 128, unsigned
                        w = [builder.xor(v, _splat(0x80 - 256, I8, 32)) for v in w]
                else:
                    packed = [_load(context, builder, t[0], src_, _plus(builder, o, qs_at + 32 * k), _vec(I8, 32)) for k in range(4)]
                    w = [builder.and_(v, _splat(0x0F, I8, 32)) for v in packed] + [builder.lshr(v, _splat(4, I8, 32)) for v in packed]
                    if has_fifth:  # dword j of hb: bit 4r + t is the fifth bit of byte 4r + t of w[j]
                        for j in range(8):
                            hb = builder.load(_at(context, builder, t[0], src_, _plus(builder, o, hb_at + 4 * j), I32), align=1)
                            bits = builder.zext(builder.bitcast(hb, _vec(ir.IntType(1), 32)), _vec(I8, 32))
                            w[j] = builder.or_(w[j], builder.shl(bits, _splat(4, I8, 32)))
                for r in range(rows):
                    xo = builder.add(builder.add(ix_, builder.mul(K, ir.Constant(K.type, r))), builder.mul(b, ir.Constant(b.type, 32)))
                    sums = [izero, izero]  # two chains of 4
                    for j in range(8):
                        x4 = builder.load(_at(context, builder, t[2], xq_, _plus(builder, xo, 4 * j), I32), align=1)
                        x = builder.bitcast(_splat(x4, I32, 8, builder), _vec(I8, 32))
                        if kind == 8 and not _VNNI:  # signed bytes as llama.cpp multiplies them (vpmaddubsw would saturate on q + 128)
                            sums[j % 2] = builder.add(sums[j % 2], _signed_dot4(builder, w[j], x))
                        else:
                            sums[j % 2] = _dot4(builder, w[j], x, sums[j % 2])
                    isum = builder.add(sums[0], sums[1])  # [8] int32, exact
                    xb = builder.add(builder.add(ixb_, builder.mul(nb_, ir.Constant(nb_.type, r))), b)
                    if bias is not None and (kind != 8 or _VNNI):
                        sx = _scalar(context, builder, t[5], xs_, xb)
                        isum = builder.sub(isum, _splat(builder.mul(sx, ir.Constant(sx.type, bias)), I32, 8, builder))
                    scale = builder.fmul(d8, _splat(_scalar(context, builder, t[4], xd_, xb), F32, 8, builder))
                    builder.store(_fma(builder, builder.sitofp(isum, f8), scale, builder.load(acc[r])), acc[r])
                    if has_min:
                        builder.store(_fma(builder, m8, _splat(_scalar(context, builder, t[6], xm_, xb), F32, 8, builder), builder.load(low[r])), low[r])
            lanes = ir.Constant(_vec(I32, 8), list(range(8)))
            lo32, hi32 = builder.trunc(lo_, I32), builder.trunc(hi_, I32)
            mask = builder.and_(builder.icmp_signed(">=", lanes, _splat(lo32, I32, 8, builder)), builder.icmp_signed("<", lanes, _splat(hi32, I32, 8, builder)))
            for r in range(rows):
                y = builder.fadd(builder.load(acc[r]), builder.load(low[r])) if has_min else builder.load(acc[r])
                at = _at(context, builder, t[9], out_, builder.add(oo_, builder.mul(os_, ir.Constant(os_.type, r))), f8)
                _intrinsic(builder, "llvm.masked.store.v8f32.p0", ir.VoidType(), y, at, ir.Constant(I32, 4), mask)

        return types.void(src, intp, xq, intp, xd, xs, xm, intp, intp, out, intp, intp, intp, intp), codegen

    return dot


# dot_q4_1_x8x4(src, i, xq, ix, xd, xs, xm, ixb, nb, out, oo, os, lo, hi): 4 rows of x against a group of 8
# interleaved weight rows; ..._x8x1 one row
dot_q4_0_x8x1, dot_q4_1_x8x1, dot_q5_0_x8x1, dot_q5_1_x8x1, dot_q8_0_x8x1 = (_dot_x8(k, 1) for k in (2, 3, 6, 7, 8))
dot_q4_0_x8x4, dot_q4_1_x8x4, dot_q5_0_x8x4, dot_q5_1_x8x4, dot_q8_0_x8x4 = (_dot_x8(k, 4) for k in (2, 3, 6, 7, 8))
