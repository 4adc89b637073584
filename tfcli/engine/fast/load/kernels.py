"""Compiled products of float32 activations with GGUF-quantized weight rows, read in place.

What they compute and how is jobs.py's (the numba sources) and llvm.py's (the vector operations).
This module runs them: the first time on a machine, build.py compiles them in a process of its own
into object files under tfcli's home (compiled.cache_dir()); every process then loads those with
elf.py and calls them through ctypes. So the process that multiplies holds the machine code and
nothing else: no numba, no LLVM (measured: about 130 MB once they have compiled anything).

A product's weight rows are cut into chunks shared among the pool's threads (pool.py) when the
caller asks for more than one (product(threads=...), the pass's thread policy); a row's result is
the same bits either way. Q2_K and Q3_K have no compiled product (few files use them): they stay
on the NumPy path, and dequantize_rows runs formats' dequantizer for them.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from ...formats import BLOCK_TYPES, GGMLType
from . import elf, workers
from ..arguments import ATTENTION_THREADS_FROM, PART_WIDTH, SLOTS, X8, Attention, Blocks, PartColumn, Product
from ..arguments import kv_kind, kv_numbers
from ..run.activations import layout as x_layout
from .compiled import cache_dir, key_taken, orphan_guard, ours, read_regular, remove_stale, writable
from ..run.interleave import EVERY, TYPES, Interleaved, interleave

__all__ = [
    "KernelsUnavailable", "SUPPORTED", "attention", "cache_dir", "dequantize_rows", "layout", "load", "PartTable",
    "product", "product_parts", "quantize_activations", "will_compile", "writable",
]


class KernelsUnavailable(Exception):
    """The kernels cannot be compiled or loaded here; str() is a one-line reason."""


BLOCKS32 = frozenset(TYPES)  # blocks of 32 weights (source/blocks32 lays them out), x quantized Q8_0-style
K_QUANTS = frozenset({GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K})  # blocks of 256, x quantized Q8_K-style
FLOATS = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16})  # x stays float32
SUPPORTED: frozenset[int] = BLOCKS32 | K_QUANTS | FLOATS
# the quantized blocks, rows interleaved 8 at a time (interleave.py): a PartTable row's kind
INTERLEAVED = frozenset(t + X8 for t in EVERY)

_lock = threading.Lock()
_k: dict[str, object] = {}  # filled once by load(): the jobs' addresses, `run`, the loaded objects, the pool
_JOB = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
)
_WORK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)
_PACK = struct.Struct(f"<{SLOTS}q")


# --- loading ------------------------------------------------------------------------------------------


def will_compile() -> bool:
    """True when load() would compile: not loaded yet in this process, and no kernels cached on disk."""
    return not _k and not ours(cache_dir())


def load() -> None:
    """Load the kernels, compiling them first on a machine that has none cached; raises
    KernelsUnavailable. Idempotent and thread-safe; cheap after the first call."""
    if _k:
        return
    with _lock:
        if not _k:
            _k.update(_load())


def _load(again: bool = True) -> dict[str, object]:
    """The kernels from the cache folder, compiled first if it has none. A folder of tfcli's that cannot be
    loaded (a file damaged or cut short: each object's sha256 is checked) is removed and compiled again,
    once; then the reason is a KernelsUnavailable, as for a key's path taken by another's (key_taken)."""
    folder = cache_dir()
    temporary = None
    if not ours(folder):
        if taken := key_taken(folder):  # before a compile of a minute, not after
            raise KernelsUnavailable(taken)
        if writable(folder.parent):
            _build_into(folder)
        else:  # nowhere to keep them: compiled for this process alone
            temporary = Path(tempfile.mkdtemp(prefix="tfcli-kernels-"))
            _build(temporary)
            folder = temporary
    try:
        index = json.loads(read_regular(folder / "index.json", 1 << 20).decode("utf-8"))
        objects = {name: read_regular(folder / f"{name}.o", 1 << 28) for name in [*index["jobs"], "pool"]}
        if any(hashlib.sha256(data).hexdigest() != index["sha256"][name] for name, data in objects.items()):
            raise ValueError("a compiled file does not match its sha256")
        symbols, keep = _place(objects, index)
        pool = index["pool"]
        jobs = {name: symbols[name] for name in index["jobs"]}
        work = _WORK(symbols["pool.work"]) if pool["threads"] else None
        return {"jobs": jobs, "run": _JOB(symbols["pool"]), "run_at": symbols["pool"], "work": work, "keep": keep}
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error, RuntimeError) as e:
        if again and temporary is None and ours(folder) and writable(folder.parent):
            shutil.rmtree(folder, ignore_errors=True)
            return _load(again=False)
        raise KernelsUnavailable(f"the compiled kernels in {folder} do not load ({type(e).__name__}: {e})") from e
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def _place(objects: dict[str, bytes], index: dict) -> tuple[dict[str, int], list]:
    """Each object placed in memory -> ({job: address, "pool": run's, "pool.work": work's}, what keeps them alive)."""
    wanted = {
        name: ([index["jobs"][name]] if name != "pool" else [index["pool"]["run"], index["pool"]["work"]])
        for name in objects
    }
    addresses, keep = {}, []
    if elf.supported() and os.environ.get("TFCLI_KERNEL_LOADER", "") != "llvm":
        for name, data in objects.items():
            try:
                # numba's runtime: only in paths the jobs never take
                placed = elf.Loaded(data, may_trap=("NRT_", "numba_"))
            except elf.ObjectError as e:
                raise ValueError(str(e)) from e
            keep.append(placed)
            found = [placed.symbols[s] for s in wanted[name]]
            addresses.update({name: found[0]} if name != "pool" else {"pool": found[0], "pool.work": found[1]})
        return addresses, keep
    from . import llvm_loader  # the one module of the process that multiplies to import llvmlite

    return llvm_loader.place(objects, wanted)


def _build_into(folder: Path) -> None:
    """Compile beside `folder`, then rename into place: never a half-written folder (a compile killed, two at once)."""
    partial = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        _build(partial)
        try:
            partial.rename(folder)  # onto nothing, or an empty folder; never onto anyone's files
        except OSError as e:
            if not ours(folder):  # not another process's kernels, which are the same as ours
                raise KernelsUnavailable(f"cannot put the compiled kernels at {folder} ({e.strerror or e})") from e
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    remove_stale(folder)


def _build(folder: Path) -> None:
    """Compile the sources of this tfcli into `folder`, in a process of its own (only it imports numba).
    It imports tfcli from this package's root: -P keeps the working directory off its path, where
    another tfcli (a checkout of another version, say) would come first and write its code under
    this version's key. The child ends when this process ends, however it ends (compiled.orphan_guard)."""
    package_root = str(Path(__file__).resolve().parents[4])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
    try:
        build = f"from tfcli.engine.fast.source.build import build; build(Path({str(folder)!r}))"
        code = orphan_guard() + "from pathlib import Path; " + build
        r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, env=env, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KernelsUnavailable(f"the kernels did not compile ({type(e).__name__})") from e
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit status {r.returncode}"
        raise KernelsUnavailable(
            f"numba is not importable ({why.strip()})"
            if why.startswith(("ModuleNotFoundError", "ImportError"))
            else f"the kernels did not compile ({why.strip()})"
        )


# --- calling ------------------------------------------------------------------------------------------


def _data_address(a: np.ndarray) -> int:
    """The address of a's first element. NumPy's `a.ctypes.data` costs 2 µs, a tenth of a small
    product; the array object's layout (PyArrayObject: the object header, then `data`) is fixed."""
    return ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value or 0


_DATA_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)
_probe = np.arange(3, dtype=np.float32)[1:]
if ctypes.c_void_p.from_address(id(_probe) + _DATA_OFFSET).value != _probe.ctypes.data:  # a NumPy laid out otherwise

    def _data_address(a: np.ndarray) -> int:  # noqa: F811
        return a.ctypes.data


class _Buffers(threading.local):
    """Each thread's activation buffers, kept between calls of the same shape."""

    def __init__(self) -> None:
        self.by_shape: dict[tuple[int, int, int], tuple] = {}


_buffers = _Buffers()


def _activations(parts: PartTable, T: int, K: int) -> list[int]:
    """The addresses of this thread's buffers for x [T, K] quantized for `parts` (PartTable.buffers), kept between
    calls."""
    key = (T, K, parts.block)
    got = _buffers.by_shape.get(key)
    if got is None:
        if len(_buffers.by_shape) > 64:
            _buffers.by_shape.clear()
        arrays = parts.buffers(T, K, 1)
        got = _buffers.by_shape[key] = (arrays, [a.ctypes.data for a in arrays])
    return got[1]


def _rows_ok(rows: np.ndarray) -> np.ndarray:
    if rows.flags.c_contiguous:
        return rows
    return np.ascontiguousarray(rows)


class _Args(threading.local):
    """Each thread's argument array for the jobs (arguments.py), reused from call to call."""

    def __init__(self) -> None:
        self.a = (ctypes.c_int64 * SLOTS)()
        self.address = ctypes.addressof(self.a)


_args = _Args()


def _product_args(**named: int) -> list[int]:
    """A product job's argument `a`, each field given by its name in arguments.Product; the rest 0."""
    a = [0] * SLOTS
    for name, value in named.items():
        a[getattr(Product, name)] = value
    return a


def _call(first: str | None, job: str, slots: list[int], chunks: int, threads: int) -> None:
    args = _args
    _PACK.pack_into(args.a, 0, *slots)
    jobs = _k["jobs"]
    pool = workers.acquire(threads, _k["work"])
    try:
        status = _k["run"](
            pool.address if pool is not None else None, jobs[first] if first else None, jobs[job], args.address, chunks
        )
    finally:
        if pool is not None:
            pool.lock.release()
    if status != 0:
        raise RuntimeError(f"compiled kernel {job} failed (status {status})")


def addresses() -> dict[str, int]:
    """Where the jobs are ({name: address}, and "run": tfcli_run's), for a job that calls jobs (decode_blocks)."""
    if not _k:
        load()
    return {**_k["jobs"], "run": _k["run_at"]}


def decode_blocks(slots: np.ndarray, threads: int = 1) -> None:
    """block_job.decode_blocks with its slots (arguments.Blocks, an int64 array it keeps for the call): on the
    caller's thread, its products and attention on the pool's when `threads` > 1 and the pool is
    free (else every chunk here: the same bits). Releases the GIL."""
    if not _k:
        load()
    pool = workers.acquire(threads, _k["work"])
    try:
        slots[Blocks.POOL] = pool.address if pool is not None else 0  # the calls inside hand their chunks to it
        status = _k["run"](None, None, _k["jobs"]["decode_blocks"], slots.ctypes.data, 1)
    finally:
        if pool is not None:
            pool.lock.release()
    if status != 0:
        raise RuntimeError(f"compiled kernel decode_blocks failed (status {status})")


def layout(type_id: int) -> str:
    """Which job multiplies weights of this type: parts of one layout share a call (PartTable)."""
    return "k" if type_id in K_QUANTS else "floats" if type_id in FLOATS else "blocks32"


def _held(rows, type_id: int):
    """What a call reads for these rows: the quantized block types interleaved (interleave.py)."""
    if isinstance(rows, Interleaved):
        return rows
    return interleave(_rows_ok(rows), type_id) if type_id in EVERY else _rows_ok(rows)


def _entry(rows, type_id: int, col: int) -> list[int]:
    """A row of a PartTable (arguments.PartColumn): an Interleaved part's groups, else its stored rows."""
    e = [0] * PART_WIDTH
    if isinstance(rows, Interleaved):
        e[PartColumn.ROWS], e[PartColumn.RB] = _data_address(rows.groups), rows.groups.strides[0]
        e[PartColumn.KIND], e[PartColumn.N] = rows.type_id + X8, rows.rows
    else:
        e[PartColumn.ROWS], e[PartColumn.RB], e[PartColumn.KIND] = _data_address(rows), rows.strides[0], type_id
        e[PartColumn.N] = len(rows)
    e[PartColumn.COL] = col
    return e


class PartTable:
    """Weight rows that one call multiplies: a list of (rows, type_id, col), each the n rows of a
    matrix as product() takes them (the 32-weight types interleaved here, unless given as an
    interleave.Interleaved) and the column of out its first row fills, all of one layout(). Their
    table of addresses (arguments.PartColumn) is made once: a matrix keeps its PartTable
    (fast/run/kernel_products.py)."""

    def __init__(self, parts: list[tuple[np.ndarray | Interleaved, int, int]]) -> None:
        types = {t for _, t, _ in parts}
        if (
            not types <= SUPPORTED
            or len({layout(t) for t in types}) != 1
            or any(isinstance(r, Interleaved) and t != r.type_id for r, t, _ in parts)
        ):
            raise ValueError(
                f"no compiled product for tensor types {sorted(types)} in one call (see SUPPORTED, layout)"
            )
        self.parts = [(_held(rows, t), t, col) for rows, t, col in parts]  # held: the table points into them
        self.table = np.array([_entry(*p) for p in self.parts], np.int64)  # [P, PART_WIDTH]
        self.address, self.count = self.table.ctypes.data, len(self.table)
        self.rows = int(self.table[:, PartColumn.N].sum())
        self.kind = layout(parts[0][1])
        self.job = "product_floats" if self.kind == "floats" else "product_quantized"
        self.first = None if self.kind == "floats" else "quantize"  # the job run once before the chunks: x quantized
        self.block, self.sum_size = x_layout(parts[0][1])
        # what every call shares
        self.slots = _product_args(
            BLOCK=self.block, SUM_SIZE=self.sum_size, HI=self.rows, PARTS=self.address, NPARTS=self.count
        )

    def chunks(self, threads: int) -> int:
        """How many chunks a call on `threads` threads cuts the rows into (under 32 rows a thread: one)."""
        return threads if threads > 1 and self.rows >= 32 * threads else 1

    def buffers(self, T: int, K: int, chunks: int) -> tuple[np.ndarray, ...]:
        """What a call on x [T, K] writes besides out: W32 [chunks, K] float32 (each chunk's F16 or BF16
        weight row as float32), or x quantized: q [T*K] int8, d [T, K/block] float32, sums [T, K/sum_size]
        int32, xm [T, K/32] float32 (arguments.py)."""
        if self.kind == "floats":
            return (np.empty((chunks, K), np.float32),)
        return (
            np.empty(T * K, np.int8), np.empty((T, K // self.block), np.float32),
            np.empty((T, K // self.sum_size), np.int32), np.empty((T, K // 32), np.float32),
        )

    def call(self, x_at: int, T: int, K: int, out_at: int, ld: int, chunks: int, buffers: list[int]) -> list[int]:
        """The slots of a call: x [T, K] at address x_at into out at out_at (rows ld elements apart), in
        `chunks` chunks, writing the buffers (the addresses of buffers()' arrays)."""
        slots = self.slots.copy()
        slots[Product.X], slots[Product.T], slots[Product.K] = x_at, T, K
        slots[Product.OUT], slots[Product.LD], slots[Product.CHUNKS] = out_at, ld, chunks
        if self.kind == "floats":
            slots[Product.W32] = buffers[0]
        else:
            slots[Product.XQ], slots[Product.XD], slots[Product.XS], slots[Product.XM] = buffers
        return slots


def product(x: np.ndarray, rows: np.ndarray, type_id: int, out: np.ndarray, lo: int, hi: int, threads: int = 1) -> None:
    """out[:, lo:hi] = x @ W[lo:hi].T, W the [N, K] matrix whose rows are `rows` (uint8 [N, row bytes];
    F32: float32 [N, K]). x [T, K] float32 C-contiguous; out [T, N] float32, any strides. Releases the
    GIL. `threads` > 1: the rows in that many chunks on the pool's threads."""
    product_parts(x, PartTable([(rows[lo:hi], type_id, lo)]), out, threads)


def product_parts(x: np.ndarray, parts: PartTable, out: np.ndarray, threads: int = 1) -> None:
    """For each (rows, type_id, col) of `parts`: out[:, col:col+n] = x @ rows.T. The parts share one
    call, x quantized once for all, and their rows are cut into chunks together."""
    if not _k:
        load()
    if out.strides[1] != 4 or out.strides[0] % 4:
        into = np.empty(out.shape, np.float32)
        product_parts(x, parts, into, threads)
        for col, n in parts.table[:, [PartColumn.COL, PartColumn.N]]:
            out[:, col : col + n] = into[:, col : col + n]
        return
    if not x.flags.c_contiguous or x.dtype != np.float32:
        x = np.ascontiguousarray(x, np.float32)
    T, K = x.shape
    chunks = parts.chunks(threads)
    scratch = parts.buffers(T, K, chunks) if parts.kind == "floats" else None  # held until the call returns
    buffers = [scratch[0].ctypes.data] if scratch is not None else _activations(parts, T, K)
    _call(
        parts.first, parts.job,
        parts.call(_data_address(x), T, K, _data_address(out), out.strides[0] // 4, chunks, buffers), chunks, threads,
    )


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, threads: int = 1) -> np.ndarray:
    """fast/run/dense_ops._attention_block for a decode step, without weights, softcap or window, compiled
    (attention_job.attention): q [Hkv, G, 1, Dh] for the last of S positions, k [Hkv, Dh, S] and v [Hkv, S,
    Dh] as the caches give them (views of keys and values kept [Hkv, S, Dh]) -> out [Hkv, G, 1, Dh]. A Q8_0
    cache's (engine/kvcache.py): k [Hkv, Dh/32 x 34, S] and v [Hkv, S, Dh/32 x 34], the bytes of its blocks
    (uint8), read in place."""
    if q.shape[2] != 1:
        raise ValueError("the compiled attention takes one query position (a decode step)")
    if not _k:
        load()
    q = np.ascontiguousarray(q, np.float32)
    n_kv, group, _, head_dim = q.shape
    s_len = k.shape[2]
    k = k.transpose(0, 2, 1)  # [Hkv, S, Dh], as the caches keep the keys
    (kh, ks, kd), (vh, vs, vd) = k.strides, v.strides
    size = k.itemsize  # float32, float16 or Q8_0 keys and values (engine/kvcache.py's KV_TYPES), read as kept
    if k.dtype == np.uint8:  # Q8_0 blocks: whole rows of them, strides in whole blocks
        if head_dim % 32 or k.shape[2] * 32 != head_dim * 34 or v.dtype != k.dtype or v.shape != k.shape \
                or kd != 1 or vd != 1 or (kh | ks | vh | vs) % 34:
            raise ValueError("Q8_0 keys and values: rows of Dh/32 blocks of 34 bytes, Dh a multiple of 32")
    elif k.dtype not in (np.float32, np.float16) or v.dtype != k.dtype or kd != size or vd != size \
            or (kh | ks | vh | vs) % size:
        k, v = np.ascontiguousarray(k, np.float32), np.ascontiguousarray(v, np.float32)
        size = 4
    out = np.empty(q.shape, np.float32)  # [Hkv, G, 1, Dh]
    # shorter: not worth a hand-off
    chunks = threads if threads > 1 and s_len * n_kv * group * head_dim >= ATTENTION_THREADS_FROM else 1
    # fewer heads than threads (Gemma 3's one), or not a multiple: their queries in parts
    split = 1 if n_kv % chunks == 0 else min(group, chunks)
    chunks = min(chunks, n_kv * split)
    scratch = np.empty((chunks, group, s_len), np.float32)  # [chunks, G, S]: a head's scores, then their exponentials
    a = [0] * SLOTS
    a[Attention.Q], a[Attention.ROWS], a[Attention.DH], a[Attention.HKV] = _data_address(q), group, head_dim, n_kv
    a[Attention.K], a[Attention.KH] = _data_address(k), kv_numbers(k.strides[0], size)
    a[Attention.KS] = kv_numbers(k.strides[1], size)
    a[Attention.V], a[Attention.VH] = _data_address(v), kv_numbers(v.strides[0], size)
    a[Attention.VS] = kv_numbers(v.strides[1], size)
    a[Attention.KV] = kv_kind(size)
    a[Attention.S], a[Attention.OUT], a[Attention.CHUNKS] = s_len, _data_address(out), chunks
    a[Attention.SCRATCH], a[Attention.SPLIT] = _data_address(scratch), split
    _call(None, "attention", a, chunks, threads)
    return out


def dequantize_rows(rows: np.ndarray, type_id: int, out: np.ndarray, lo: int, hi: int) -> None:
    """out[lo:hi] = the weights of rows lo..hi-1 ([hi-lo, K] float32), bit for bit
    formats.BLOCK_TYPES[type_id].dequantize.
    Types without a compiled product (Q2_K, Q3_K) run that NumPy dequantizer. Releases the GIL."""
    if not _k:
        load()
    if type_id == GGMLType.F32:
        out[lo:hi] = rows[lo:hi].view(np.float32) if rows.dtype == np.uint8 else rows[lo:hi]
        return
    if type_id not in SUPPORTED or out.strides[1] != 4 or out.strides[0] % 4:
        bt = BLOCK_TYPES[type_id]
        out[lo:hi] = bt.dequantize(np.asarray(rows[lo:hi]).reshape(-1, bt.nbytes)).reshape(hi - lo, -1)
        return
    rows = _rows_ok(rows)
    K = out.shape[1]
    scratch = [np.empty(K, np.int16), np.empty(K // 32, np.float32), np.empty(K // 32, np.float32),
               np.empty(K // 16, np.int32), np.empty(K // 32, np.int32), np.empty(K, np.float32)]  # fmt: skip
    buffers = {name: a.ctypes.data for name, a in zip(("WQ", "WD", "WM", "SC", "MN", "W32"), scratch)}
    slots = _product_args(
        K=K, ROWS=_data_address(rows), RB=rows.shape[1], KIND=type_id, OUT=_data_address(out), LD=out.strides[0] // 4,
        LO=lo, HI=hi, CHUNKS=1, **buffers,
    )  # fmt: skip
    _call(None, "dequantize", slots, 1, 1)


def quantize_activations(x: np.ndarray, type_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compiled quantization of x [T, K] that product() uses for weights of type_id: (q [T, K] int8,
    d [T, K/block] float32, sums [T, K/sum_size] int32). A test hook: activations.quantize is its twin."""
    load()
    x = np.ascontiguousarray(x, np.float32)
    T, K = x.shape
    block, sum_size = x_layout(type_id)
    q, d, sums = np.empty(T * K, np.int8), np.empty((T, K // block), np.float32), np.empty((T, K // sum_size), np.int32)
    xm = np.empty((T, K // 32), np.float32)
    slots = _product_args(
        X=x.ctypes.data, T=T, K=K, BLOCK=block, SUM_SIZE=sum_size, XQ=q.ctypes.data, XD=d.ctypes.data,
        XS=sums.ctypes.data, XM=xm.ctypes.data,
    )
    _call("quantize", "quantize", slots, 0, 1)  # `first` alone: no chunk of rows
    return q.reshape(T, K), d, sums
