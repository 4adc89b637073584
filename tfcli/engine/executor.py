"""The door to the fast paths: how a forward pass runs its matrix products, MLPs and attention.

A forward pass (engine/model.py) calls `linear`, `mlp`, `attention` and `trunk` on an executor and
never sees a thread. `PLAIN` is the textbook: `x @ w + b`, the MLP as one product, activation and
another, attention as the formula reads (ops.reference_attention). A reader can stop here.

`Fast` computes the same numbers (tests/test_executor.py runs both on GPT-2, Llama and Qwen2) with
what measurement justified, each in benchmarks/README.md:

- a product of up to 256 rows with a stored [out, in] matrix as (w x^T)^T, which reads the stored
  rows instead of repacking the matrix (ops.linear);
- a product of 2-16 rows (a batch step, a lookup check, a short prompt) in blocks small enough for
  OpenBLAS's small-matrix kernel, half of them on a helper thread (ops.few_rows);
- the MLP of such a pass split by hidden units, a share on each thread, one hand-off per MLP;
- a long prompt cut into parts, each part on its own thread through all the blocks, waiting at
  each block for the keys and values of the part before it (split_prompt, PartCache).

`slots.RowByRow` is the batch-invariant one a server's decode steps use: each row's products are
the one-row products, on blocks of weights kept in cache for all rows (ops.each_row).
"""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from . import ops
from .config import ModelConfig
from .fast import quantized
from .kvcache import KVCache, PartCache, Relay
from .quantized import Quantized, textbook_product
from .threads import ON_THIS_THREAD, new_helper, single_threaded_blas


class Plain:
    """The textbook, one step after another on the calling thread."""

    def sized(self, rows: int) -> Plain:
        """The executor for a pass of `rows` rows (the fast one picks its strategy here)."""
        return self

    def around_step(self, rows: int) -> AbstractContextManager:
        """What a decode step of `rows` sequences runs inside (slots.RowByRow: BLAS on one thread)."""
        return nullcontext()

    def linear(self, x: np.ndarray, w: np.ndarray | Quantized, b: np.ndarray | None = None) -> np.ndarray:
        # [T, in] @ [in, out] -> [T, out]; a quantized w: each tile of its rows dequantized, then the same product
        y = textbook_product(x, w) if isinstance(w, Quantized) else x @ w
        if b is not None:
            y += b
        return y

    def mlp(self, h: np.ndarray, m: ops.MLP) -> np.ndarray:
        return m.down(m.hidden(h, self.linear), self.linear)  # [T, D] -> [T, F] -> [T, D]

    def attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int, weights: bool, window: int | None = None, softcap: float | None = None):
        """q [N, G, T, Dh] (G query heads per key/value head), k [N, Dh, S] (as the cache keeps
        keys), v [N, S, Dh] -> (out [N, G, T, Dh], weights [N, G, T, S] or None). `window`,
        `softcap`: a sliding window and soft-capped scores (ops.reference_attention)."""
        n, g, t_len, dh = q.shape
        keys = np.repeat(k.transpose(0, 2, 1), g, axis=0)  # [N*G, S, Dh]: each query head gets its own copy
        values = np.repeat(v, g, axis=0)  # [N*G, S, Dh]
        out, w = ops.reference_attention(q.reshape(n * g, t_len, dh), keys, values, window, softcap)  # [N*G, T, Dh], [N*G, T, S]
        return out.reshape(n, g, t_len, dh), (w.reshape(n, g, t_len, -1) if weights else None)

    def trunk(self, model, tokens: np.ndarray, cache, positions: np.ndarray, hooks) -> np.ndarray:
        """Embeddings and blocks: tokens [T] at positions [T] -> the residual stream after the last block [T, D]."""
        return model.trunk(tokens, cache, positions, hooks, self)


PLAIN = Plain()

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

    def sized(self, rows: int) -> Plain:
        few = rows > 1 and (self.batch or (self.workers > 1 and rows <= ops.FEW_ROWS))
        return _FewRows(self, self.helper if self.workers > 1 else ON_THIS_THREAD) if few else self

    def linear(self, x: np.ndarray, w: np.ndarray | Quantized, b: np.ndarray | None = None) -> np.ndarray:
        y = quantized.product(x, w, self.workers) if isinstance(w, Quantized) else ops.linear(x, w)  # [T, out]
        if b is not None:
            y += b
        return y

    def attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int, weights: bool, window: int | None = None, softcap: float | None = None):
        return ops.attention(q, k, v, start, weights, window, softcap)  # grouped heads, masked square only, blocks of queries

    def trunk(self, model, tokens: np.ndarray, cache, positions: np.ndarray, hooks) -> np.ndarray:
        parts = [len(tokens)]
        if hooks is None and not self.batch and isinstance(cache, KVCache):
            parts = split_prompt(model.config, cache.length, len(tokens), self.workers)
        if len(parts) == 1:
            return super().trunk(model, tokens, cache, positions, hooks)
        return self.parallel_trunk(model, tokens, cache, parts)

    def parallel_trunk(self, model, tokens: np.ndarray, cache: KVCache, parts: list[int]) -> np.ndarray:
        """A prompt pass cut into consecutive parts of `parts` tokens, each on its own thread.

        Every part goes through all the blocks; at each block a part waits for the keys and values
        of the part before it (causal attention needs nothing later). The element-wise work
        (softmax, SiLU, norms), which NumPy does on one core, then runs on all of them, and each
        part's matrix products on its own core. [T] -> [T, D]
        """
        start = cache.length
        bounds = np.cumsum([0, *parts])  # token offsets of the parts
        cache.reserve(start + len(tokens))  # no part ever moves the arrays another part writes into
        relay = Relay(model.config.n_layer, start)
        part = PartCache(cache, relay)

        def run(a: int, b: int) -> np.ndarray:
            return model.trunk(tokens[a:b], part, np.arange(start + a, start + b), None, self)  # [b-a, D]

        with single_threaded_blas(), ThreadPoolExecutor(len(parts) - 1, thread_name_prefix="tfcli-part") as pool:
            try:
                later = [pool.submit(run, a, b) for a, b in zip(bounds[1:-1], bounds[2:])]
                first = run(0, bounds[1])  # the first part on this thread
                return np.concatenate([first] + [f.result() for f in later])  # [T, D]
            except BaseException:  # an error, or Ctrl-C: the other parts stop at their next block,
                relay.cancel()  # and leaving the pool waits for them, so no thread writes the cache after
                raise


class _FewRows(Fast):
    """A pass of 2-16 rows: products in small-matrix blocks, half on `pool`; the MLP split."""

    def __init__(self, fast: Fast, pool: Executor):
        self.workers, self.batch, self.helper, self.pool = fast.workers, fast.batch, fast.helper, pool

    def sized(self, rows: int) -> Plain:
        return self

    def linear(self, x: np.ndarray, w: np.ndarray | Quantized, b: np.ndarray | None = None) -> np.ndarray:
        y = quantized.product(x, w, self.workers) if isinstance(w, Quantized) else ops.linear(x, w, self.pool)  # [T, out]
        if b is not None:
            y += b
        return y

    def mlp(self, h: np.ndarray, m: ops.MLP) -> np.ndarray:
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


FAST = Fast()  # one worker: the forward pass's default


def split_prompt(cfg: ModelConfig, start: int, t_len: int, workers: int) -> list[int]:
    """How many tokens of a prompt pass each thread takes: [T] in one part, or consecutive parts
    of about equal work. A token's work is its matrix products (the same for every token) plus
    its attention over the positions up to its own, so the later parts get fewer tokens."""
    n = min(workers, t_len // PART_MIN_TOKENS)
    if n < 2:
        return [t_len]
    matmul = 2 * cfg.d_model * ((cfg.n_head + 2 * cfg.n_kv_head) * cfg.head_dim + cfg.n_head * cfg.head_dim + cfg.mlp_matrices * cfg.d_ff)
    attention = 6 * cfg.n_head * cfg.head_dim  # per position attended: q.k and p.v (4 flops), at 2/3 of a matmul's speed (fitted: equal parts on SmolLM2)
    work = np.cumsum(matmul + attention * np.arange(start + 1, start + t_len + 1, dtype=np.float64))  # [T], per block
    cuts = np.searchsorted(work, work[-1] * np.arange(1, n) / n)  # [n-1] the tokens where each share is reached
    bounds = [0, *(int(c) + 1 for c in cuts), t_len]
    return [b - a for a, b in zip(bounds, bounds[1:]) if b > a]
