"""The fast executor: the textbook's numbers (engine/executor.py, Plain), faster.

What measurement justified, each in benchmarks/README.md:

- a product of up to 256 rows with a stored [out, in] matrix as (w x^T)^T, which reads the stored
  rows instead of repacking the matrix (fast/run/dense_ops.py, linear);
- the MLP of a pass of 2-16 rows (a batch step, a lookup check, a short prompt) split by hidden units,
  a share on each thread, one hand-off per MLP;
- a long prompt cut into parts, each part on its own thread through all the blocks, waiting at
  each block for the keys and values of the part before it (split_prompt, Parts, fast/run/parts.py);
- quantized weights multiplied by compiled kernels on their blocks (fast/run/kernel_products.py); in the
  passes of a model on the kernels (quantized, or KERNELS_FROM bytes of float32 weights or more:
  on_kernels), its float32 few-row products and its decode-step attention compiled as well, and
  its blocks in one compiled call (fast/run/blocks.py);
- RowByRow, the batch-invariant executor a server's decode steps use: each row's products are the
  one-row products, on blocks of weights kept in cache for all rows (each_row).
"""

from __future__ import annotations

import copy
import weakref
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from ... import ops as textbook
from ...config import ModelConfig
from ...executor import Plain, Plan, check_pass
from ...kvcache import KVCache
from ...quantized import Quantized
from ...threads import ON_THIS_THREAD, new_helper, single_threaded_blas
from . import dense_ops, kernel_products
from .parts import PartCache, Relay


KERNELS_FROM = 64 << 20  # bytes of float32 weights from which a model's passes run on the compiled kernels (on_kernels)
MLP_SHARE = 0.56  # of a split MLP's hidden units, the calling thread's share (the helper wakes up late)
PART_MIN_TOKENS = 160  # shorter prompt parts are faster as one part on BLAS's own threads


class Fast(Plain):
    """The same numbers, faster. `workers` threads may share a pass; `batch`: its rows are the
    sequences of a batch step (engine/batch.py), for which the small-matrix blocks win even on
    one thread. `helper`: a thread kept between passes (a Session's); otherwise one of its own."""

    def __init__(self, workers: int = 1, helper: Executor | None = None, batch: bool = False):
        self.workers = workers
        self.batch = batch
        self.helper = helper if helper is not None or workers < 2 else new_helper()

    # the kernels module, in a pass of a model on them (on_kernels): its float32 products and decode attention too
    kernels = None

    def linear(self, x: np.ndarray, w: np.ndarray | Quantized, b: np.ndarray | None = None) -> np.ndarray:
        # [T, out]
        y = kernel_products.product(x, w, self.workers, self.kernels) if isinstance(w, Quantized) else self.dense(x, w)
        if y is None:
            y = dense_ops.linear(x, w)  # [T, out]
        if b is not None:
            y += b
        return y

    def dense(self, x: np.ndarray, w: np.ndarray) -> np.ndarray | None:
        """x @ w on the kernels' float32 product in a pass on the kernels (kernel_products.dense_product),
        else None: the caller's NumPy product runs."""
        return kernel_products.dense_product(self.kernels, x, w, self.workers) if self.kernels is not None else None

    def attention(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int, weights: bool, window: int | None = None,
        softcap: float | None = None,
    ):
        t_len, s_len = q.shape[2], k.shape[2]
        compiled = self.kernels if not weights and not softcap and t_len <= dense_ops.FEW_ROWS else None
        if compiled is None:
            # grouped heads, masked square only, blocks of queries
            return dense_ops.attention(q, k, v, start, weights, window, softcap)
        # A decode step on the kernels: their attention, one call for every head. A few rows (a lookup
        # check, a short prompt): the same call for each row over the keys it sees, so that each row's
        # numbers are a decode step's, bit for bit: a lookup check then accepts what greedy decoding chose.
        if t_len == 1:
            first = s_len - window if window and s_len > window else 0  # a sliding layer sees the last `window`
            return compiled.attention(q, k[:, :, first:], v[:, first:], self.workers), None
        out = np.empty(q.shape, np.float32)  # [Hkv, G, T, Dh]
        for t in range(t_len):
            end = s_len - t_len + t + 1  # the keys up to this row's position
            first = end - window if window and end > window else 0
            out[:, :, t : t + 1] = compiled.attention(
                q[:, :, t : t + 1], k[:, :, first:end], v[:, first:end], self.workers
            )
        return out, None

    def blocks(self, model, first: int, x: np.ndarray, cache, positions: np.ndarray) -> np.ndarray | None:
        """A few rows of a model on the kernels through its blocks in one compiled call (fast/run/blocks.py), or
        None."""
        if self.kernels is None:
            return None
        from . import blocks

        return blocks.run(self.kernels, model, first, x, cache, positions, self.workers)

    def rows_apart(self, model, rows: int) -> bool:
        """Whether a pass of `rows` rows of `model` (no hooks) gives each row the same bits whatever
        the other rows are: on the compiled blocks (fast/run/blocks.py), so that the prompts of several
        sequences may share one pass (generate.prefill_together)."""
        if not on_kernels(model):
            return False
        k = self.with_kernels().kernels
        if k is None:
            return False
        from . import blocks

        return blocks.takes(k, model, rows)

    def with_kernels(self) -> Fast:
        """This executor for the passes of a model on the kernels (made once)."""
        if self.kernels is not None:
            return self
        if getattr(self, "_with_kernels", None) is None:
            self._with_kernels = copy.copy(self)
            self._with_kernels.kernels = kernel_products.running()
        return self._with_kernels

    def alone(self) -> Fast:
        """This executor with every product on the calling thread: a prompt part's (Parts), whose
        thread is one of the workers. With the kernels' pool as well, the part that held it and the
        other were three busy threads on two cores (a 512-token prompt of the 1.5B class on a Zen 4,
        in turn: 98-109 -> 120-126 tok/s). Made for each such pass (a shallow copy), so it never
        outlives the executor's own state: with_kernels() copies this executor."""
        if self.workers == 1:
            return self
        one = copy.copy(self)
        one.workers, one.helper = 1, None
        return one

    def sized(self, rows: int) -> Plain:
        """The executor for a pass of `rows` rows in one part."""
        few = rows > 1 and (self.batch or (self.workers > 1 and rows <= dense_ops.FEW_ROWS))
        return _FewRows(self, self.helper if self.workers > 1 else ON_THIS_THREAD) if few else self

    def numerics(self, model, rows: int) -> str:
        """The products of a pass of up to kernel_products.KERNEL_ROWS rows of a model on the kernels are
        theirs: with the activations quantized to 8 bits for quantized weights (as llama.cpp's),
        each row's numbers its own whatever the others; longer passes: the same for the matrices whose
        kernels run any number of rows (kernel_products.on_integers), float32 on BLAS for the others
        and for other models, as the textbook's."""
        if not on_kernels(model) or self.with_kernels().kernels is None:
            return "float32"
        if rows <= kernel_products.KERNEL_ROWS:
            return "8-bit activations" if model.quantized() else "float32, compiled"
        on = _on_integers(model)
        if on == {True}:
            return "8-bit activations"
        return "8-bit activations, some float32" if True in on else "float32"

    def plan(self, model, cache, rows: int, hooks) -> Plan:
        """A long prompt pass in parts on threads, when split_prompt cuts it and its hooks (if any)
        only read (Hooks.in_parts: a cache of its sites, run_with_cache's); else one part. A model
        on the kernels (on_kernels) runs its passes on this executor's with_kernels() twin (loading
        them the first time), so that every pass of the model computes alike. A pass whose products run on the
        kernels' threads (a few rows, or any number where every matrix is on the integers; more
        than one worker) runs BLAS on one thread: the two libraries' threads each spin a moment after
        their work, and on the same cores each waits for the other (a Gemma 3 step past 512
        positions, where OpenBLAS starts threading attention: 11 ms -> 260 ms; a 128-token prompt of
        SmolLM2 Q4_1 on a Zen 4, products on the integers: 299 -> 105 ms)."""
        kernels = on_kernels(model)
        if kernels and self.kernels is None and kernel_products.running() is not None:
            return self.with_kernels().plan(model, cache, rows, hooks)
        config = model.config
        check_pass(config, cache.length, rows)
        if (hooks is None or hooks.in_parts) and not self.batch and isinstance(cache, KVCache):
            parts = split_prompt(config, cache.length, rows, self.workers)
            if len(parts) > 1:
                return Parts(self.alone(), cache, config.n_layer, parts)
        if kernels and self.workers > 1 and (
            rows <= kernel_products.KERNEL_ROWS or (self.kernels is not None and _on_integers(model) == {True})
        ):
            return _BlasAlone(self.sized(rows), cache, rows)
        return Plan(self.sized(rows), cache, rows)


def _on_integers(model) -> set[bool]:
    """Whether each of a model's quantized matrices multiplies any number of rows on the integer kernels
    (kernel_products.on_integers): {True} when all of them do."""
    return {kernel_products.on_integers(w) for w in model.weights() if isinstance(w, Quantized)}


class _BlasAlone(Plan):
    """One part, BLAS on one thread while it runs (Fast.plan says why)."""

    def each_part(self, trunk) -> np.ndarray:
        with single_threaded_blas():
            return super().each_part(trunk)


class _FewRows(Fast):
    """A pass of 2-16 rows: the MLP split, a share of its hidden units on `pool`."""

    def __init__(self, fast: Fast, pool: Executor):
        self.workers, self.batch, self.helper, self.pool = fast.workers, fast.batch, fast.helper, pool
        self.kernels = fast.kernels

    def sized(self, rows: int) -> Plain:
        return self

    def linear(self, x: np.ndarray, w: np.ndarray | Quantized, b: np.ndarray | None = None) -> np.ndarray:
        # [T, out]
        y = kernel_products.product(x, w, self.workers, self.kernels) if isinstance(w, Quantized) else self.dense(x, w)
        if y is None:
            y = dense_ops.linear(x, w)  # [T, out]
        if b is not None:
            y += b
        return y

    def mlp(self, h: np.ndarray, m: textbook.MLP) -> np.ndarray:
        """The MLP is a sum over its hidden units: a share of them on each thread, with one wait
        instead of one per product. The helper has to wake up first (tens of microseconds), so
        this thread takes the larger share. [T, D] -> [T, D]"""
        f = m.d_ff
        if f < 64 or isinstance(m.w_in, Quantized):  # quantized products split their rows themselves
            return super().mlp(h, m)
        cut = int(f * MLP_SHARE) // 16 * 16
        mine = _FewRows(self, ON_THIS_THREAD)  # each half's products stay on its own thread
        later = self.pool.submit(m.part_out, h, cut, f, mine.linear)
        try:
            first = m.part_out(h, 0, cut, mine.linear)  # [T, D]
        finally:
            second = later.result()  # [T, D]; waited for even if the first part failed
        return first + second


FAST = Fast()  # one worker


# model -> (its layers, KERNELS_FROM, on_kernels) when asked
_asked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def on_kernels(model) -> bool:
    """Whether a model's passes run on the compiled kernels: a quantized model, whose products need
    them, or one with KERNELS_FROM bytes of float32 weights or more, whose few-row products they run
    faster than BLAS. Smaller models (the shipped one) never load them. Asked once per model (and
    again when its layers are replaced: quantize_weights)."""
    got = _asked.get(model)
    if got is None or got[0] is not model.layers or got[1] != KERNELS_FROM:
        got = _asked[model] = (model.layers, KERNELS_FROM, model.quantized() or model.weight_bytes() >= KERNELS_FROM)
    return got[2]


class Parts(Plan):
    """A prompt pass cut into consecutive parts of `parts` tokens, each on its own thread.

    Every part goes through all the blocks; at each block a part waits for the keys and values of
    the part before it (causal attention needs nothing later). The element-wise work (softmax,
    SiLU, norms), which NumPy does on one core, then runs on all of them, and each part's matrix
    products on its own core.
    """

    def __init__(self, run: Fast, cache: KVCache, n_layer: int, parts: list[int]):
        super().__init__(run, cache, sum(parts))
        self.n_layer, self.parts = n_layer, parts

    def each_part(self, trunk) -> np.ndarray:
        cache = self.cache
        bounds = np.cumsum([0, *self.parts])  # token offsets of the parts
        cache.reserve(cache.length + self.rows)  # no part ever moves the arrays another part writes into
        relay = Relay(self.n_layer, cache.length)
        part = PartCache(cache, relay)
        with single_threaded_blas(), ThreadPoolExecutor(len(self.parts) - 1, thread_name_prefix="tfcli-part") as pool:
            try:
                later = [pool.submit(trunk, part, slice(a, b)) for a, b in zip(bounds[1:-1], bounds[2:])]
                first = trunk(part, slice(0, bounds[1]))  # [t, D]: the first part on this thread
                return np.concatenate([first] + [f.result() for f in later])  # [T, D]
            except BaseException:  # an error, or Ctrl-C: the other parts stop at their next block,
                relay.cancel()  # and leaving the pool waits for them, so no thread writes the cache after
                raise


def split_prompt(cfg: ModelConfig, start: int, t_len: int, workers: int) -> list[int]:
    """How many tokens of a prompt pass each thread takes: [T] in one part, or consecutive parts
    of about equal work. A token's work is its matrix products (the same for every token) plus
    its attention over the positions up to its own, so the later parts get fewer tokens."""
    n = min(workers, t_len // PART_MIN_TOKENS)
    if n < 2:
        return [t_len]
    matmul = (
        2
        * cfg.d_model
        * ((cfg.n_head + 2 * cfg.n_kv_head) * cfg.head_dim + cfg.n_head * cfg.head_dim + cfg.mlp_matrices * cfg.d_ff)
    )
    # per position attended: q.k and p.v (4 flops), at 2/3 of a matmul's speed (fitted: equal parts on SmolLM2)
    attention = 6 * cfg.n_head * cfg.head_dim
    work = np.cumsum(matmul + attention * np.arange(start + 1, start + t_len + 1, dtype=np.float64))  # [T], per block
    cuts = np.searchsorted(work, work[-1] * np.arange(1, n) / n)  # [n-1] the tokens where each share is reached
    bounds = [0, *(int(c) + 1 for c in cuts), t_len]
    return [b - a for a, b in zip(bounds, bounds[1:]) if b > a]


class RowByRow(Fast):
    """A batch-invariant executor for decode steps: each row's products are exactly the one-row
    products of a sequence decoding alone (OpenBLAS's vector-matrix product, one row at a time),
    so a row's numbers never depend on its company. OpenBLAS picks its kernel by the number of rows,
    which moves a result by a few float32
    steps, enough to flip a greedy choice between two near-equal tokens (the "batch invariance"
    of Thinking Machines, "Defeating Nondeterminism in LLM Inference", 2025). Stored weight rows
    (every family but GPT-2, whose matrices are stored [in, out]) are still read from memory about
    once per step: dense_ops.each_row runs every row's product on a block of them while it is in cache,
    half of the blocks on the helper thread with 2 workers. Run a step inside around_step(rows):
    BLAS on one thread, as the two halves are the two threads."""

    def __init__(self, workers: int = 1, helper: Executor | None = None):
        super().__init__(workers, helper)

    def sized(self, rows: int) -> Fast:
        return self  # every row on its own, whatever the rows

    def around_step(self, rows: int) -> AbstractContextManager:
        """BLAS on one thread when each_row's two halves are our two threads."""
        return single_threaded_blas() if self.workers > 1 and rows > 1 else nullcontext()

    def linear(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        if isinstance(w, Quantized):  # each row of x on its own: the kernels' rows never meet
            y = kernel_products.product(x, w, self.workers, self.kernels)
        elif (y := self.dense(x, w)) is not None:  # the same, float32
            pass
        elif x.shape[0] > 1 and dense_ops.stored_rows(w):
            y = dense_ops.each_row(x, w.T, self.helper if self.workers > 1 else None)  # [T, out]
        else:
            # [T, 1, in] @ [in, out] -> [T, out], one vector-matrix product per row
            y = np.matmul(x[:, None, :], w)[:, 0]
        if b is not None:
            y += b
        return y
