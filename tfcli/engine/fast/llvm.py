"""The few LLVM vector operations the compiled kernels (kernels.py) are built from.

Why LLVM vector IR: numba compiles a plain loop over int8 blocks with every value widened to int64,
and LLVM then vectorizes the outer block loop with gathers; such a loop ran slower than NumPy's
float32 product (benchmarks/README.md). Written as vector loads, even/odd shuffles, sign extensions,
multiplies and adds, a block's dot product compiles to vpmaddwd on AVX2 and AVX-512 alike: the IR is
generic (no x86 intrinsic) and LLVM picks the host CPU's instructions. numba has no float16 on the
CPU, so a float16 scale is read with `fpext half`.

Both operands of a dot product are stored in 16 bits: the weights' small integers unpacked by the
`unpack_*` functions (int8 values: given int8 loads, LLVM proves the products fit in 16 bits and
narrows the multiply to vpmullw, twice the instructions), the activations' 16-bit integers by
kernels._quantize_x; the 32-bit products are what vpmaddwd computes.

Each function here is a numba `@intrinsic`: `(array, offset, ...)` where offset counts elements of
that array from its start (every array given is contiguous). Imported by kernels.load() only,
since importing it imports numba.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

I8, I16, I32, F32 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()
intp = types.intp


def _vec(elem: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(elem, n)


def _at(context, builder, arrty, arr, offset, elem: ir.Type):
    """A pointer to element `offset` of a numba array, typed as a pointer to `elem` (a vector, say)."""
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.bitcast(builder.gep(data, [offset]), elem.as_pointer())


def _load(context, builder, arrty, arr, offset, elem: ir.Type):
    return builder.load(_at(context, builder, arrty, arr, offset, elem), align=1)  # blocks sit at any byte


def _scalar(context, builder, arrty, arr, offset):
    return _load(context, builder, arrty, arr, offset, context.get_value_type(arrty.dtype))


def _plus(builder, offset, n: int):
    return builder.add(offset, ir.Constant(offset.type, n))


def _splat(value, elem: ir.Type, n: int, builder=None):
    """[n] copies of value: a Python int, or a scalar known only at run time (then builder is needed)."""
    if isinstance(value, int):
        return ir.Constant(_vec(elem, n), [ir.Constant(elem, value)] * n)
    vec = ir.Constant(_vec(value.type, n), None)
    one = builder.insert_element(vec, value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, vec, ir.Constant(_vec(I32, n), [0] * n))


def _store_wide(context, builder, arrty, arr, offset, q8) -> None:
    """Store [n] int8 values as int16 (see the module's docstring)."""
    q16 = builder.sext(q8, _vec(I16, q8.type.count))
    builder.store(q16, _at(context, builder, arrty, arr, offset, q16.type), align=1)


def _reduce(builder, kind: str, v, *start):
    name = f"llvm.vector.reduce.{kind}.v{v.type.count}{'i32' if kind == 'add' else 'f32'}"
    args = [x.type for x in start] + [v.type]
    fn = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(v.type.element, args), name=name)
    return builder.call(fn, [*start, v])


def _pairs_dot(builder, w, x):
    """[n] int16 w . [n] int16 x -> [8] int32 partial sums: products summed by even/odd pairs (the
    pattern LLVM turns into vpmaddwd), then halves folded onto each other until 8 lanes remain."""
    n = w.type.count
    wide = _vec(I32, n // 2)

    def products(first):
        mask = ir.Constant(_vec(I32, n // 2), list(range(first, n, 2)))
        return builder.mul(builder.sext(builder.shuffle_vector(w, w, mask), wide),
                           builder.sext(builder.shuffle_vector(x, x, mask), wide), flags=["nsw"])

    v = builder.add(products(0), products(1))
    while v.type.count > 8:
        m = v.type.count // 2
        v = builder.add(builder.shuffle_vector(v, v, ir.Constant(_vec(I32, m), list(range(m)))),
                        builder.shuffle_vector(v, v, ir.Constant(_vec(I32, m), list(range(m, 2 * m)))))
    return v


# --- dot products of an unpacked weight row with a quantized row of x ---------------------------------


def _dot_row(with_min: bool, rows: int):
    """For r < rows: sum over b < nb of wd[b] xd[ixd + r nb + b] (wq[32b:+32] . xq[ix + r K + 32b:+32]) as
    float32, K = 32 nb: one unpacked weight row (int16 q, scales wd) against `rows` quantized rows of x,
    each weight block loaded once for all of them. Each block's int32 partial sums are turned to float
    and scaled in a vector of 8 lanes, reduced once at the end (as llama.cpp's AVX2 kernels do).
    with_min adds wm[b] xm[ixd + r nb + b] (Q4_1, Q5_1: a minimum times x's scaled block sum)."""

    def codegen(context, builder, sig, args):
        wq, xq, ix, wd, xd, ixd, nb = args[:7]
        t = sig.args
        zeros = ir.Constant(_vec(F32, 8), [ir.Constant(F32, 0.0)] * 8)
        acc = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)]
        low = [cgutils.alloca_once_value(builder, ir.Constant(F32, 0.0)) for _ in range(rows)]
        K = builder.mul(nb, ir.Constant(nb.type, 32))
        with cgutils.for_range(builder, nb) as loop:
            b = loop.index
            at = builder.mul(b, ir.Constant(b.type, 32))
            w = _load(context, builder, t[0], wq, at, _vec(I16, 32))
            dw = _scalar(context, builder, t[3], wd, b)
            for r in range(rows):
                xb = builder.add(builder.add(ix, builder.mul(K, ir.Constant(K.type, r))), at)
                x = _load(context, builder, t[1], xq, xb, _vec(I16, 32))
                xs = builder.add(builder.add(ixd, builder.mul(nb, ir.Constant(nb.type, r))), b)
                s = builder.fmul(dw, _scalar(context, builder, t[4], xd, xs))
                scaled = builder.fmul(builder.sitofp(_pairs_dot(builder, w, x), _vec(F32, 8)), _splat(s, F32, 8, builder), flags=["contract"])
                builder.store(builder.fadd(builder.load(acc[r]), scaled, flags=["contract"]), acc[r])  # one vfmadd
                if with_min:
                    m = builder.fmul(_scalar(context, builder, t[7], args[7], b), _scalar(context, builder, t[8], args[8], xs))
                    builder.store(builder.fadd(builder.load(low[r]), m), low[r])
        sums = [_reduce(builder, "fadd", builder.load(acc[r]), builder.load(low[r])) for r in range(rows)]
        return sums[0] if rows == 1 else context.make_tuple(builder, sig.return_type, sums)

    return codegen


def _dot_rows32(with_min: bool, rows: int):
    result = types.float32 if rows == 1 else types.UniTuple(types.float32, rows)

    if with_min:
        @intrinsic
        def dot(typingctx, wq, xq, ix, wd, xd, ixd, nb, wm, xm):
            return result(wq, xq, intp, wd, xd, intp, intp, wm, xm), _dot_row(True, rows)
    else:
        @intrinsic
        def dot(typingctx, wq, xq, ix, wd, xd, ixd, nb):
            return result(wq, xq, intp, wd, xd, intp, intp), _dot_row(False, rows)

    return dot


# dot_row32(wq, xq, ix, wd, xd, ixd, nb): one row of x; dot_rows32x4: four; the _min ones add (wm, xm)
dot_row32, dot_rows32x4 = _dot_rows32(False, 1), _dot_rows32(False, 4)
dot_row32_min, dot_rows32x4_min = _dot_rows32(True, 1), _dot_rows32(True, 4)


def _dot_super(sub: int):
    """sum over the 256 / sub sub-blocks j of a k-quant block of sc[isc+j] (wq . xq over the sub-block),
    float32. Each sub-block's products are summed in int32 (at most 32 x 63 x 32767, far from
    overflow) and scaled in float: with 16-bit x, the int32 sum over all sub-blocks could overflow."""

    @intrinsic
    def dot_super(typingctx, wq, iw, xq, ix, sc, isc):
        def codegen(context, builder, sig, args):
            t = sig.args
            acc = ir.Constant(_vec(F32, 8), [ir.Constant(F32, 0.0)] * 8)
            for j in range(256 // sub):
                w = _load(context, builder, t[0], args[0], _plus(builder, args[1], sub * j), _vec(I16, sub))
                x = _load(context, builder, t[2], args[2], _plus(builder, args[3], sub * j), _vec(I16, sub))
                scale = builder.sitofp(_scalar(context, builder, t[4], args[4], _plus(builder, args[5], j)), F32)  # int32 -> float
                part = builder.sitofp(_pairs_dot(builder, w, x), _vec(F32, 8))
                acc = builder.fadd(acc, builder.fmul(part, _splat(scale, F32, 8, builder), flags=["contract"]), flags=["contract"])
            return _reduce(builder, "fadd", acc, ir.Constant(F32, 0.0))

        return types.float32(wq, intp, xq, intp, sc, intp), codegen

    return dot_super


dot_super32 = _dot_super(32)  # Q4_K, Q5_K: 8 sub-blocks of 32
dot_super16 = _dot_super(16)  # Q6_K: 16 sub-blocks of 16


# --- float16 -------------------------------------------------------------------------------------------


@intrinsic
def half(typingctx, src, i):
    """The float16 at bytes src[i:i+2] (a uint8 array), as float32, exactly."""

    def codegen(context, builder, sig, args):
        return builder.fpext(_load(context, builder, sig.args[0], args[0], args[1], ir.HalfType()), F32)

    return types.float32(src, intp), codegen


@intrinsic
def halves16(typingctx, src, i, dst, j):
    """dst[j:j+16] = the 16 float16 at bytes src[i:i+32], as float32 (vcvtph2ps)."""

    def codegen(context, builder, sig, args):
        v = builder.fpext(_load(context, builder, sig.args[0], args[0], args[1], _vec(ir.HalfType(), 16)), _vec(F32, 16))
        builder.store(v, _at(context, builder, sig.args[2], args[2], args[3], v.type), align=1)

    return types.void(src, intp, dst, intp), codegen


# --- unpacking weight blocks (bytes of src) to int16 q (dst), formats.py's layouts ---------------------


def _nibbles(builder, v):
    """[w] bytes -> [2w] int8: the low nibbles, then the high ones."""
    w = v.type.count
    return builder.shuffle_vector(builder.and_(v, _splat(0x0F, I8, w)), builder.lshr(v, _splat(4, I8, w)),
                                  ir.Constant(_vec(I32, 2 * w), list(range(2 * w))))


@intrinsic
def unpack_q8(typingctx, src, i, dst, j):
    """dst[j:j+32] = the int8 at src[i:i+32] (Q8_0's q)."""

    def codegen(context, builder, sig, args):
        _store_wide(context, builder, sig.args[2], args[2], args[3], _load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 32)))

    return types.void(src, intp, dst, intp), codegen


@intrinsic
def unpack_q4(typingctx, src, i, dst, j, bias):
    """dst[j:j+32] = the nibbles of src[i:i+16] - bias (Q4_0: bias 8, Q4_1: 0); weights 0..15 are the low nibbles."""

    def codegen(context, builder, sig, args):
        q = _nibbles(builder, _load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 16)))
        _store_wide(context, builder, sig.args[2], args[2], args[3], builder.sub(q, _splat(builder.trunc(args[4], I8), I8, 32, builder)))

    return types.void(src, intp, dst, intp, bias), codegen


@intrinsic
def unpack_q5(typingctx, src, iqs, iqh, dst, j, bias):
    """dst[j:j+32] = (nibble | fifth bit << 4) - bias (Q5_0: bias 16, Q5_1: 0); bit l of the little-endian
    uint32 at src[iqh:iqh+4] is the fifth bit of weight l."""

    def codegen(context, builder, sig, args):
        q = _nibbles(builder, _load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 16)))
        qh = _splat(builder.load(_at(context, builder, sig.args[0], args[0], args[2], I32), align=1), I32, 32, builder)
        bits = builder.trunc(builder.and_(builder.lshr(qh, ir.Constant(_vec(I32, 32), list(range(32)))), _splat(1, I32, 32)), _vec(I8, 32))
        q = builder.or_(q, builder.shl(bits, _splat(4, I8, 32)))
        _store_wide(context, builder, sig.args[3], args[3], args[4], builder.sub(q, _splat(builder.trunc(args[5], I8), I8, 32, builder)))

    return types.void(src, intp, intp, dst, intp, bias), codegen


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
        _store_wide(context, builder, sig.args[4], args[4], args[5], builder.or_(q, builder.shl(bits, _splat(4, I8, 64))))

    return types.void(src, intp, intp, intp, dst, intp), codegen


@intrinsic
def unpack_q6k_half(typingctx, src, iql, iqh, dst, j):
    """dst[j:j+128] = q - 32 for half a Q6_K block: weight 32g + l (g < 4) has the low (g = 0, 1) or high
    (g = 2, 3) nibble of src[iql + l + 32 (g % 2)] as its low 4 bits, bits 2g, 2g+1 of src[iqh + l] as its top 2."""

    def codegen(context, builder, sig, args):
        ql = [_load(context, builder, sig.args[0], args[0], _plus(builder, args[1], 32 * h), _vec(I8, 32)) for h in (0, 1)]
        qh = _load(context, builder, sig.args[0], args[0], args[2], _vec(I8, 32))
        for g in range(4):
            low = builder.and_(ql[g % 2], _splat(0x0F, I8, 32)) if g < 2 else builder.lshr(ql[g % 2], _splat(4, I8, 32))
            top = builder.and_(builder.lshr(qh, _splat(2 * g, I8, 32)), _splat(3, I8, 32))
            q = builder.sub(builder.or_(low, builder.shl(top, _splat(4, I8, 32))), _splat(32, I8, 32))
            _store_wide(context, builder, sig.args[3], args[3], _plus(builder, args[4], 32 * g), q)

    return types.void(src, intp, intp, dst, intp), codegen
