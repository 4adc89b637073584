"""Compiled products of float32 activations with GGUF-quantized weight rows, read in place.

The textbook is engine/formats.py: each block type's NumPy `dequantize`, then `x @ W.T`. Here the
same product runs on the stored bytes, the way llama.cpp's ggml-cpu kernels do it (its
`ggml_vec_dot_*` in ggml-cpu/quants.c): x is quantized once per call to 16-bit blocks
(activations.py is the NumPy twin, and says why 16 bits where llama.cpp keeps 8), and each block of
a weight row is unpacked in registers (llvm.py) and dotted with up to 4 rows of x at a time, in
integers, with one float multiply-add per block:

    Q4_0 Q5_0 Q8_0   x in blocks of 32 values, one float32 scale: w.x = dw dx sum(qw qx)
    Q4_1 Q5_1        the same, plus the block's sum of qx for the minimum: + mw dx sum(qx)
    Q4_K Q5_K Q6_K   x in blocks of 256 values, one scale, sums by 16 for the minimums
    F32 F16 BF16     float32 x as is, each weight row (converted to float32 once) dotted with 4 rows of x at a time

Q2_K and Q3_K have no compiled product (few files use them): they stay on the NumPy path, and
dequantize_rows runs formats' dequantizer for them.

numba is imported by load(), never by importing this module (`tfcli --help` must not pay for it);
compiled code is cached on disk under tfcli's home (cache_dir()). Every kernel releases the GIL;
a product's weight rows are shared among numba's OpenMP threads when the caller asks for more than
one (product(threads=...), the pass's thread policy), and a row's result is the same either way.
The LLVM vector operations the kernels are built from are in llvm.py.
"""

from __future__ import annotations

import threading

import numpy as np

from ..formats import BLOCK_TYPES
from .compiled import cache_dir, cpu_name, parallel_layer, renamed, writable

prange = range  # numba's parallel loop; a plain range in Python and in the serial kernels (load() sets numba's)


class KernelsUnavailable(Exception):
    """numba missing or failing to compile; str() is a one-line reason."""


F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30
BLOCKS32 = frozenset({Q4_0, Q4_1, Q5_0, Q5_1, Q8_0})  # blocks of 32 weights, x quantized Q8_0-style
K_QUANTS = frozenset({Q4_K, Q5_K, Q6_K})  # blocks of 256, x quantized Q8_K-style
FLOATS = frozenset({F32, F16, BF16})  # x stays float32
SUPPORTED: frozenset[int] = BLOCKS32 | K_QUANTS | FLOATS

_lock = threading.Lock()
_compiled: dict[str, object] = {}  # kernel name -> numba dispatcher, filled once by load()
llvm = None  # the module tfcli.engine.fast.llvm, imported by load() (the kernels read its intrinsics as a global)


# --- the activations (NumPy twins: activations.py) --------------------------------------------------


def _quantize_x(x, block, group):
    """x [T, K] float32 -> (q [T*K] int16, d [T, K/block] float32, sums [T, K/group] int32): per block
    d = max|x| / 32767 and q = rint(x / d) (activations.quantize computes the same numbers)."""
    T, K = x.shape
    q = np.empty(T * K, np.int16)
    d = np.empty((T, K // block), np.float32)
    sums = np.empty((T, K // group), np.int32)
    for t in range(T):
        for b in range(K // block):
            amax = np.float32(0)
            for k in range(b * block, (b + 1) * block):
                amax = max(amax, abs(x[t, k]))
            scale = amax / np.float32(32767)
            inv = np.float32(1) / scale if scale > 0 else np.float32(0)
            d[t, b] = scale
            for k in range(b * block, (b + 1) * block):
                q[t * K + k] = np.int16(min(max(np.rint(x[t, k] * inv), np.float32(-32767)), np.float32(32767)))
        for g in range(K // group):
            s = 0
            for k in range(g * group, (g + 1) * group):
                s += q[t * K + k]
            sums[t, g] = s
    return q, d, sums


# --- unpacking one weight row: int8 q, float scales (the layouts are formats.py's) ------------------


def _unpack_blocks32(kind, nbytes, row, wq, wd, wm):
    """A row of 32-weight blocks -> wq [K] int16 (the q the block's formula multiplies by d: Q4_0's
    nibble - 8, Q5_0's 5 bits - 16, Q4_1's nibble), wd [K/32] its scales d, wm [K/32] its minimums m."""
    for b in range(wd.size):
        o, j = b * nbytes, 32 * b
        wd[b] = llvm.half(row, o)
        if kind == Q4_0:  # d · qs[16]
            llvm.unpack_q4(row, o + 2, wq, j, 8)
        elif kind == Q4_1:  # d · m · qs[16]
            wm[b] = llvm.half(row, o + 2)
            llvm.unpack_q4(row, o + 4, wq, j, 0)
        elif kind == Q5_0:  # d · qh u32 · qs[16]
            llvm.unpack_q5(row, o + 6, o + 2, wq, j, 16)
        elif kind == Q5_1:  # d · m · qh u32 · qs[16]
            wm[b] = llvm.half(row, o + 2)
            llvm.unpack_q5(row, o + 8, o + 4, wq, j, 0)
        else:  # Q8_0: d · qs i8[32]
            llvm.unpack_q8(row, o + 2, wq, j)


def _k_scales(row, o, sc, mn, j):
    """The 12 bytes at row[o:] -> the 6-bit scales sc[j:j+8] and mins mn[j:j+8] of a Q4_K/Q5_K block (formats._k_scales)."""
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
        if kind == Q6_K:  # ql[128] · qh[64] · scales i8[16] · d
            llvm.unpack_q6k_half(row, o, o + 128, wq, j)
            llvm.unpack_q6k_half(row, o + 64, o + 160, wq, j + 128)
            for i in range(16):
                sc[16 * s + i] = np.int8(row[o + 192 + i])
            wd[s] = llvm.half(row, o + 208)
            continue
        wd[s], wdmin[s] = llvm.half(row, o), llvm.half(row, o + 2)
        _k_scales(row, o + 4, sc, mn, 8 * s)
        for r in range(4):  # a run of 32 bytes: sub-blocks 2r (low nibbles), 2r+1 (high)
            if kind == Q4_K:  # d · dmin · scales[12] · qs[128]
                llvm.unpack_q4k_run(row, o + 16 + 32 * r, wq, j + 64 * r)
            else:  # Q5_K: d · dmin · scales[12] · qh[32] · qs[128]
                llvm.unpack_q5k_run(row, o + 48 + 32 * r, o + 16, r, wq, j + 64 * r)


def _float_row(kind, row, w):
    """A row of F16 or BF16 weights (bytes) -> w [K] float32."""
    K = w.size
    if kind == F16:
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
    """out[:, n] = x @ w for a float32 row w [K]: 4 rows of x per pass over w, so w is read once for 4."""
    T, K = x.shape
    t = 0
    while t + 4 <= T:
        a0 = a1 = a2 = a3 = np.float32(0)
        for k in range(K):
            wk = w[k]
            a0 += x[t, k] * wk
            a1 += x[t + 1, k] * wk
            a2 += x[t + 2, k] * wk
            a3 += x[t + 3, k] * wk
        out[t, n], out[t + 1, n], out[t + 2, n], out[t + 3, n] = a0, a1, a2, a3
        t += 4
    while t < T:
        a = np.float32(0)
        for k in range(K):
            a += x[t, k] * w[k]
        out[t, n] = a
        t += 1


# --- the kernels: product (x @ W[lo:hi].T into out[:, lo:hi]) and dequantize (W[lo:hi] into out[lo:hi]) ---


def _product_blocks32(x, rows, kind, out, lo, hi, chunks):
    T, K = x.shape
    xq, xd, xs = _quantize_x(x, 32, 32)  # [T*K] int16, [T, K/32] float32, [T, K/32] int32: once for all rows
    xm = xd * xs.astype(np.float32)  # [T, K/32]: x's block sums, scaled, for the minimum term
    size = _chunk(lo, hi, chunks)
    for c in prange(chunks):  # parallel: one chunk of weight rows a thread (serial: one after another)
        _rows_blocks32(xq, xd, xm, rows, kind, out, lo + c * size, min(hi, lo + (c + 1) * size))


def _rows_blocks32(xq, xd, xm, rows, kind, out, lo, hi):
    T, nb = xd.shape
    K = 32 * nb
    rb = rows.shape[1]
    for n in range(lo, hi):
        # sum over blocks of dw dx sum(qw qx) + mw dx sum(qx) (llama.cpp's ggml_vec_dot_q4_1_q8_1; Q4_0,
        # Q5_0 with their bias as the minimum): 4 rows of x per pass over the weight row, then one at a time
        t = 0
        while t + 4 <= T:
            if kind == Q4_0:
                r4 = llvm.dot_q4_0x4(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            elif kind == Q4_1:
                r4 = llvm.dot_q4_1x4(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            elif kind == Q5_0:
                r4 = llvm.dot_q5_0x4(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            elif kind == Q5_1:
                r4 = llvm.dot_q5_1x4(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            else:
                r4 = llvm.dot_q8_0x4(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            out[t, n], out[t + 1, n], out[t + 2, n], out[t + 3, n] = r4
            t += 4
        for t in range(t, T):
            if kind == Q4_0:
                out[t, n] = llvm.dot_q4_0x1(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            elif kind == Q4_1:
                out[t, n] = llvm.dot_q4_1x1(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            elif kind == Q5_0:
                out[t, n] = llvm.dot_q5_0x1(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            elif kind == Q5_1:
                out[t, n] = llvm.dot_q5_1x1(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)
            else:
                out[t, n] = llvm.dot_q8_0x1(rows, n * rb, xq, t * K, xd, xm, t * nb, nb)


def _chunk(lo, hi, chunks):
    """Weight rows per chunk when lo..hi-1 is cut into `chunks` (a multiple of 16, the last chunk shorter)."""
    return ((hi - lo + chunks - 1) // chunks + 15) // 16 * 16


def _product_k(x, rows, kind, out, lo, hi, chunks):
    xq, xd, xs = _quantize_x(x, 256, 16)  # [T*K] int16, [T, K/256] float32, [T, K/16] int32: once for all rows
    size = _chunk(lo, hi, chunks)
    for c in prange(chunks):
        _rows_k(xq, xd, xs, rows, kind, out, lo + c * size, min(hi, lo + (c + 1) * size))


def _rows_k(xq, xd, xs, rows, kind, out, lo, hi):
    T, ns = xd.shape
    K = 256 * ns
    rb = rows.shape[1]
    for n in range(lo, hi):
        # sum over blocks of dx (d sum_j sc_j sum(qw qx) - dmin sum_j mn_j sum(qx)), j the sub-blocks (llama.cpp's
        # ggml_vec_dot_q4_K_q8_K, ggml_vec_dot_q6_K_q8_K): 4 rows of x per pass over the weight row, then one at a time
        t = 0
        while t + 4 <= T:
            if kind == Q4_K:
                r4 = llvm.dot_q4_kx4(rows, n * rb, xq, t * K, xd, xs, t * ns, t * 16 * ns, ns)
            elif kind == Q5_K:
                r4 = llvm.dot_q5_kx4(rows, n * rb, xq, t * K, xd, xs, t * ns, t * 16 * ns, ns)
            else:
                r4 = llvm.dot_q6_kx4(rows, n * rb, xq, t * K, xd, xs, t * ns, t * 16 * ns, ns)
            out[t, n], out[t + 1, n], out[t + 2, n], out[t + 3, n] = r4
            t += 4
        for t in range(t, T):
            if kind == Q4_K:
                out[t, n] = llvm.dot_q4_kx1(rows, n * rb, xq, t * K, xd, xs, t * ns, t * 16 * ns, ns)
            elif kind == Q5_K:
                out[t, n] = llvm.dot_q5_kx1(rows, n * rb, xq, t * K, xd, xs, t * ns, t * 16 * ns, ns)
            else:
                out[t, n] = llvm.dot_q6_kx1(rows, n * rb, xq, t * K, xd, xs, t * ns, t * 16 * ns, ns)


def _product_f32(x, rows, out, lo, hi, chunks):
    size = _chunk(lo, hi, chunks)
    for c in prange(chunks):
        for n in range(lo + c * size, min(hi, lo + (c + 1) * size)):
            _dot_rows(x, rows[n], out, n)


def _product_f16(x, rows, kind, out, lo, hi, chunks):
    size = _chunk(lo, hi, chunks)
    for c in prange(chunks):
        w = np.empty(x.shape[1], np.float32)
        for n in range(lo + c * size, min(hi, lo + (c + 1) * size)):
            _float_row(kind, rows[n], w)
            _dot_rows(x, w, out, n)


def _dequantize_blocks32(rows, kind, nbytes, out, lo, hi):
    """formats._q4_0 .. _q8_0, operation for operation: w = q * d (+ m)."""
    K = out.shape[1]
    wq, wd, wm = np.empty(K, np.int16), np.empty(K // 32, np.float32), np.zeros(K // 32, np.float32)
    with_min = kind == Q4_1 or kind == Q5_1
    for n in range(lo, hi):
        _unpack_blocks32(kind, nbytes, rows[n], wq, wd, wm)
        for k in range(K):
            w = np.float32(wq[k]) * wd[k // 32]
            out[n, k] = w + wm[k // 32] if with_min else w


def _dequantize_k(rows, kind, nbytes, out, lo, hi):
    """formats._k_weights, operation for operation: w = (d * sc_j) * q - (dmin * mn_j)."""
    K = out.shape[1]
    wq, wd, wdmin = np.empty(K, np.int16), np.empty(K // 256, np.float32), np.zeros(K // 256, np.float32)
    sc, mn = np.zeros(K // 16, np.int32), np.zeros(K // 32, np.int32)
    for n in range(lo, hi):
        _unpack_k(kind, nbytes, rows[n], wq, wd, wdmin, sc, mn)
        for k in range(K):
            if kind == Q6_K:  # no minimum: formats subtracts dmin * 0 = +0.0, which changes no bit
                out[n, k] = (wd[k // 256] * np.float32(sc[k // 16])) * np.float32(wq[k])
            else:
                low = wdmin[k // 256] * np.float32(mn[k // 32])
                out[n, k] = (wd[k // 256] * np.float32(sc[k // 32])) * np.float32(wq[k]) - low


def _dequantize_f16(rows, kind, out, lo, hi):
    w = np.empty(out.shape[1], np.float32)
    for n in range(lo, hi):
        _float_row(kind, rows[n], w)
        out[n, :] = w


# --- compiling, caching, calling ----------------------------------------------------------------------

_HELPERS = ("_quantize_x", "_unpack_blocks32", "_k_scales", "_unpack_k", "_float_row", "_chunk")
_ROWS = ("_rows_blocks32", "_rows_k")  # a chunk of a product's rows: one call per thread, compiled on their own
_PRODUCTS = ("_product_blocks32", "_product_k", "_product_f32", "_product_f16")  # each compiled serial and parallel
_KERNELS = _PRODUCTS + ("_dequantize_blocks32", "_dequantize_k", "_dequantize_f16")


def _signatures(types) -> dict[str, tuple]:
    """Each kernel's one signature. Inputs are typed read-only (numba passes a writable array where a
    read-only one is asked for, not the reverse), out as any layout (a column slice of a larger array)."""
    def read_only(dtype):
        return types.Array(dtype, 2, "C", readonly=True)

    x, rows, rows_f32, out, i = read_only(types.float32), read_only(types.uint8), read_only(types.float32), types.float32[:, :], types.intp
    return {
        "_product_blocks32": (x, rows, i, out, i, i, i), "_product_k": (x, rows, i, out, i, i, i),
        "_product_f32": (x, rows_f32, out, i, i, i), "_product_f16": (x, rows, i, out, i, i, i),
        "_dequantize_blocks32": (rows, i, i, out, i, i), "_dequantize_k": (rows, i, i, out, i, i),
        "_dequantize_f16": (rows, i, out, i, i),
    }  # fmt: skip


def will_compile() -> bool:
    """True when load() would compile: not loaded yet in this process, and no kernels cached on disk."""
    return not _compiled and not (cache_dir() / "ready").exists()


def load() -> None:
    """Import numba and compile every kernel, or load it from the on-disk cache; raises KernelsUnavailable.
    Idempotent and thread-safe; cheap after the first call."""
    if _compiled:
        return
    with _lock:
        if not _compiled:
            _compiled.update(_compile())


def _compile() -> dict[str, object]:
    global llvm
    try:
        import numba
        from numba import types

        from . import llvm as intrinsics
    except ImportError as e:
        raise KernelsUnavailable(f"numba is not importable ({e})") from e
    llvm = intrinsics
    folder = cache_dir()
    cached = writable(folder)
    before = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = str(folder)  # read when a function is decorated: only ours go there
    try:
        # Helpers are compiled into the kernels that call them (and cached with them), so they need no cache of their own.
        helpers = {name: numba.njit(nogil=True, inline="always")(globals()[name]) for name in _HELPERS}
        helpers["_dot_rows"] = numba.njit(nogil=True, fastmath={"reassoc", "contract"})(_dot_rows)
        globals().update(helpers)
        globals()["prange"] = numba.prange
        globals().update({name: numba.njit(nogil=True)(globals()[name]) for name in _ROWS})
        signatures = _signatures(types)
        kernels = {name: numba.njit([types.void(*signatures[name])], nogil=True, cache=cached)(globals()[name])
                   for name in _KERNELS}  # fmt: skip
        if parallel_layer(numba):  # the same products over chunks of rows on numba's OpenMP threads
            for name in _PRODUCTS:  # under names of their own: numba's cache keys a function by its name, not its flags
                kernels[name + "_parallel"] = numba.njit([types.void(*signatures[name])], nogil=True, cache=cached, parallel=True)(renamed(globals()[name], name + "_parallel"))
        kernels["_quantize_x"] = helpers["_quantize_x"]
    except Exception as e:  # a numba or LLVM failure: say it in one line, keep the NumPy path
        raise KernelsUnavailable(f"the kernels did not compile ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e
    finally:
        numba.config.CACHE_DIR = before
    if cached:
        try:
            (folder / "ready").write_text(f"numba {numba.__version__}\n{cpu_name()}\n", encoding="utf-8")
        except OSError:
            pass
    return kernels


def product(x: np.ndarray, rows: np.ndarray, type_id: int, out: np.ndarray, lo: int, hi: int, threads: int = 1) -> None:
    """out[:, lo:hi] = x @ W[lo:hi].T, W the [N, K] matrix whose rows are `rows` (uint8 [N, row bytes];
    F32: float32 [N, K]). x [T, K] float32 C-contiguous; out [T, N] float32, any strides. Releases the
    GIL. `threads` > 1: the rows in that many chunks on numba's OpenMP threads (parallel_layer)."""
    if not _compiled:
        load()
    k = _compiled
    chunks = threads if threads > 1 and hi - lo >= 32 * threads and "_product_f32_parallel" in k else 1
    suffix = "_parallel" if chunks > 1 else ""
    if type_id in BLOCKS32:
        k["_product_blocks32" + suffix](x, rows, type_id, out, lo, hi, chunks)  # the kernels know each type's block size
    elif type_id in K_QUANTS:
        k["_product_k" + suffix](x, rows, type_id, out, lo, hi, chunks)
    elif type_id == F32:
        k["_product_f32" + suffix](x, rows.view(np.float32) if rows.dtype == np.uint8 else rows, out, lo, hi, chunks)
    elif type_id in FLOATS:
        k["_product_f16" + suffix](x, rows, type_id, out, lo, hi, chunks)
    else:
        raise ValueError(f"no compiled product for tensor type {type_id} (see SUPPORTED)")


def dequantize_rows(rows: np.ndarray, type_id: int, out: np.ndarray, lo: int, hi: int) -> None:
    """out[lo:hi] = the weights of rows lo..hi-1 ([hi-lo, K] float32), bit for bit formats.BLOCK_TYPES[type_id].dequantize.
    Types without a compiled product (Q2_K, Q3_K) run that NumPy dequantizer. Releases the GIL."""
    if not _compiled:
        load()
    k = _compiled
    if type_id in BLOCKS32:
        k["_dequantize_blocks32"](rows, type_id, BLOCK_TYPES[type_id].nbytes, out, lo, hi)
    elif type_id in K_QUANTS:
        k["_dequantize_k"](rows, type_id, BLOCK_TYPES[type_id].nbytes, out, lo, hi)
    elif type_id == F32:
        out[lo:hi] = rows[lo:hi].view(np.float32) if rows.dtype == np.uint8 else rows[lo:hi]
    elif type_id in FLOATS:
        k["_dequantize_f16"](rows, type_id, out, lo, hi)
    else:
        bt = BLOCK_TYPES[type_id]
        out[lo:hi] = bt.dequantize(np.asarray(rows[lo:hi]).reshape(-1, bt.nbytes)).reshape(hi - lo, -1)


def quantize_activations(x: np.ndarray, type_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compiled quantization of x [T, K] that product() uses for weights of type_id: (q [T, K] int16,
    d [T, K/block] float32, sums [T, K/group] int32). A test hook: activations.quantize is its twin."""
    load()
    block, group = (256, 16) if type_id in K_QUANTS else (32, 32)
    q, d, sums = _compiled["_quantize_x"](np.ascontiguousarray(x, np.float32), block, group)
    return q.reshape(x.shape), d, sums
