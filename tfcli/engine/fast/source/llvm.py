"""The few LLVM vector operations the compiled kernels (jobs.py) are built from.

Why LLVM vector IR: numba compiles a plain loop over int8 blocks with every value widened to int64,
and LLVM then vectorizes the outer block loop with gathers; such a loop ran slower than NumPy's
float32 product (benchmarks/README.md). Written as vector loads, masks and shifts, a block is
unpacked in registers to 32 bytes, and its dot product with 32 bytes of x is one vpdpbusd (4 byte
products summed into each of 8 int32 lanes) on CPUs with VNNI, or vpmaddubsw then vpmaddwd (pairs
into 16 bits, pairs of those into 32) on AVX2 ones, as llama.cpp does: asked for by name (_dot4),
and written as the generic pattern elsewhere. The integer sums are exact, so every CPU gives the
same bits. numba has no float16 on the CPU, so a float16 scale is read with `fpext half`.

The k-quants' product (_dot_k) reads a weight row's bytes where the file has them and unpacks each
block once for up to 4 rows of x, never storing it (the 32-weight types' products, on rows
interleaved 8 at a time, are llvm_x8.py's, built from the operations here); the activations are 8-bit
integers (jobs._quantize_x, activations.py). The `unpack_*` functions store unpacked blocks for the dequantizer
(jobs._dequantize_*). Every rounding is explicit (llvm.fma, ordered reductions), so a row's
result is the same bits whether a call covers 1 row of x or 9.

Each function here is a numba `@intrinsic`: `(array, offset, ...)` where offset counts elements of
that array from its start (every array given is contiguous). Imported by jobs.py only, in
build.py's process: importing it imports numba.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...formats import BLOCK_TYPES
from ..load.compiled import cpu_features

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


def _intrinsic(builder, name: str, result: ir.Type, *args):
    """A call of the LLVM intrinsic `name` (declared once per module)."""
    mod = builder.module
    fn = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(result, [a.type for a in args]), name=name)
    return builder.call(fn, list(args))


PREFETCH = 8192  # bytes ahead of the block a kernel reads, asked for from memory (_prefetch)


def _prefetch(context, builder, arrty, arr, offset, size: int) -> None:
    """Ask for the cache lines of the `size` bytes PREFETCH bytes after byte `offset` of arr (the
    block a kernel reads): a product reads its rows straight through, and the hardware's own
    prefetcher runs too few lines ahead to keep a core's reads in flight (a decode step's largest
    product, Gemma 3's unembedding: 9.2 -> 4.3 ms on two threads; benchmarks/README.md). Every line
    of the block, not its first alone: a SmolLM2 batch step of 4 rows, whose products compute
    longer on each block, 5.2 -> 4.6 ms. A prefetch past the end is harmless. The float32 rows'
    product (jobs._dot_rows) runs slower with it, and goes without."""
    for line in range(0, size, 64):
        _ask(builder, _at(context, builder, arrty, arr, _plus(builder, offset, PREFETCH + line), I8), write=0)


def _ask(builder, at, write: int) -> None:
    """Ask for the cache line at pointer `at`, to be read (0) or written (1), into the first-level cache."""
    _intrinsic(builder, "llvm.prefetch.p0", ir.VoidType(), at, ir.Constant(I32, write), ir.Constant(I32, 3), ir.Constant(I32, 1))


def _reduce(builder, kind: str, v, *start):
    return _intrinsic(builder, f"llvm.vector.reduce.{kind}.v{v.type.count}{'i32' if kind == 'add' else 'f32'}", v.type.element, *start, v)


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


# --- the instructions the products are made of -----------------------------------------------------


def _fma(builder, a, b, c):
    """a * b + c rounded once (llvm.fma): explicit, so that every kernel rounds alike whatever LLVM
    would contract, and a row's result does not depend on how many rows a call covers."""
    return _intrinsic(builder, f"llvm.fma.{'v%df32' % a.type.count if isinstance(a.type, ir.VectorType) else 'f32'}", a.type, a, b, c)


def _pairs(builder, a, b):
    """[2n] a, b (integers, widened by the caller) -> [n]: lane i = a[2i] b[2i] + a[2i+1] b[2i+1]. The
    generic pattern of vpmaddubsw and vpmaddwd, for CPUs without them."""
    n = a.type.count // 2
    masks = [ir.Constant(_vec(I32, n), list(range(first, 2 * n, 2))) for first in (0, 1)]
    return builder.add(*[builder.mul(builder.shuffle_vector(a, a, m), builder.shuffle_vector(b, b, m), flags=["nsw"]) for m in masks])


def _ubytes_sbytes(builder, w, x):
    """[32] unsigned bytes w, signed bytes x -> [16] int16: lane i = w[2i] x[2i] + w[2i+1] x[2i+1] (vpmaddubsw;
    it saturates, which no caller reaches: w <= 128 or w <= 63, |x| <= 127)."""
    if "avx2" in _FEATURES:
        return _intrinsic(builder, "llvm.x86.avx2.pmadd.ub.sw", _vec(I16, 16), w, x)
    return _pairs(builder, builder.zext(w, _vec(I16, 32)), builder.sext(x, _vec(I16, 32)))


def _words(builder, a, b):
    """[16] int16 a, b -> [8] int32: lane i = a[2i] b[2i] + a[2i+1] b[2i+1] (vpmaddwd)."""
    if "avx2" in _FEATURES:
        return _intrinsic(builder, "llvm.x86.avx2.pmadd.wd", _vec(I32, 8), a, b)
    return _pairs(builder, builder.sext(a, _vec(I32, 16)), builder.sext(b, _vec(I32, 16)))


_FEATURES = cpu_features()
_VNNI = ("avx512vnni" in _FEATURES and "avx512vl" in _FEATURES) or "avxvnni" in _FEATURES


def _dot4(builder, w, x, acc=None):
    """[32] unsigned bytes w, signed bytes x -> [8] int32: lane i = the sum of w[j] x[j] for j = 4i..4i+3, exact,
    added to acc ([8] int32) when given. One vpdpbusd where the CPU has VNNI (it adds into acc); else
    vpmaddubsw, then vpmaddwd with ones (llama.cpp's x86 route), then the add. [64] bytes -> [16] int32
    on CPUs with 512-bit VNNI alone (llvm_x8.WIDE)."""
    n = w.type.count // 4
    lanes = _vec(I32, n)
    if _VNNI:
        start = acc if acc is not None else ir.Constant(lanes, [ir.Constant(I32, 0)] * n)
        return _intrinsic(builder, f"llvm.x86.avx512.vpdpbusd.{32 * n}", lanes, start, builder.bitcast(w, lanes), builder.bitcast(x, lanes))
    sums = _words(builder, _ubytes_sbytes(builder, w, x), _splat(1, I16, 16))
    return sums if acc is None else builder.add(acc, sums)


def _signed_dot4(builder, w, x):
    """_dot4 for signed bytes w (Q8_0's): |w| times x with w's sign (vpsignb), as llama.cpp does; elsewhere
    _dot4's generic route on both widened as signed (a pair's sum, at most 2 x 128 x 127, fits 16 bits)."""
    if "avx2" in _FEATURES:
        absw = _intrinsic(builder, "llvm.abs.v32i8", _vec(I8, 32), w, ir.Constant(ir.IntType(1), 0))  # -128 stays 0x80: 128 unsigned
        return _dot4(builder, absw, _intrinsic(builder, "llvm.x86.avx2.psign.b", _vec(I8, 32), x, w))
    return _words(builder, _pairs(builder, builder.sext(w, _vec(I16, 32)), builder.sext(x, _vec(I16, 32))), _splat(1, I16, 16))


# --- rows of x against one stored weight row, unpacked in registers ----------------------------------


def _row_of_x(builder, rows: int, per_block, blocks):
    """The shared frame of the product kernels: for r < rows, acc_r [8] float32 and low_r float32 summed
    over `blocks` blocks; per_block(b, acc, low) adds block b's share to each row's. Returns row r's
    sum(acc_r) + low_r (fixed order: the same bits whatever `rows` is)."""
    zeros = ir.Constant(_vec(F32, 8), [ir.Constant(F32, 0.0)] * 8)
    acc = [cgutils.alloca_once_value(builder, zeros) for _ in range(rows)]
    low = [cgutils.alloca_once_value(builder, ir.Constant(F32, 0.0)) for _ in range(rows)]
    with cgutils.for_range(builder, blocks) as loop:
        per_block(loop.index, acc, low)
    return [_reduce(builder, "fadd", builder.load(acc[r]), builder.load(low[r])) for r in range(rows)]


def _add_scaled(builder, acc, isum, scale):
    """acc [8] float32 += float(isum [8] int32) * scale, one rounding (llvm.fma)."""
    builder.store(_fma(builder, builder.sitofp(isum, _vec(F32, 8)), _splat(scale, F32, 8, builder), builder.load(acc)), acc)


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
    nibble = builder.lshr(builder.and_(c, ir.Constant(_vec(I8, 8), [0x0F] * 4 + [0xF0] * 4)), ir.Constant(_vec(I8, 8), [0] * 4 + [4] * 4))
    high = builder.or_(nibble, builder.shl(builder.lshr(a, _splat(6, I8, 8)), _splat(4, I8, 8)))  # [scales 4-7, mins 4-7]
    pick = lambda first: builder.zext(builder.shuffle_vector(low6, high, ir.Constant(_vec(I32, 8), [first + k for k in range(4)] + [8 + first + k for k in range(4)])), _vec(I16, 8))  # noqa: E731
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
                groups = []  # ([32] unsigned bytes q, [16] int16 scales of its pairs, offset of its first weight in the block)
                if kind == 14:  # Q6_K: ql[128] qh[64] scales i8[16] d
                    d = builder.fpext(_load(context, builder, t[0], src_, _plus(builder, o, 208), ir.HalfType()), F32)
                    sc = builder.sext(load8(_plus(builder, o, 192), 16), _vec(I16, 16))
                    for h in (0, 1):
                        ql = [load8(_plus(builder, o, 64 * h + 32 * k), 32) for k in (0, 1)]
                        qh = load8(_plus(builder, o, 128 + 32 * h), 32)
                        for g in range(4):
                            low4 = builder.and_(ql[g % 2], _splat(0x0F, I8, 32)) if g < 2 else builder.lshr(ql[g % 2], _splat(4, I8, 32))
                            top2 = builder.and_(builder.lshr(qh, _splat(2 * g, I8, 32)), _splat(3, I8, 32))
                            scales = builder.shuffle_vector(sc, sc, ir.Constant(_vec(I32, 16), [8 * h + 2 * g] * 8 + [8 * h + 2 * g + 1] * 8))
                            groups.append((builder.or_(low4, builder.shl(top2, _splat(4, I8, 32))), scales, 128 * h + 32 * g))
                    minimum = builder.fmul(d, ir.Constant(F32, -32.0))  # w = d sc (q - 32): -32 d sum_g sc_g sum(qx)_g
                    mins = builder.sext(sc, _vec(I32, 16))  # per 16 weights
                else:  # Q4_K: d dmin scales[12] qs[128]; Q5_K: d dmin scales[12] qh[32] qs[128]
                    d = builder.fpext(_load(context, builder, t[0], src_, o, ir.HalfType()), F32)
                    dmin = builder.fpext(_load(context, builder, t[0], src_, _plus(builder, o, 2), ir.HalfType()), F32)
                    sc, mn = _k_scales_vec(builder, load8(_plus(builder, o, 4), 16))
                    qh = load8(_plus(builder, o, 16), 32) if kind == 13 else None
                    for r in range(4):  # a run of 32 bytes: sub-block 2r in the low nibbles, 2r+1 in the high
                        y = load8(_plus(builder, o, (48 if kind == 13 else 16) + 32 * r), 32)
                        for half, q in enumerate((builder.and_(y, _splat(0x0F, I8, 32)), builder.lshr(y, _splat(4, I8, 32)))):
                            j = 2 * r + half
                            if qh is not None:
                                q = builder.or_(q, builder.shl(builder.and_(builder.lshr(qh, _splat(j, I8, 32)), _splat(1, I8, 32)), _splat(4, I8, 32)))
                            groups.append((q, _splat(builder.extract_element(sc, ir.Constant(I32, j)), I16, 16, builder), 32 * j))
                    minimum = builder.fneg(dmin)  # - dmin sum_j mn_j sum(qx)_j
                    mins = builder.zext(builder.shuffle_vector(mn, mn, ir.Constant(_vec(I32, 16), [j // 2 for j in range(16)])), _vec(I32, 16))  # per 16 weights
                for r in range(rows):
                    xo = builder.add(builder.add(ix_, builder.mul(K, ir.Constant(K.type, r))), builder.mul(s, ir.Constant(s.type, 256)))
                    xb = builder.add(builder.add(ixd_, builder.mul(ns_, ir.Constant(ns_.type, r))), s)
                    dx = _scalar(context, builder, t[4], xd_, xb)
                    isum = None
                    for q, scales, at in groups:
                        x = _load(context, builder, t[2], xq_, _plus(builder, xo, at), _vec(I8, 32))
                        p = _words(builder, _ubytes_sbytes(builder, q, x), scales)  # [8] int32
                        isum = p if isum is None else builder.add(isum, p)
                    _add_scaled(builder, acc[r], isum, builder.fmul(d, dx))
                    at = builder.add(builder.add(ixs_, builder.mul(K16, ir.Constant(K16.type, r))), builder.mul(s, ir.Constant(s.type, 16)))
                    imin = _reduce(builder, "add", builder.mul(_load(context, builder, t[5], xs_, at, _vec(I32, 16)), mins))
                    _add_low(builder, low[r], builder.fmul(minimum, dx), builder.sitofp(imin, F32))

            totals = _row_of_x(builder, rows, per_block, ns_)
            return totals[0] if rows == 1 else context.make_tuple(builder, sig.return_type, totals)

        return result(src, intp, xq, intp, xd, xs, intp, intp, intp), codegen

    return dot


# dot_q4_kx1(src, i, xq, ix, xd, xs, ixd, ixs, ns) -> float32, ..._x4 -> 4 float32, for Q4_K, Q5_K, Q6_K
dot_q4_kx1, dot_q5_kx1, dot_q6_kx1 = (_dot_k(k, 1) for k in (12, 13, 14))
dot_q4_kx4, dot_q5_kx4, dot_q6_kx4 = (_dot_k(k, 4) for k in (12, 13, 14))


def _switch(builder, value, cases, emit) -> None:
    """emit(case)'s code for each of `cases`, the one equal to `value` (an integer known at run time)
    taken; any other value does nothing. A kernel compiled once for every case a caller may pick."""
    done = builder.append_basic_block("done")
    switch = builder.switch(value, done)
    for case in cases:
        block = builder.append_basic_block(f"case{case}")
        switch.add_case(ir.Constant(value.type, case), block)
        builder.position_at_end(block)
        emit(case)
        builder.branch(done)
    builder.position_at_end(done)


@intrinsic
def run(typingctx, fn, pool, first, job, a, chunks):
    """status = fn(pool, first, job, a, chunks), each an int64: pool.py's tfcli_run, called by a job
    that runs jobs (block_job.py)."""

    def codegen(context, builder, sig, args):
        ptr = I8.as_pointer()
        callee = builder.inttoptr(args[0], ir.FunctionType(I32, [ptr] * 4 + [ir.IntType(64)]).as_pointer())
        return builder.call(callee, [*(builder.inttoptr(v, ptr) for v in args[1:5]), args[5]])

    return types.int32(*[types.int64] * 6), codegen
