"""Attention's two products on the caches' layout, in LLVM vector code (attention_job.py): the scores
of a query over keys kept position by position (dots: a dot product per key, 16 keys' sums folded
together), and the values weighted by the exponentials (the tile: 16 columns of values per vector,
up to 4 rows of weights at once). The keys and values are float32 arrays, float16 ones (uint16
arrays holding the bits: numba has no float16 on the CPU) or Q8_0 blocks (int8 arrays holding the
bytes of ggml's block_q8_0: a float16 scale d, then 32 int8 q; formats.py), read 16 at a time as
float32 (_floats16: vcvtph2ps with F16C; or 16 int8 widened, vpmovsxbd + vcvtdq2ps, times d: w = d * q,
formats._q8_0's float32 product); their kind is the array's type, so each kernel is compiled once for
each. An offset into a cache counts numbers whatever its kind: a Q8_0 cache's number n is byte
n % 32 + 2 of block n // 32 (_block_at). Imported by attention_job.py only, in build.py's process (it
imports numba through llvm.py)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .llvm import FLOAT, I8, I16, I32, _at, _fma, _intrinsic, _load, _plus, _scalar, _splat, _switch, _vec, intp


def _halves(arrty) -> bool:
    """Whether a cache array holds float16 bits (uint16) rather than float32."""
    return arrty.dtype == types.uint16


def _blocks(arrty) -> bool:
    """Whether a cache array holds Q8_0 blocks (int8 bytes)."""
    return arrty.dtype == types.int8


def _block_at(builder, offset):
    """Number `offset` of a Q8_0 cache -> (its byte, its block's first byte: the scale d): block
    offset // 32 starts at byte 34 x that, its q at 2 bytes in."""
    start = builder.mul(builder.lshr(offset, ir.Constant(offset.type, 5)), ir.Constant(offset.type, 34))
    return builder.add(start, builder.add(builder.and_(offset, ir.Constant(offset.type, 31)),
                                          ir.Constant(offset.type, 2))), start


def _scale(context, builder, arrty, arr, start):
    """A Q8_0 block's d (the float16 at its first byte), as float32, exactly."""
    return builder.fpext(_load(context, builder, arrty, arr, start, ir.HalfType()), FLOAT)


def _floats16(context, builder, arrty, arr, offset):
    """The 16 numbers of a cache array from number `offset` on, as float32: loaded as they are, 16
    float16 widened exactly (fpext: vcvtph2ps), or 16 int8 of one Q8_0 block widened and times its d
    (`offset` a multiple of 16: within one block), the product formats._q8_0 computes."""
    if _halves(arrty):
        return builder.fpext(_load(context, builder, arrty, arr, offset, _vec(ir.HalfType(), 16)), _vec(FLOAT, 16))
    if _blocks(arrty):
        at, start = _block_at(builder, offset)
        q = builder.sitofp(_load(context, builder, arrty, arr, at, _vec(I8, 16)), _vec(FLOAT, 16))
        return builder.fmul(q, _splat(_scale(context, builder, arrty, arr, start), FLOAT, 16, builder))
    return _load(context, builder, arrty, arr, offset, _vec(FLOAT, 16))


def _floats32(context, builder, arrty, arr, offset):
    """The 32 numbers from number `offset` on as two _floats16 vectors, the same bits; a Q8_0 cache's
    (`offset` a multiple of 32: one block) read with its d loaded and widened once for both halves."""
    if not _blocks(arrty):
        return [_floats16(context, builder, arrty, arr, _plus(builder, offset, h)) for h in (0, 16)]
    at, start = _block_at(builder, offset)
    d = _splat(_scale(context, builder, arrty, arr, start), FLOAT, 16, builder)
    return [
        builder.fmul(builder.sitofp(_load(context, builder, arrty, arr, _plus(builder, at, h), _vec(I8, 16)),
                                    _vec(FLOAT, 16)), d)
        for h in (0, 16)
    ]


@intrinsic
def kv_get(typingctx, x, i):
    """Number i of a cache array as float32 (float16 widened exactly; a Q8_0 block's q times its d)."""

    def codegen(context, builder, sig, args):
        if _halves(sig.args[0]):
            return builder.fpext(_load(context, builder, sig.args[0], args[0], args[1], ir.HalfType()), FLOAT)
        if _blocks(sig.args[0]):
            at, start = _block_at(builder, args[1])
            q = builder.sitofp(_load(context, builder, sig.args[0], args[0], at, I8), FLOAT)
            return builder.fmul(q, _scale(context, builder, sig.args[0], args[0], start))
        return _scalar(context, builder, sig.args[0], args[0], args[1])

    return types.float32(x, intp), codegen


@intrinsic
def half_put(typingctx, x, i, value):
    """Bytes x[i:i+2] (an int8 array) = value (float32) rounded to the nearest float16, ties to even
    (fptrunc: vcvtps2ph), as NumPy's astype(float16) rounds: a Q8_0 block's d."""

    def codegen(context, builder, sig, args):
        v = builder.fptrunc(args[2], ir.HalfType())
        builder.store(v, _at(context, builder, sig.args[0], args[0], args[1], v.type), align=1)

    return types.void(x, intp, types.float32), codegen


@intrinsic
def kv_put(typingctx, x, i, value):
    """x[i] = value (float32) in a cache array: as it is, or rounded to the nearest float16, ties to
    even (fptrunc: vcvtps2ph), as NumPy's astype(float16) and ggml's fp32_to_fp16 round."""

    def codegen(context, builder, sig, args):
        v = args[2]
        if _halves(sig.args[0]):
            v = builder.bitcast(builder.fptrunc(v, ir.HalfType()), I16)
        builder.store(v, _at(context, builder, sig.args[0], args[0], args[1], v.type), align=1)

    return types.void(x, intp, types.float32), codegen


def _tile(width: int):
    """For r < rows (1 to 4), j < 16 * width: out[oo + r * os + j] = sum over i < n of a[ao + r * as + i]
    * m[mo + i * ms + j]: 16 * width columns of the weighted values (m the values [S, Dh], a the
    exponentials [rows, S], n = S; an fma per value, in order). Each vector of m is loaded
    once for all the rows, into rows * width independent accumulators. The code for each number of
    rows behind one switch."""

    @intrinsic
    def tile(typingctx, rows, m, mo, ms, a, ao, as_, n, out, oo, os):
        def codegen(context, builder, sig, args):
            _switch(
                builder, args[0], (1, 2, 3, 4), lambda r: _emit_tile(context, builder, sig.args[1:], args[1:], width, r)
            )

        return types.void(rows, m, intp, intp, a, intp, intp, intp, out, intp, intp), codegen

    return tile


def _emit_tile(context, builder, t, args, width: int, rows: int) -> None:
    """tile's code for `rows` rows."""
    m_, mo_, ms_, a_, ao_, as__, n_, out_, oo_, os_ = args
    zeros = ir.Constant(_vec(FLOAT, 16), [ir.Constant(FLOAT, 0.0)] * 16)
    acc = [[cgutils.alloca_once_value(builder, zeros) for _ in range(width)] for _ in range(rows)]
    with cgutils.for_range(builder, n_) as loop:
        i = loop.index
        at = builder.add(mo_, builder.mul(i, ms_))
        if width % 2 == 0:  # 32 numbers at a time: a Q8_0 block's d read once (mo and ms multiples of 32)
            vectors = [
                v for w in range(0, width, 2) for v in _floats32(context, builder, t[0], m_, _plus(builder, at, 16 * w))
            ]
        else:
            vectors = [_floats16(context, builder, t[0], m_, _plus(builder, at, 16 * w)) for w in range(width)]
        for r in range(rows):
            weight = _scalar(
                context, builder, t[3], a_,
                builder.add(builder.add(ao_, builder.mul(as__, ir.Constant(as__.type, r))), i),
            )
            splat = _splat(weight, FLOAT, 16, builder)
            for w in range(width):
                builder.store(_fma(builder, vectors[w], splat, builder.load(acc[r][w])), acc[r][w])
    for r in range(rows):
        base = builder.add(oo_, builder.mul(os_, ir.Constant(os_.type, r)))
        for w in range(width):
            at = _at(context, builder, t[7], out_, _plus(builder, base, 16 * w), _vec(FLOAT, 16))
            builder.store(builder.load(acc[r][w]), at, align=1)


# tile_4(rows, ...): 64 columns for 1 to 4 rows; tile_1(...): 16 columns
tile_4, tile_1 = _tile(4), _tile(1)


@intrinsic
def dots(typingctx, cols, m, mo, ms, a, ao, n, scale, out, oo):
    """For j < cols (1 to 16): out[oo + j] = (sum over i < n of a[ao + i] * m[mo + j * ms + i]) * scale, n a
    multiple of 16. Attention's scores on keys kept position by position (attention_job.py): m the
    keys [S, Dh], a a query, n = Dh. Each of the cols sums in a vector of 16 partial sums (an fma per
    16 values), then the 16 vectors folded into one of the 16 sums (_fold), stored at once: a sum's
    numbers do not depend on the other keys."""

    def codegen(context, builder, sig, args):
        _switch(builder, args[0], range(1, 17), lambda c: _emit_dots(context, builder, sig.args[1:], args[1:], c))

    return types.void(cols, m, intp, intp, a, intp, intp, types.float32, out, intp), codegen


def _emit_dots(context, builder, t, args, cols: int) -> None:
    """dots' code for `cols` keys."""
    m_, mo_, ms_, a_, ao_, n_, scale_, out_, oo_ = args
    v16 = _vec(FLOAT, 16)
    zeros = ir.Constant(v16, [ir.Constant(FLOAT, 0.0)] * 16)
    acc = [cgutils.alloca_once_value(builder, zeros) for _ in range(cols)]
    # a Q8_0 cache: 32 numbers a pass, its block's d read once for both halves (n a multiple of 32 there)
    step = 32 if _blocks(t[0]) else 16
    # One key at a time over all of n, its sum in registers: 16 keys' sums at once (32 registers of 8 floats)
    # spilled at every fma on AVX2's 16 registers. Each sum's fmas are in the same order either way: the same bits.
    for j in range(cols):
        with cgutils.for_range(builder, builder.udiv(n_, ir.Constant(n_.type, step))) as loop:
            i = builder.mul(loop.index, ir.Constant(n_.type, step))
            at = builder.add(builder.add(mo_, builder.mul(ms_, ir.Constant(ms_.type, j))), i)
            if step == 32:
                keys = _floats32(context, builder, t[0], m_, at)
            else:
                keys = [_floats16(context, builder, t[0], m_, at)]
            for h, key in zip(range(0, step, 16), keys):
                q = _load(context, builder, t[3], a_, _plus(builder, builder.add(ao_, i), h), v16)
                builder.store(_fma(builder, q, key, builder.load(acc[j])), acc[j])
    sums = builder.fmul(
        _fold(builder, [builder.load(acc[j]) if j < cols else zeros for j in range(16)]),
        _splat(scale_, FLOAT, 16, builder),
    )
    at = _at(context, builder, t[7], out_, oo_, v16)
    if cols == 16:
        builder.store(sums, at, align=1)
    else:
        mask = ir.Constant(_vec(ir.IntType(1), 16), [ir.Constant(ir.IntType(1), int(j < cols)) for j in range(16)])
        _intrinsic(builder, "llvm.masked.store.v16f32.p0", ir.VoidType(), sums, at, ir.Constant(I32, 4), mask)


def _fold(builder, vectors):
    """16 vectors of 16 floats -> one whose lane p is the sum of vector p's lanes: pairs of vectors
    folded together (each block of lanes of one vector added to its other half, side by side with
    the other vector's) four times, then the lanes put in order; every sum by the same additions."""
    # (vector, whose sum each lane holds); lanes of one sum side by side, `size` of them
    items, size = [(v, [p] * 16) for p, v in enumerate(vectors)], 16
    while len(items) > 1:
        folded = []
        for (a, owners_a), (b, owners_b) in zip(items[0::2], items[1::2]):
            low, high, owners = [], [], []
            for owners_v, shift in ((owners_a, 0), (owners_b, 16)):
                for first in range(0, 16, size):
                    low += [shift + first + k for k in range(size // 2)]
                    high += [shift + first + size // 2 + k for k in range(size // 2)]
                    owners += [owners_v[first]] * (size // 2)
            pick = [ir.Constant(_vec(I32, 16), low), ir.Constant(_vec(I32, 16), high)]
            folded.append(
                (builder.fadd(builder.shuffle_vector(a, b, pick[0]), builder.shuffle_vector(a, b, pick[1])), owners)
            )
        items, size = folded, size // 2
    v, owners = items[0]
    return builder.shuffle_vector(v, v, ir.Constant(_vec(I32, 16), [owners.index(p) for p in range(16)]))


