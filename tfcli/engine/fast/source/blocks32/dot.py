"""The 32-weight types' product kernels on weight rows interleaved 8 at a time (this package's layout), in
LLVM vector code.

One 32-byte vector of a record holds 4 weights of each of 8 weight rows, and 4 bytes of a row of x
broadcast to its 8 lanes make the other operand: one vpdpbusd adds to each of the 8 rows' int32
sums, so a block of 32 weights is 8 of them for 8 weight rows, and each row's block total lands in
its own lane with no sum across lanes. Then, per block and row of x, one conversion and one fma
with the 8 rows' scales times x's. Kernels reading each weight row on its own (tfcli's before
these) spend that per block per weight row; here it is shared by 8.

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

from ....formats import BLOCK_TYPES, GGMLType
from . import RUN16, TYPES
from ..llvm import (
    _FEATURES, _VNNI, FLOAT, I8, I16, I32, _at, _dot4, _fma, _intrinsic, _load, _plus, _prefetch, _scalar,
    _signed_dot4, _splat, _switch, _ubytes_sbytes, _vec, _words, intp,
)


KINDS = TYPES  # the block types this package lays out: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
# two groups at once in 512-bit vectors (dot_x16x4: 4 rows of x)
WIDE = _VNNI and "avx512vnni" in _FEATURES and "avx512bw" in _FEATURES


# RUN16 (__init__.py): the int16 sums without VNNI, and why they are exact.


def _pairs16(builder, w, x4, rows: int, run: int):
    """[8] x [32] unsigned bytes w (4 weights of each of 8 weight rows: w[j] weights 4j..4j+3), x4(r, j) [32]
    signed bytes (4 bytes of row r of x broadcast) -> for each row r, [8] int32: lane l = sum_j sum_i
    w[j][4l+i] x4(r, j)[4l+i], the int16 pairs summed `run` at a time (RUN16 says why that is exact). The
    runs j and j+4 (a byte's two nibbles) go together for all rows before the next: few registers live."""
    totals, s16 = [None] * rows, [None] * rows
    count = 0
    for k in range(4):
        for r in range(rows):
            for j in (k, k + 4):
                p = _ubytes_sbytes(builder, w[j], x4(r, j))  # [16] int16
                s16[r] = p if s16[r] is None else builder.add(s16[r], p)
        count += 2
        if count % run == 0:
            for r in range(rows):
                s32 = _words(builder, s16[r], _splat(1, I16, 16))
                totals[r] = s32 if totals[r] is None else builder.add(totals[r], s32)
                s16[r] = None
    return totals


def _dot_x8(rows: int, lanes: int):
    """For r < rows and the `lanes` weight rows of one group of 8 (records at src[i:], nb of them) or of
    two (the second's records `step` bytes after the first's): out[oo + r os + l] = row l's dot product
    with row r of x, for lanes lo <= l < hi (a masked store: a part's rows need not fill its last
    group, nor a chunk's its first). `kind` picks the block type (KINDS). x in 8-bit blocks of 32
    (jobs.quantize): row r's q at xq[ix + r K], its scales, sums and scaled sums at xd, xs, xm[ixb + r nb].

    Two groups side by side (lanes 16, on CPUs with 512-bit VNNI) compute each lane exactly as one
    group does: the same bits, with half the instructions per row of x (a vpdpbusd of 64 bytes costs
    1.5 of 32 on the Xeon these figures come from)."""

    @intrinsic
    def dot(typingctx, kind, src, i, step, xq, ix, xd, xs, xm, ixb, nb, out, oo, os, lo, hi):
        def codegen(context, builder, sig, args):
            _switch(
                builder, args[0], KINDS, lambda kind: _emit(context, builder, sig.args[1:], args[1:], kind, rows, lanes)
            )

        return types.void(kind, src, intp, intp, xq, intp, xd, xs, xm, intp, intp, out, intp, intp, intp, intp), codegen

    return dot


def _emit(context, builder, t, args, kind: int, rows: int, lanes: int) -> None:
    """dot_x8's code for one block type."""
    src_, i_, step_, xq_, ix_, xd_, xs_, xm_, ixb_, nb_, out_, oo_, os_, lo_, hi_ = args
    nbytes = BLOCK_TYPES[kind].nbytes
    record = 8 * nbytes
    has_min, has_fifth = kind in (GGMLType.Q4_1, GGMLType.Q5_1), kind in (GGMLType.Q5_0, GGMLType.Q5_1)
    hb_at = 32 if kind == GGMLType.Q5_1 else 16
    qs_at = record - (256 if kind == GGMLType.Q8_0 else 128)
    bias = {GGMLType.Q4_0: 8, GGMLType.Q5_0: 16, GGMLType.Q8_0: 128}.get(kind)
    run16 = RUN16.get(kind)
    K = builder.mul(nb_, ir.Constant(nb_.type, 32))
    fv = _vec(FLOAT, lanes)
    zeros = ir.Constant(fv, [ir.Constant(FLOAT, 0.0)] * lanes)
    izero = ir.Constant(_vec(I32, lanes), [ir.Constant(I32, 0)] * lanes)
    acc = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)]
    low = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)] if has_min else None

    def load(o, at, elem, n):
        """n elements at byte `at` of the group's record (o), and of the second group's beside them when lanes is 16."""
        first = _load(context, builder, t[0], src_, _plus(builder, o, at), _vec(elem, n))
        if lanes == 8:
            return first
        second = _load(context, builder, t[0], src_, _plus(builder, builder.add(o, step_), at), _vec(elem, n))
        return builder.shuffle_vector(first, second, ir.Constant(_vec(I32, 2 * n), list(range(2 * n))))

    with cgutils.for_range(builder, nb_) as loop:
        b = loop.index
        o = builder.add(i_, builder.mul(b, ir.Constant(b.type, record)))
        _prefetch(context, builder, t[0], src_, o, record)
        if lanes == 16:
            _prefetch(context, builder, t[0], src_, builder.add(o, step_), record)
        d8 = builder.fpext(load(o, 0, ir.HalfType(), 8), fv)
        m8 = builder.fpext(load(o, 16, ir.HalfType(), 8), fv) if has_min else None
        width = 4 * lanes  # bytes: 4 weights of each weight row
        if kind == GGMLType.Q8_0:
            w = [load(o, qs_at + 32 * j, I8, 32) for j in range(8)]
            if _VNNI:  # q + 128, unsigned
                w = [builder.xor(v, _splat(0x80 - 256, I8, width)) for v in w]
        else:
            packed = [load(o, qs_at + 32 * k, I8, 32) for k in range(4)]
            w = [builder.and_(v, _splat(0x0F, I8, width)) for v in packed] + [
                builder.lshr(v, _splat(4, I8, width)) for v in packed
            ]
            if has_fifth:  # dword j of hb: bit 4r + t is the fifth bit of byte 4r + t of w[j]
                for j in range(8):
                    bits = builder.bitcast(load(o, hb_at + 4 * j, I32, 1), _vec(ir.IntType(1), width))
                    w[j] = builder.or_(w[j], builder.shl(builder.zext(bits, _vec(I8, width)), _splat(4, I8, width)))
        xos = [
            builder.add(
                builder.add(ix_, builder.mul(K, ir.Constant(K.type, r))), builder.mul(b, ir.Constant(b.type, 32))
            )
            for r in range(rows)
        ]

        def x4(r, j):
            """Bytes 4j..4j+3 of row r's block of x, broadcast to the lanes."""
            v = builder.load(_at(context, builder, t[3], xq_, _plus(builder, xos[r], 4 * j), I32), align=1)
            return builder.bitcast(_splat(v, I32, lanes, builder), _vec(I8, width))

        isums = _pairs16(builder, w, x4, rows, run16) if run16 and not _VNNI else None
        for r in range(rows):
            if isums is not None:
                isum = isums[r]
            else:
                xs4 = [x4(r, j) for j in range(8)]
                sums = [izero, izero]  # two chains of 4
                for j in range(8):
                    # signed bytes as llama.cpp multiplies them (vpmaddubsw would saturate on q + 128)
                    if kind == GGMLType.Q8_0 and not _VNNI:
                        sums[j % 2] = builder.add(sums[j % 2], _signed_dot4(builder, w[j], xs4[j]))
                    else:
                        sums[j % 2] = _dot4(builder, w[j], xs4[j], sums[j % 2])
                isum = builder.add(sums[0], sums[1])  # [lanes] int32, exact
            xb = builder.add(builder.add(ixb_, builder.mul(nb_, ir.Constant(nb_.type, r))), b)
            if bias is not None and (kind != GGMLType.Q8_0 or _VNNI):
                sx = _scalar(context, builder, t[6], xs_, xb)
                isum = builder.sub(isum, _splat(builder.mul(sx, ir.Constant(sx.type, bias)), I32, lanes, builder))
            scale = builder.fmul(d8, _splat(_scalar(context, builder, t[5], xd_, xb), FLOAT, lanes, builder))
            builder.store(_fma(builder, builder.sitofp(isum, fv), scale, builder.load(acc[r])), acc[r])
            if has_min:
                builder.store(
                    _fma(
                        builder, m8, _splat(_scalar(context, builder, t[7], xm_, xb), FLOAT, lanes, builder),
                        builder.load(low[r]),
                    ),
                    low[r],
                )
    numbers = ir.Constant(_vec(I32, lanes), list(range(lanes)))
    lo32, hi32 = builder.trunc(lo_, I32), builder.trunc(hi_, I32)
    mask = builder.and_(
        builder.icmp_signed(">=", numbers, _splat(lo32, I32, lanes, builder)),
        builder.icmp_signed("<", numbers, _splat(hi32, I32, lanes, builder)),
    )
    for r in range(rows):
        y = builder.fadd(builder.load(acc[r]), builder.load(low[r])) if has_min else builder.load(acc[r])
        at = _at(context, builder, t[10], out_, builder.add(oo_, builder.mul(os_, ir.Constant(os_.type, r))), fv)
        _intrinsic(builder, f"llvm.masked.store.v{lanes}f32.p0", ir.VoidType(), y, at, ir.Constant(I32, 4), mask)


# dot_x8x4(kind, src, i, step, xq, ix, xd, xs, xm, ixb, nb, out, oo, os, lo, hi): 4 rows of x against a group of 8
# interleaved weight rows (step unused); dot_x8x1 one row; dot_x16x4 4 rows against two groups (WIDE CPUs only).
# Fewer than jobs.WIDE_ROWS rows of x (a decode or batch step) take one group at a time: two groups side by
# side are two streams from memory, and a Zen 4's prefetchers kept a core reading them at 14-16 GB/s
# against 27-33 for one (1 row of x).
dot_x8x1, dot_x8x4 = _dot_x8(1, 8), _dot_x8(4, 8)
dot_x16x4 = _dot_x8(4, 16) if WIDE else dot_x8x4
