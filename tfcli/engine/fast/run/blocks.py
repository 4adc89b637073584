"""A few rows (a decode step, a lookup check, a short prompt) through a Llama-style model's blocks in
one compiled call: block_job.decode_blocks (fast/source/block_job.py), whose textbook is
model.Transformer.block with the family's attention (families/llama.py).

Why: a decode step of SmolLM2 makes about a hundred NumPy and Python calls a block around its four
products and its attention (norms, RoPE, the cache write, SiLU, residual adds, wrapping), a few
milliseconds a step that llama.cpp does not pay (benchmarks/README.md). Here the caller's thread
runs those steps compiled, and hands the products and the attention to the pool's threads as the
same jobs, with the same slots, that kernels.py calls one by one: each row's products and
attention are the same bits as on the per-step path; the norms, RoPE and SiLU are computed in
compiled code (within a few float32 roundings of NumPy's).

A Recipe is what they need of a model, read here from its family's layers (recipe_of: Llama's
block and the families built on it, Gemma 3's); a pass with hooks, more rows than the kernels'
products take (kernel_products.KERNEL_ROWS) or a family without a recipe runs the textbook block.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from ... import ops as textbook
from ...families.gemma3 import Gemma3
from ...families.llama import Llama
from ...kvcache import BatchCache, KVCache
from ...slots import Prompts, Slots
from ...quantized import Quantized
from ..arguments import BLOCKS_WIDTH, CALL_WIDTH, LAYER_WIDTH, ROW_WIDTH, SLOTS, Blocks, Call, LayerColumn, RowColumn
from ..arguments import kv_kind, kv_numbers
from .kernel_products import KERNEL_ROWS, plan_of


@dataclass(frozen=True)
class Layer:
    """One pre-norm block with grouped-query attention, RoPE and a SwiGLU MLP (Llama's), its weights as
    the family keeps them: matrices [in, out] (Quantized, or float32 views of stored rows)."""

    attn_norm: np.ndarray  # [D]
    w_qkv: np.ndarray | Quantized  # [D, (H+2Hkv)*Dh]
    b_qkv: np.ndarray | None  # [(H+2Hkv)*Dh]
    wo: np.ndarray | Quantized  # [H*Dh, D]
    bo: np.ndarray | None  # [D]
    mlp_norm: np.ndarray  # [D]
    w_in: np.ndarray | Quantized  # [D, 2F]: gate and up side by side
    w_out: np.ndarray | Quantized  # [F, D]
    q_norm: np.ndarray | None = None  # [Dh] (Qwen3, Gemma 3)
    k_norm: np.ndarray | None = None  # [Dh]
    # [D]: the attention's output normed before it joins the residual stream (Gemma 3)
    post_attn_norm: np.ndarray | None = None
    post_mlp_norm: np.ndarray | None = None  # [D]: the MLP's (Gemma 3)
    rope: int = 0  # which of the Recipe's RoPE tables its positions rotate by
    window: int | None = None  # its sliding window
    gelu: bool = False  # the gate's activation: SiLU, or the tanh GELU (ops.gelu)


@dataclass(frozen=True)
class Recipe:
    """What the compiled blocks need of a model (recipe_of): its layers, the RMSNorm's eps,
    RoPE's tables at given positions (one or two: positions [T] -> cos, sin [T, R/2]) and the factor
    the queries are multiplied by after their norm (Gemma 3)."""

    layers: tuple[Layer, ...]
    eps: float
    ropes: tuple[Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], ...]
    q_scale: float = 1.0


def recipe_of(model) -> Recipe | None:
    """A model's blocks as the compiled blocks compute them, read from its family's layers: Llama's
    (families/llama.py: Qwen2, Qwen3, Phi-3 are its block too) with a SwiGLU MLP, or Gemma 3's
    (families/gemma3.py: four norms, q/k norms, a GeGLU MLP, two RoPE tables); else None."""
    if isinstance(model, Gemma3):
        if not all(_gated(l.mlp, textbook.gelu) for l in model.layers):
            return None
        layers = tuple(
            Layer(
                l.attn_norm, l.w_qkv, l.b_qkv, l.wo, l.bo, l.mlp_norm, l.mlp.w_in, l.mlp.w_out, l.q_norm, l.k_norm,
                l.post_attn_norm, l.post_mlp_norm, rope=int(l.window is not None), window=l.window, gelu=True,
            )  # fmt: skip
            for l in model.layers
        )
        return Recipe(layers, model.config.norm_eps, (model.rope_global, model.rope_local), float(model.q_factor))
    if isinstance(model, Llama):
        if not all(_gated(l.mlp, textbook.silu) for l in model.layers):
            return None
        layers = tuple(
            Layer(l.attn_norm, l.w_qkv, l.b_qkv, l.wo, l.bo, l.mlp_norm, l.mlp.w_in, l.mlp.w_out, l.q_norm, l.k_norm,
                  window=model.window)
            for l in model.layers
        )  # fmt: skip
        return Recipe(layers, model.config.norm_eps, (model.rope,))
    return None


def _gated(m: textbook.MLP, act) -> bool:
    """Whether an MLP is act(gate) * up without biases, the compiled blocks' MLP."""
    return m.gated and m.act is act and m.b_in is None and m.b_out is None


class _Program:
    """The slots of decode_blocks for one model, T rows and a number of threads: the buffers, the
    layer table and every product's slots, made once (their addresses do not move)."""

    def __init__(self, k, model, recipe: Recipe, rows: int, threads: int):
        cfg = model.config
        D, H, Hkv, Dh, F = cfg.d_model, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.d_ff
        nq = (H + 2 * Hkv) * Dh
        self.keep: list = [recipe]  # every array the slots point into
        jobs = k.addresses()

        def buffer(*shape):
            a = np.zeros(shape, np.float32)
            self.keep.append(a)
            return a.ctypes.data

        a = np.zeros(BLOCKS_WIDTH, np.int64)
        a[Blocks.RUN], a[Blocks.ATTENTION], a[Blocks.THREADS] = jobs["run"], jobs["attention"], threads
        a[Blocks.ROWJOB], a[Blocks.SELF] = jobs["block_rows"], a.ctypes.data
        a[Blocks.T], a[Blocks.D], a[Blocks.H], a[Blocks.HKV], a[Blocks.DH], a[Blocks.F] = rows, D, H, Hkv, Dh, F
        a[Blocks.L] = cfg.n_layer
        # float32 bits
        a[Blocks.EPS], a[Blocks.QSCALE] = (int(np.float32(v).view(np.int32)) for v in (recipe.eps, recipe.q_scale))
        a[Blocks.HB] = buffer(rows, D)  # [T, D] the normed residual, the products' x
        # [T, (H+2Hkv)*Dh] as the product leaves it; in the model's order, rotated
        a[Blocks.QKV], a[Blocks.QM] = buffer(rows, nq), buffer(rows, nq)
        # [T, H*Dh] each head's context vector; [T, D] after W_o
        a[Blocks.Z], a[Blocks.O] = buffer(rows, H * Dh), buffer(rows, D)
        # [T, 2F] gate | up; [T, F]; [T, D]
        a[Blocks.GU], a[Blocks.ACT], a[Blocks.MO] = buffer(rows, 2 * F), buffer(rows, F), buffer(rows, D)
        aslots = np.zeros(rows * SLOTS, np.int64)  # [T, SLOTS]: each row's attention slots
        self.keep.append(aslots)
        a[Blocks.ASLOTS] = aslots.ctypes.data
        windows = cfg.windows or (None,) * cfg.n_layer  # which layers the cache keeps as sliding (KVCache)
        counts = [0, 0]
        table = np.zeros((cfg.n_layer, LAYER_WIDTH), np.int64)
        for i, layer in enumerate(recipe.layers):
            row = table[i]
            vectors = (
                (LayerColumn.NORM1, layer.attn_norm), (LayerColumn.NORM2, layer.mlp_norm),
                (LayerColumn.QNORM, layer.q_norm), (LayerColumn.KNORM, layer.k_norm), (LayerColumn.BQKV, layer.b_qkv),
                (LayerColumn.BO, layer.bo), (LayerColumn.POST1, layer.post_attn_norm),
                (LayerColumn.POST2, layer.post_mlp_norm),
            )
            for col, w in vectors:
                if w is not None:
                    w = np.ascontiguousarray(w, np.float32)
                    self.keep.append(w)
                    row[col] = w.ctypes.data
            sliding = bool(windows[i])
            row[LayerColumn.SLIDING], row[LayerColumn.CACHE] = sliding, counts[sliding]
            row[LayerColumn.WINDOW] = layer.window or 0
            row[LayerColumn.ROPE], row[LayerColumn.ACT] = layer.rope, layer.gelu
            counts[sliding] += 1
            # (w, its x, its out, out's width)
            products = (
                (layer.w_qkv, Blocks.HB, Blocks.QKV, nq), (layer.wo, Blocks.Z, Blocks.O, D),
                (layer.w_in, Blocks.HB, Blocks.GU, 2 * F), (layer.w_out, Blocks.ACT, Blocks.MO, D),
            )
            for m, (w, x_at, out_at, width) in enumerate(products):
                calls, order = self._calls(k, jobs, w, a[x_at], a[out_at], rows, width, threads)
                if order is not None:
                    order = np.ascontiguousarray(order, np.int64)
                    self.keep.append(order)
                    row[LayerColumn.ORDER] = order.ctypes.data
                for j, call in enumerate(calls):
                    at = LayerColumn.CALLS + (m * 2 + j) * CALL_WIDTH
                    row[at + Call.FIRST], row[at + Call.JOB], row[at + Call.ARGS], row[at + Call.CHUNKS] = call
        self.keep.append(table)
        a[Blocks.LAYERS] = table.ctypes.data
        self.slots = a
        self.scratch = np.zeros(0, np.float32)
        self.group = H // Hkv

    def _calls(self, k, jobs: dict, w, x_at: int, out_at: int, rows: int, width: int, threads: int):
        """The calls (first job, job, slots' address, chunks) that multiply x [rows, K] at x_at by w
        into out [rows, width] at out_at, as kernels.product_parts makes them, and the order of out's
        columns among the stored ones (or None)."""
        groups, order = plan_of(k, w)
        calls, K = [], w.shape[0]
        for parts in groups:
            chunks = parts.chunks(threads)
            buffers = parts.buffers(rows, K, chunks)
            slots = np.array(
                parts.call(x_at, rows, K, out_at, width, chunks, [b.ctypes.data for b in buffers]), np.int64
            )
            self.keep += [parts, slots, *buffers]
            calls.append((jobs[parts.first] if parts.first else 0, jobs[parts.job], slots.ctypes.data, chunks))
        return calls, order

    def run(self, k, x: np.ndarray, cache, positions: np.ndarray, first: int, ropes, threads: int) -> np.ndarray:
        a = self.slots
        rows, room = _rows(cache, positions)  # [T, RS], the most positions a row's layer holds
        # cos, sin [T, R/2] of each RoPE
        tables = [np.ascontiguousarray(t, np.float32) for rope in ropes for t in rope(positions)]
        if len(tables) == 2:
            tables *= 2
        cos, sin, cos2, sin2 = tables
        a[Blocks.COS2], a[Blocks.SIN2] = cos2.ctypes.data, sin2.ctypes.data
        x = np.array(x, np.float32, order="C")  # [T, D]: changed in place
        if self.scratch.size < max(threads, len(positions)) * self.group * room:
            # [threads or T, G, room]
            self.scratch = np.zeros(max(threads, len(positions)) * self.group * room, np.float32)
        a[Blocks.X], a[Blocks.ROWS], a[Blocks.FROM] = x.ctypes.data, rows.ctypes.data, first
        a[Blocks.SCRATCH] = self.scratch.ctypes.data
        # rows of a sequence (or of each of several)
        a[Blocks.SHARED] = isinstance(cache, Prompts) or (isinstance(cache, KVCache) and len(positions) > 1)
        a[Blocks.COS], a[Blocks.SIN], a[Blocks.R2] = cos.ctypes.data, sin.ctypes.data, cos.shape[1]
        k.decode_blocks(a, threads)
        return x


def _rows(cache, positions: np.ndarray) -> tuple[np.ndarray, int]:
    """The row table (slots.R_*) of a pass's rows through `cache`, its room made first, and the most
    positions any of its layers holds (the attention's scratch)."""
    table = np.zeros((len(positions), ROW_WIDTH), np.int64)  # [T, ROW_WIDTH]
    if isinstance(cache, BatchCache):  # row b: sequence b, every layer keeping every position
        for at, array in ((RowColumn.KG, cache.k), (RowColumn.VG, cache.v)):  # [L, B, Hkv, ...]
            table[:, at] = array.ctypes.data + np.arange(len(positions)) * array.strides[1]
            table[:, at + 1], table[:, at + 2], table[:, at + 3] = (
                kv_numbers(s, array.itemsize) for s in (array.strides[0], *array.strides[2:4])
            )
        table[:, RowColumn.POS], table[:, RowColumn.KV] = positions, kv_kind(cache.k.itemsize)
        return table, cache.capacity
    caches = cache.caches if isinstance(cache, (Slots, Prompts)) else [cache] * len(positions)
    start = int(positions[0])
    if isinstance(cache, KVCache):
        cache.reserve(start + len(positions), start)  # room for all the rows (the sliding layers may move)
    for c, n in cache.groups if isinstance(cache, Prompts) else ():
        c.reserve(c.length + n, c.length)  # each prompt's rows, before any row's arrays are read
    room = 0
    for t, (c, p) in enumerate(zip(caches, positions)):
        if isinstance(cache, Slots):
            c.reserve(int(p) + 1, int(p))
        for at, array in ((RowColumn.KG, c.k), (RowColumn.VG, c.v), (RowColumn.KW, c.ks), (RowColumn.VW, c.vs)):
            strides = [kv_numbers(s, array.itemsize) for s in array.strides[:3]]  # in numbers, whatever their kind
            table[t, at], table[t, at + 1 : at + 4] = array.ctypes.data, strides
        table[t, RowColumn.OFF], table[t, RowColumn.POS], table[t, RowColumn.SLIDES] = c.off, p, 1
        table[t, RowColumn.KV] = kv_kind(c.k.itemsize)
        room = max(room, c.room, c.ks.shape[2])
    return table, room


def recipe_supported(k, recipe: Recipe) -> bool:
    """Whether every matrix of the recipe has a compiled product (and only Q/K/V a column order)."""
    for layer in recipe.layers:
        for m, w in enumerate((layer.w_qkv, layer.wo, layer.w_in, layer.w_out)):
            if isinstance(w, Quantized):
                if not k.SUPPORTED.issuperset(w.types):
                    return False
                groups, order = plan_of(k, w)
                if len(groups) > 2 or (order is not None and m != 0):
                    return False
            elif w.dtype != np.float32 or not w.T.flags.c_contiguous:
                return False
    return True


class _Made(threading.local):
    """Each thread's programs (a program's buffers are written by the call that runs it): id(model)
    -> (a weak reference to it, its layers, its recipe or None, {(rows, threads): _Program})."""

    def __init__(self) -> None:
        self.by_model: dict[int, tuple] = {}


_made = _Made()


def takes(k, model, rows: int) -> bool:
    """Whether run() takes a pass of `rows` rows of `model` (without hooks): then each row's numbers
    are the same bits whatever the other rows are, so that several sequences may share a pass."""
    return rows <= KERNEL_ROWS and _recipe(k, model)[0] is not None


def run(k, model, first: int, x: np.ndarray, cache, positions: np.ndarray, threads: int) -> np.ndarray | None:
    """Blocks first..L-1 of `model` on x [T, D] at `positions` through a KVCache (a sequence's rows),
    a BatchCache or Slots (a row per sequence), or Prompts (the rows of several sequences) -> [T, D],
    or None where the compiled blocks do not run it (no recipe, another cache, too many rows)."""
    if type(cache) not in (KVCache, BatchCache, Slots, Prompts) or len(positions) > KERNEL_ROWS:
        return None
    recipe, programs = _recipe(k, model)
    if recipe is None:
        return None
    program = programs.get((len(positions), threads))
    if program is None:
        program = programs[(len(positions), threads)] = _Program(k, model, recipe, len(positions), threads)
    return program.run(k, x, cache, positions, first, recipe.ropes, threads)


def _recipe(k, model) -> tuple[Recipe | None, dict]:
    """The model's recipe (None: the compiled blocks do not run it) and this thread's programs of it."""
    made = _made.by_model
    got = made.get(id(model))
    # new, or its weights changed (quantize_weights)
    if got is None or got[0]() is not model or any(a is not b for a, b in zip(got[1], model.layers)):
        recipe = recipe_of(model)
        if recipe is not None and not recipe_supported(k, recipe):
            recipe = None
        got = made[id(model)] = (weakref.ref(model), list(model.layers), recipe, {})
        weakref.finalize(model, made.pop, id(model), None)
    return got[2], got[3]
