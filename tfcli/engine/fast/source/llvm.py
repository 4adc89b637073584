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
interleaved 8 at a time, are blocks32/dot.py's, built from the operations here); the activations are 8-bit
integers (jobs._quantize_x, activations.py). The `unpack_*` functions store unpacked blocks for the dequantizer
(jobs._dequantize_*). Every rounding is explicit (llvm.fma, ordered reductions), so a row's
result is the same bits whether a call covers 1 row of x or 9.

Each function here is a numba `@intrinsic`: `(array, offset, ...)` where offset counts elements of
that array from its start (every array given is contiguous). Imported by jobs.py only, in
build.py's process: importing it imports numba.
"""

from __future__ import annotations

import os

import llvmlite.binding as binding
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

I8, I16, I32, FLOAT = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()
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


def _prefetch(context, builder, arrty, arr, offset, size: int, level: int = 1) -> None:
    """Ask for the cache lines of the `size` bytes PREFETCH bytes after byte `offset` of arr (the
    block a kernel reads) into the cache of `level` (1: the first, 2: the second): a product reads its
    rows straight through, and the hardware's own prefetcher runs too few lines ahead to keep a core's
    reads in flight (a decode step's largest product, Gemma 3's unembedding: 9.2 -> 4.3 ms on two
    threads; benchmarks/README.md). Every line of the block, not its first alone: a SmolLM2 batch step
    of 4 rows, whose products compute longer on each block, 5.2 -> 4.6 ms. A prefetch past the end is
    harmless. The float32 rows' product (jobs._dot_rows) runs slower with it, and goes without."""
    for line in range(0, size, 64):
        at = _at(context, builder, arrty, arr, _plus(builder, offset, PREFETCH + line), I8)
        _ask(builder, at, write=0, locality=4 - level)


def _ask(builder, at, write: int, locality: int = 3) -> None:
    """Ask for the cache line at pointer `at`, to be read (0) or written (1), into the first-level cache
    (locality 3: x86's prefetcht0), or the second (2: prefetcht1)."""
    _intrinsic(
        builder, "llvm.prefetch.p0", ir.VoidType(), at, ir.Constant(I32, write), ir.Constant(I32, locality),
        ir.Constant(I32, 1),
    )


def _reduce(builder, kind: str, v, *start):
    return _intrinsic(
        builder, f"llvm.vector.reduce.{kind}.v{v.type.count}{'i32' if kind == 'add' else 'f32'}", v.type.element,
        *start, v,
    )


# --- float16 -------------------------------------------------------------------------------------------


@intrinsic
def half(typingctx, src, i):
    """The float16 at bytes src[i:i+2] (a uint8 array), as float32, exactly."""

    def codegen(context, builder, sig, args):
        return builder.fpext(_load(context, builder, sig.args[0], args[0], args[1], ir.HalfType()), FLOAT)

    return types.float32(src, intp), codegen


@intrinsic
def halves16(typingctx, src, i, dst, j):
    """dst[j:j+16] = the 16 float16 at bytes src[i:i+32], as float32 (vcvtph2ps)."""

    def codegen(context, builder, sig, args):
        v = builder.fpext(
            _load(context, builder, sig.args[0], args[0], args[1], _vec(ir.HalfType(), 16)), _vec(FLOAT, 16)
        )
        builder.store(v, _at(context, builder, sig.args[2], args[2], args[3], v.type), align=1)

    return types.void(src, intp, dst, intp), codegen


# --- unpacking weight blocks (bytes of src) to int16 q (dst), formats.py's layouts ---------------------


def _nibbles(builder, v):
    """[w] bytes -> [2w] int8: the low nibbles, then the high ones."""
    w = v.type.count
    return builder.shuffle_vector(
        builder.and_(v, _splat(0x0F, I8, w)), builder.lshr(v, _splat(4, I8, w)),
        ir.Constant(_vec(I32, 2 * w), list(range(2 * w))),
    )


@intrinsic
def unpack_q8(typingctx, src, i, dst, j):
    """dst[j:j+32] = the int8 at src[i:i+32] (Q8_0's q)."""

    def codegen(context, builder, sig, args):
        _store_wide(
            context, builder, sig.args[2], args[2], args[3],
            _load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 32)),
        )

    return types.void(src, intp, dst, intp), codegen


@intrinsic
def unpack_q4(typingctx, src, i, dst, j, bias):
    """dst[j:j+32] = the nibbles of src[i:i+16] - bias (Q4_0: bias 8, Q4_1: 0); weights 0..15 are the low nibbles."""

    def codegen(context, builder, sig, args):
        q = _nibbles(builder, _load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 16)))
        _store_wide(
            context, builder, sig.args[2], args[2], args[3],
            builder.sub(q, _splat(builder.trunc(args[4], I8), I8, 32, builder)),
        )

    return types.void(src, intp, dst, intp, bias), codegen


@intrinsic
def unpack_q5(typingctx, src, iqs, iqh, dst, j, bias):
    """dst[j:j+32] = (nibble | fifth bit << 4) - bias (Q5_0: bias 16, Q5_1: 0); bit l of the little-endian
    uint32 at src[iqh:iqh+4] is the fifth bit of weight l."""

    def codegen(context, builder, sig, args):
        q = _nibbles(builder, _load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 16)))
        qh = _splat(builder.load(_at(context, builder, sig.args[0], args[0], args[2], I32), align=1), I32, 32, builder)
        bits = builder.trunc(
            builder.and_(builder.lshr(qh, ir.Constant(_vec(I32, 32), list(range(32)))), _splat(1, I32, 32)),
            _vec(I8, 32),
        )
        q = builder.or_(q, builder.shl(bits, _splat(4, I8, 32)))
        _store_wide(
            context, builder, sig.args[3], args[3], args[4],
            builder.sub(q, _splat(builder.trunc(args[5], I8), I8, 32, builder)),
        )

    return types.void(src, intp, intp, dst, intp, bias), codegen


# --- the instructions the products are made of -----------------------------------------------------


def _fma(builder, a, b, c):
    """a * b + c rounded once (llvm.fma): explicit, so that every kernel rounds alike whatever LLVM
    would contract, and a row's result does not depend on how many rows a call covers."""
    return _intrinsic(
        builder, f"llvm.fma.{'v%df32' % a.type.count if isinstance(a.type, ir.VectorType) else 'f32'}", a.type, a, b, c
    )


def _pairs(builder, a, b):
    """[2n] a, b (integers, widened by the caller) -> [n]: lane i = a[2i] b[2i] + a[2i+1] b[2i+1]. The
    generic pattern of vpmaddubsw and vpmaddwd, for CPUs without them."""
    n = a.type.count // 2
    masks = [ir.Constant(_vec(I32, n), list(range(first, 2 * n, 2))) for first in (0, 1)]
    return builder.add(
        *[builder.mul(builder.shuffle_vector(a, a, m), builder.shuffle_vector(b, b, m), flags=["nsw"]) for m in masks]
    )


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


def cpu_features() -> frozenset[str]:
    """The host CPU's features LLVM knows, for the kernels' choice of instructions (load/compiled.cache_dir
    keys the compiled code to the CPU). TFCLI_KERNEL_FEATURES (comma-separated) compiles as for
    another CPU's, a test's way to check them. Called in build.py's process."""
    if os.environ.get("TFCLI_KERNEL_FEATURES") is not None:
        return frozenset(f for f in os.environ["TFCLI_KERNEL_FEATURES"].split(",") if f)
    try:
        return frozenset(name for name, on in binding.get_host_cpu_features().items() if on)
    except RuntimeError:
        return frozenset()


_FEATURES = cpu_features()
_VNNI = ("avx512vnni" in _FEATURES and "avx512vl" in _FEATURES) or "avxvnni" in _FEATURES


def _dot4(builder, w, x, acc=None):
    """[32] unsigned bytes w, signed bytes x -> [8] int32: lane i = the sum of w[j] x[j] for j = 4i..4i+3, exact,
    added to acc ([8] int32) when given. One vpdpbusd where the CPU has VNNI (it adds into acc); else
    vpmaddubsw, then vpmaddwd with ones (llama.cpp's x86 route), then the add. [64] bytes -> [16] int32
    on CPUs with 512-bit VNNI alone (blocks32/dot.py's WIDE)."""
    n = w.type.count // 4
    lanes = _vec(I32, n)
    if _VNNI:
        start = acc if acc is not None else ir.Constant(lanes, [ir.Constant(I32, 0)] * n)
        return _intrinsic(
            builder, f"llvm.x86.avx512.vpdpbusd.{32 * n}", lanes, start, builder.bitcast(w, lanes),
            builder.bitcast(x, lanes),
        )
    sums = _words(builder, _ubytes_sbytes(builder, w, x), _splat(1, I16, 16))
    return sums if acc is None else builder.add(acc, sums)


def _signed_dot4(builder, w, x):
    """_dot4 for signed bytes w (Q8_0's): |w| times x with w's sign (vpsignb), as llama.cpp does; elsewhere
    _dot4's generic route on both widened as signed (a pair's sum, at most 2 x 128 x 127, fits 16 bits)."""
    if "avx2" in _FEATURES:
        # -128 stays 0x80: 128 unsigned
        absw = _intrinsic(builder, "llvm.abs.v32i8", _vec(I8, 32), w, ir.Constant(ir.IntType(1), 0))
        return _dot4(builder, absw, _intrinsic(builder, "llvm.x86.avx2.psign.b", _vec(I8, 32), x, w))
    return _words(
        builder, _pairs(builder, builder.sext(w, _vec(I16, 32)), builder.sext(x, _vec(I16, 32))), _splat(1, I16, 16)
    )


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
