"""Products with quantized weights (engine/quantized.py) on the fast path.

The textbook (quantized.textbook_product) dequantizes a tile of rows to float32 and lets NumPy
multiply. Here, what measurement justified instead (benchmarks/README.md):

- a few rows (a decode step, a batch step, a short prompt): a compiled kernel (kernels.py) reads
  each weight block once for all the rows, with the activations quantized to 8-bit blocks as
  llama.cpp's are (activations.py); the weight rows shared among the pass's threads, and the parts
  of a fused matrix (Q, K, V) multiplied in one call. The quantized rows are read from a copy with
  their rows interleaved 8 at a time (rows_of: interleave.py, source/blocks32, source/k_quants), made at the first
  product, which replaces the file's pages in memory;
- a long prompt: the same kernels for the block types whose integer products beat BLAS at any
  row count (ALL_ROWS, on AVX2 without VNNI); for the others, tiles of weight rows dequantized by
  a compiled loop (bit for bit formats.py's), then BLAS.

The compiled kernels are compiled once per machine (numba, in a process of its own: build.py) and
loaded the first time a quantized product runs (or when the CLI prepares a model on the kernels,
to say once that it compiles). Where they cannot be compiled or loaded, or TFCLI_KERNELS=numpy asks for
it, the textbook runs: the same numbers, slower.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

import numpy as np

from ...gguffile import FAULT_AROUND, release
from ...formats import GGMLType
from ...quantized import Part, Quantized, textbook_product
from . import interleave

# up to this many rows of x, the integer kernels; more, dequantized tiles and BLAS (one thread, AMD EPYC:
KERNEL_ROWS = 48
# kernels / tiles 0.88 at 32 rows, 0.81-0.90 at 48, 1.00-1.14 at 64 on SmolLM2's and Gemma 3's MLP matrices)
# ... except the block types whose kernels beat BLAS at any row count: on rows interleaved 8 at a time with
# the int16 sums of blocks32.RUN16 and k_quants.RUN16 (AMD EPYC Zen 1, one core, CPU time: 39-40 GFLOPS on
# SmolLM2's Q4_1 matrices at 64-512 rows, Gemma 3's Q5_0 31-32, its Q4_K 40-41 and Q6_K 30; OpenBLAS 33-36
# on the same float32 shapes at its best, 10 in some processes, and the tiles' dequantizing on top: 9-10
# under load; benchmarks/README.md). Q8_0 (29: a vpmaddwd per vpmaddubsw without VNNI) stays on tiles
# beyond KERNEL_ROWS there. With VNNI (a vpdpbusd does 4 multiply-adds per byte lane where a float32 FMA
# does one) every type, Q8_0 too, is faster on the integers at any row count: AMD EPYC Zen 4, 2 threads,
# pp512 of whole models 1.7-1.9x the tiles' (docs/speed.md). AVX-512 without VNNI: not measured, the tiles.
AVX2_ROWS = frozenset({GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q4_K, GGMLType.Q5_K,
                       GGMLType.Q6_K})
VNNI_ROWS = AVX2_ROWS | {GGMLType.Q8_0}


def _flags() -> set[str]:
    from ..load.compiled import cpu_name

    return set(" ".join(ln.split(":", 1)[-1] for ln in cpu_name().splitlines() if ln.startswith("flags")).split())


def all_rows_for(flags: set[str]) -> frozenset:
    """The block types whose products run on the integer kernels at any row count on a CPU with these flags."""
    if flags & {"avx512_vnni", "avx_vnni"}:
        return VNNI_ROWS
    return AVX2_ROWS if "avx2" in flags and "avx512f" not in flags else frozenset()


ALL_ROWS = all_rows_for(_flags())
_lock = threading.Lock()
_state: dict[str, object] = {}  # "kernels": the module once loaded; "why": why not


def wanted() -> bool:
    """Whether compiled kernels are asked for (TFCLI_KERNELS=numpy runs every product on the textbook)."""
    return os.environ.get("TFCLI_KERNELS", "").strip().lower() != "numpy"


def prepare(on_compile: Callable[[], None] | None = None) -> str | None:
    """Load (or compile, once per machine) the kernels now. Returns None when they run, else the
    one-line reason the textbook path will run instead. `on_compile` is called first when they
    have to be compiled (a first run), so that the caller can say so."""
    if not wanted():
        return None
    with _lock:
        if "kernels" in _state or "why" in _state:
            return _state.get("why")  # type: ignore[return-value]
        try:
            from ..load import kernels
        except ImportError as e:
            _state["why"] = f"compiled kernels unavailable ({e}): quantized products run in NumPy, several times slower"
            return _state["why"]  # type: ignore[return-value]
        try:
            if on_compile is not None and kernels.will_compile():
                on_compile()
            kernels.load()
            _state["kernels"] = kernels
        except kernels.KernelsUnavailable as e:
            _state["why"] = f"compiled kernels unavailable ({e}): quantized products run in NumPy, several times slower"
        return _state.get("why")  # type: ignore[return-value]


def running():
    """The kernels module when it runs (loaded, or compiled once per machine, the first time), else None."""
    if not wanted():
        return None
    if "kernels" not in _state and "why" not in _state:
        prepare()
    return _state.get("kernels")


def product(x: np.ndarray, w: Quantized, threads: int = 1, k=None) -> np.ndarray:
    """x [T, K] @ w [K, N] (w: a family's [in, out] weight, stored as N quantized rows) -> [T, N],
    the weight rows shared among `threads` threads (kernels.product). `k`: the kernels module, from
    a pass on them (its executor asked once), else looked up here."""
    k = k or running()
    if k is None or not k.SUPPORTED.issuperset(w.types):
        return textbook_product(x, w)
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x, dtype=np.float32)  # [T, K]
    if x.shape[0] > KERNEL_ROWS and not on_integers(w):
        return _tiled(k, x, w, threads)
    y = np.empty((x.shape[0], w.n_rows), dtype=np.float32)  # [T, N]
    calls, order = plan_of(k, w)
    for parts in calls:
        k.product_parts(x, parts, y, threads)
    # computed in the stored order; the model's is a permutation of it
    return y if order is None else y.take(order, axis=1)


def on_integers(w: Quantized) -> bool:
    """Whether w's products of any number of rows run on the integer kernels (ALL_ROWS), not only up to KERNEL_ROWS."""
    return w.types <= ALL_ROWS


_made: dict[int, tuple] = {}  # id(w) -> (a weak reference to w, what _kept made for it): forgotten with w


def _kept(w, make: Callable[[], object]):
    """make(), made the first time w (a matrix a model keeps) is multiplied and kept as long as w."""
    got = _made.get(id(w))
    if got is None or got[0]() is not w:
        got = _made[id(w)] = (weakref.ref(w), make())
        weakref.finalize(w, _made.pop, id(w), None)
    return got[1]


def plan_of(k, w) -> tuple[list, np.ndarray | None]:
    """The calls that multiply w and the order of its columns (_plan), made once and kept as long as
    w: a Quantized matrix's, or a float32 [in, out] view's stored rows [N, K] as one call. The
    per-product path (product, dense_product) and the compiled blocks (fast/run/blocks.py) share them."""
    if isinstance(w, Quantized):
        return _kept(w, lambda: _plan(k, w))
    return _kept(w, lambda: ([k.PartTable([(w.T, 0, 0)])], None))


def rows_of(p: Part):
    """What the kernels read for part p: for the quantized block types, its rows interleaved 8 at a
    time (interleave.py), made the first time and kept as long as p, the file's pages dropped as
    they are copied (so the copy replaces them in memory); for the floats, the file's rows."""
    if p.type_id not in interleave.EVERY:
        return p.data
    return _kept(p, lambda: interleave.interleave(p.data, p.type_id, release=_release))


def _release(view: np.ndarray) -> None:
    """Drop a tile's pages once copied, and those a read of it mapped around it (gguffile.FAULT_AROUND)."""
    release(view, FAULT_AROUND)


def _plan(k, w: Quantized) -> tuple[list, np.ndarray | None]:
    """The calls that multiply w (its parts of one layout share one: x quantized once, their rows in
    one pool of chunks) and the order of the model's columns among the stored ones [N] (None: the
    same), gathered once after the calls (the parts' own orders: Q and K rows a GGUF permutes)."""
    groups: dict[str, list] = {}
    order, first = np.arange(w.n_rows), 0  # [N]
    for p in w.parts:
        groups.setdefault(k.layout(p.type_id), []).append((rows_of(p), p.type_id, first))
        if p.order is not None:
            order[first : first + p.rows] = first + p.order
        first += p.rows
    return [k.PartTable(g) for g in groups.values()], None if all(p.order is None for p in w.parts) else order


def dense_product(k, x: np.ndarray, w: np.ndarray, threads: int = 1) -> np.ndarray | None:
    """x [T, K] @ w [K, N], w a float32 [in, out] view of stored rows [N, K], on the kernels' float32
    product (4 rows of x per pass over a weight row, the rows shared among the threads; each row of
    x the same bits whatever the others): measured 1.6-2.2x OpenBLAS's on a decode step's matrices
    (benchmarks/README.md). None when w is not such a view. k: the kernels module."""
    rows = w.T  # [N, K]
    if w.dtype != np.float32 or not rows.flags.c_contiguous or x.shape[0] > KERNEL_ROWS:
        return None
    y = np.empty((x.shape[0], rows.shape[0]), dtype=np.float32)  # [T, N]
    k.product_parts(x, plan_of(k, w)[0][0], y, threads)
    return y


TILE_ROWS = 256  # weight rows dequantized at a time for a long prompt


def _tiled(k, x: np.ndarray, w: Quantized, threads: int = 1) -> np.ndarray:
    """A long prompt: tiles of weight rows dequantized (compiled, bit for bit formats.py's), then
    NumPy's product on BLAS's threads; the parts of a type of ALL_ROWS (Gemma 3's Q5_0 queries and keys
    beside its Q8_0 values) on the integer kernels, on `threads` threads. [T, K] -> [T, N]"""
    y = np.empty((x.shape[0], w.n_rows), dtype=np.float32)  # [T, N]
    tile = np.empty((TILE_ROWS, w.cols), dtype=np.float32)  # [256, K]
    first = 0
    for p in w.parts:
        stored = np.empty((x.shape[0], p.rows), dtype=np.float32) if p.order is not None else None  # [T, n]
        rows = rows_of(p)
        if p.type_id in ALL_ROWS:
            table = _kept(rows, lambda: k.PartTable([(rows, p.type_id, 0)]))  # noqa: B023 (made now, for this part)
            k.product_parts(x, table, stored if stored is not None else y[:, first : first + p.rows], threads)
        for a in range(0, p.rows if p.type_id not in ALL_ROWS else 0, TILE_ROWS):
            b = min(a + TILE_ROWS, p.rows)
            # the file's bytes
            data = interleave.restore(rows, a, b) if isinstance(rows, interleave.Interleaved) else rows[a:b]
            k.dequantize_rows(data, p.type_id, tile, 0, b - a)  # [b-a, K]
            into = stored[:, a:b] if stored is not None else y[:, first + a : first + b]
            np.matmul(x, tile[: b - a].T, out=into)  # [T, K] @ [K, b-a] -> [T, b-a]
        if stored is not None:
            y[:, first : first + p.rows] = stored[:, p.order]
        first += p.rows
    return y
