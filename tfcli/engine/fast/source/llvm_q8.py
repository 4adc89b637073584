"""x quantized to 8-bit blocks in vector registers (jobs._quantize_x; activations.quantize is the
textbook): a block's largest |x|, its values rounded, their sums. Each is exact, so the bits are
the NumPy twin's. Imported by jobs.py only, in build.py's process (it imports numba through llvm.py)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .llvm import F32, I8, I32, _at, _intrinsic, _load, _reduce, _splat, _vec, intp


@intrinsic
def amax32(typingctx, x, i):
    """max |x[i:i+32]| of float32 x: exact in any order."""

    def codegen(context, builder, sig, args):
        v = _intrinsic(builder, "llvm.fabs.v32f32", _vec(F32, 32), _load(context, builder, sig.args[0], args[0], args[1], _vec(F32, 32)))
        for n in (16, 8, 4, 2, 1):  # halves against halves: one vmaxps each, no NaN handling (a NaN block is lost anyway)
            lo, hi = (builder.shuffle_vector(v, v, ir.Constant(_vec(I32, n), list(range(at, at + n)))) for at in (0, n))
            v = builder.select(builder.fcmp_ordered(">", lo, hi), lo, hi)
        return builder.extract_element(v, ir.Constant(I32, 0))

    return types.float32(x, intp), codegen


@intrinsic
def round32(typingctx, x, i, inv, q, j):
    """q[j:j+32] = rint(x[i:i+32] * inv), held to -127..127, as int8 (activations.quantize's q)."""

    def codegen(context, builder, sig, args):
        f32x = _vec(F32, 32)
        v = builder.fmul(_load(context, builder, sig.args[0], args[0], args[1], f32x), _splat(args[2], F32, 32, builder))
        v = _intrinsic(builder, "llvm.rint.v32f32", f32x, v)
        v = _intrinsic(builder, "llvm.maxnum.v32f32", f32x, v, ir.Constant(f32x, [ir.Constant(F32, -127.0)] * 32))
        v = _intrinsic(builder, "llvm.minnum.v32f32", f32x, v, ir.Constant(f32x, [ir.Constant(F32, 127.0)] * 32))
        builder.store(builder.fptosi(v, _vec(I8, 32)), _at(context, builder, sig.args[3], args[3], args[4], _vec(I8, 32)), align=1)

    return types.void(x, intp, inv, q, intp), codegen


@intrinsic
def sum16(typingctx, q, j):
    """The sum of the int8 q[j:j+16], as int32."""

    def codegen(context, builder, sig, args):
        return _reduce(builder, "add", builder.sext(_load(context, builder, sig.args[0], args[0], args[1], _vec(I8, 16)), _vec(I32, 16)))

    return types.int32(q, intp), codegen
