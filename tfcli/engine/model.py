"""What every model family shares: the forward pass, the pre-norm block, cached self-attention.

A family (engine/families/) supplies the pieces that differ: `embed`, the two norms of a block,
the `attention` projections around the shared `self_attention`, the two halves of its `mlp`, the
`final_norm` and the `unembed`. The loop over layers, the block itself, the KV cache bookkeeping,
the attention and what a pass records (engine/inspect.py) live here once:

    x = embed(tokens)                                        # [T, D]
    for each layer:
        x = x + attention(attn_norm(x))                      # tokens look at earlier tokens
        x = x + mlp_down(mlp_hidden(mlp_norm(x)))            # each token on its own
    logits = unembed(final_norm(x))                          # [T, V]
"""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from . import ops
from .config import ModelConfig
from .errors import PromptError
from .inspect import Recorder
from .kvcache import BatchCache, KVCache, Relay
from .memory import check_allocation
from .threads import ON_THIS_THREAD, helper_thread


ALL_UNITS = slice(None)  # every hidden unit of an MLP
MLP_SHARE = 0.56  # of a batch step's MLP hidden units, the calling thread's share (block())


@dataclass(frozen=True)
class LayerCall:
    """Where one layer of a forward pass runs: its index, the cache, the first position, the recorder."""

    index: int
    cache: KVCache
    start: int  # position of the first token of this call
    record: Recorder | None = None  # None: record nothing here
    batch: bool = False  # rows are B sequences at one shared position (decode_batch), not T consecutive positions
    pool: Executor | None = None  # a second thread for the products of a few rows (ops.few_rows), and a share of the MLP

    def span(self, t_len: int) -> tuple[int, int]:
        """The positions of this call's rows, as (first, last + 1): T consecutive positions, or
        in a batch step the one position every row shares (a [1, ...] table broadcasts over B)."""
        return self.start, self.start + (1 if self.batch else t_len)


class Transformer:
    config: ModelConfig
    layers: list
    tables: tuple[str, ...] = ()  # attributes that are precomputed tables, not weights (RoPE cos/sin)
    # Every family exposes these, whatever it calls them in its checkpoint:
    token_embedding: np.ndarray  # [V, D], the rows a token id selects
    unembedding: np.ndarray  # [D, V], logits = final_norm(h) @ unembedding (a view of token_embedding when tied)

    def weight_bytes(self) -> int:
        """Bytes of distinct weight arrays (a tied unembedding counted once): what a decode step reads."""
        seen: dict[tuple[int, int], int] = {}

        def visit(obj) -> None:
            if isinstance(obj, np.ndarray):
                seen[(obj.ctypes.data, obj.nbytes)] = obj.nbytes
            elif hasattr(obj, "__dataclass_fields__"):
                for name in obj.__dataclass_fields__:
                    visit(getattr(obj, name))
            elif isinstance(obj, (list, tuple)):
                for item in obj:
                    visit(item)

        visit([v for k, v in vars(self).items() if k not in self.tables])
        return sum(seen.values())

    def new_cache(self, capacity: int | None = None) -> KVCache:
        """A cache for `capacity` positions (default: the whole context)."""
        return KVCache(self.config, capacity or self.config.n_ctx)

    def forward(
        self,
        tokens: np.ndarray,
        cache: KVCache,
        *,
        all_logits: bool = False,
        record: Recorder | None = None,
        workers: int = 1,
        helper: Executor | None = None,
    ) -> np.ndarray:
        """Run tokens [T] at positions cache.length .. cache.length+T-1 through the model.

        Returns logits [T, V] with all_logits, else [1, V] for the last position only (all that
        sampling needs; the unembedding is the single largest matmul of a small model). `record`
        collects what it asks for (engine/inspect.py). `workers` threads may share a long prompt
        pass (split_prompt; BLAS is then single-threaded for its duration), and two of them the
        products of a pass over a few tokens (a lookup check, a short prompt: ops.few_rows), on
        `helper` if given (threads.helper_thread).
        """
        start = cache.length
        t_len = len(tokens)
        if start + t_len > min(self.config.n_ctx, cache.capacity):
            raise PromptError(
                f"{start + t_len} tokens do not fit in the model's context of {min(self.config.n_ctx, cache.capacity)}",
                "use a shorter prompt or fewer --max-tokens",
            )
        # The largest temporaries: attention scores and their softmax [H, T, S], and the MLP's [T, F] (x3).
        cfg = self.config
        temporaries = 4 * (3 * cfg.n_head * t_len * (start + t_len) + 3 * t_len * 2 * cfg.d_ff)
        if temporaries > 1 << 26:  # reading /proc/meminfo on every decode step would cost more than it saves
            check_allocation(temporaries, f"a forward pass over {t_len:,} tokens")
        parts = split_prompt(cfg, start, t_len, workers) if record is None else [t_len]
        # A pass of a few tokens on one worker is left to BLAS's own threads, if it has any.
        few = workers > 1 and 1 < t_len <= ops.FEW_ROWS
        with helper_thread(workers, helper) if few else nullcontext() as pool:
            if len(parts) == 1:
                x = self.layers_forward(tokens, cache, start, record, pool)  # [T, D]
            else:
                x = self.parallel_forward(tokens, cache, start, parts)  # [T, D]
            cache.length = start + t_len
            if not all_logits:
                x = x[-1:]  # [1, D]
            return self.unembed(self.final_norm(x), pool)  # [T or 1, V]

    def decode_batch(self, tokens: np.ndarray, cache: BatchCache, workers: int = 1, helper: Executor | None = None) -> np.ndarray:
        """One decode step for B sequences at the same position: tokens [B] -> next-token logits [B, V].

        A decode step reads every weight once and does little arithmetic with it, so the B tokens
        go through each matrix product as one [B, D] matrix for about the price of one; only the
        attention is per sequence, each row over its own cache (engine/batch.py). The products go
        through BLAS's small-matrix kernel (ops.few_rows); with 2 workers or more, a second thread
        takes a share of each product and of each MLP (block()): `helper` if given. Row b equals
        forward() of sequence b alone (tests/test_batch.py).
        """
        start = cache.length
        if start + 1 > cache.capacity:
            raise PromptError(f"{start + 1} tokens do not fit in the batch's cache of {cache.capacity}", "use fewer --max-tokens")
        # embed() places T tokens at T consecutive positions; here each row sits at `start`.
        x = np.concatenate([self.embed(tokens[b : b + 1], start) for b in range(len(tokens))])  # [B, D]
        with helper_thread(workers, helper) if len(tokens) > 1 else nullcontext() as pool:
            for i, layer in enumerate(self.layers):
                x = self.block(x, layer, LayerCall(i, cache, start, batch=True, pool=pool))  # [B, D]
            cache.length = start + 1
            return self.unembed(self.final_norm(x), pool)  # [B, V]

    def layers_forward(self, tokens: np.ndarray, cache: KVCache, start: int, record: Recorder | None = None, pool: Executor | None = None) -> np.ndarray:
        """tokens [T] at positions start.. -> their hidden states [T, D] after the last layer."""
        x = self.embed(tokens, start)  # [T, D]
        if record is not None and record.residual:
            record.embedded = x
        for i, layer in enumerate(self.layers):
            x = self.block(x, layer, LayerCall(i, cache, start, record and record.at(i), pool=pool))  # [T, D]
        return x

    def block(self, x: np.ndarray, layer, at: LayerCall) -> np.ndarray:
        """One pre-norm transformer block: [T, D] -> [T, D]."""
        x = x + self.attention(self.attn_norm(x, layer), layer, at)  # [T, D]
        rec = at.record
        if rec is not None and rec.residual:
            rec.mid[at.index] = x
        h = self.mlp_norm(x, layer)  # [T, D]
        if at.pool is not None and rec is None and self.config.d_ff >= 64:
            # The MLP is a sum over its hidden units: a share of them on each core, with one wait
            # instead of one per matrix product. The helper thread has to wake up first (tens of
            # microseconds here), so this thread takes the larger share (measured: benchmarks/README.md).
            cut = int(self.config.d_ff * MLP_SHARE) // 16 * 16
            later = at.pool.submit(self.mlp_part, h, layer, slice(cut, self.config.d_ff))
            try:
                first = self.mlp_part(h, layer, slice(0, cut))  # [T, D]
            finally:
                second = later.result()  # [T, D]; waited for even if the first part failed
            return x + first + second
        a = self.mlp_hidden(h, layer)  # [T, F]
        if rec is not None and rec.mlp:
            rec.mlp_act[at.index] = a
        x = x + self.mlp_down(a, layer)  # [T, D]
        if rec is not None and rec.residual:
            rec.post[at.index] = x
        return x

    def mlp_part(self, h: np.ndarray, layer, units: slice, pool: Executor | None = ON_THIS_THREAD) -> np.ndarray:
        """What the hidden units `units` of the MLP add to the residual stream: [T, D] -> [T, D].
        Its products of a few rows go through ops.few_rows on the calling thread (by default)."""
        return self.mlp_down(self.mlp_hidden(h, layer, units, pool), layer, units, pool)

    def parallel_forward(self, tokens: np.ndarray, cache: KVCache, start: int, parts: list[int]) -> np.ndarray:
        """A prompt pass split into consecutive parts of `parts` tokens, each on its own thread.

        Every part goes through all the layers; the cache's relay makes a part wait, at each
        layer, for the keys and values of the part before it (causal attention needs nothing
        later). The element-wise work (softmax, SiLU, norms), which NumPy does on one core, then
        runs on all of them, and each part's matrix products on its own core. [T] -> [T, D]
        """
        from .threads import single_threaded_blas

        bounds = np.cumsum([0, *parts])  # token offsets of the parts
        cache.relay = relay = Relay(len(self.layers), start)
        try:
            with single_threaded_blas(), ThreadPoolExecutor(len(parts) - 1, thread_name_prefix="tfcli-part") as pool:
                try:
                    later = [pool.submit(self.layers_forward, tokens[a:b], cache, start + a) for a, b in zip(bounds[1:-1], bounds[2:])]
                    first = self.layers_forward(tokens[: bounds[1]], cache, start)  # the first part on this thread
                    return np.concatenate([first] + [f.result() for f in later])  # [T, D]
                except BaseException:  # an error, or Ctrl-C: the other parts stop at their next layer,
                    relay.cancel()  # and leaving the pool waits for them, so no thread writes the cache after
                    raise
        finally:
            cache.relay = None

    def self_attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, at: LayerCall) -> np.ndarray:
        """q [T, H, Dh], new k, v [T, Hkv, Dh] -> context vectors [T, H*Dh], through the cache."""
        cfg = self.config
        t_len = q.shape[0]
        if at.batch:
            return self.batch_attention(q, k, v, at)
        k_all, v_all = at.cache.store(at.index, at.start, k, v)  # [Hkv, Dh, S] (keys transposed), [Hkv, S, Dh]
        # Query head h reads key/value head h // G (the grouping of transformers' repeat_kv).
        qg = q.reshape(t_len, cfg.n_kv_head, cfg.q_per_kv, cfg.head_dim).transpose(1, 2, 0, 3)  # [Hkv, G, T, Dh]
        want = at.record is not None and at.record.attention
        out, weights = ops.attention(qg, k_all, v_all, at.start, return_weights=want)  # [Hkv, G, T, Dh], [Hkv, G, T, S]
        if want:
            at.record.attn[at.index] = weights.reshape(cfg.n_head, t_len, -1)  # [H, T, S]
        return out.transpose(2, 0, 1, 3).reshape(t_len, cfg.n_head * cfg.head_dim)  # [T, H*Dh]

    def batch_attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, at: LayerCall) -> np.ndarray:
        """q [B, H, Dh], k, v [B, Hkv, Dh]: one new position for each of B sequences -> [B, H*Dh].

        The batch cache keeps the B sequences side by side ([B, Hkv, ...] per layer), so that B
        sequences of Hkv heads are one attention call over B*Hkv heads, each over its own keys.
        """
        cfg = self.config
        b_len = q.shape[0]
        k_all, v_all = at.cache.store(at.index, at.start, k, v)  # [B*Hkv, Dh, S], [B*Hkv, S, Dh]
        qg = q.reshape(b_len * cfg.n_kv_head, cfg.q_per_kv, 1, cfg.head_dim)  # [B*Hkv, G, 1, Dh]
        out, _ = ops.attention(qg, k_all, v_all, at.start)  # [B*Hkv, G, 1, Dh]
        return out.reshape(b_len, cfg.n_head * cfg.head_dim)  # [B, H*Dh]

    # Supplied by each family.
    def embed(self, tokens: np.ndarray, start: int) -> np.ndarray:  # [T] -> [T, D]
        raise NotImplementedError

    def attn_norm(self, x: np.ndarray, layer) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    def attention(self, h: np.ndarray, layer, at: LayerCall) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    def mlp_norm(self, x: np.ndarray, layer) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    # The MLP, or the hidden units `units` of it only: [T, D] -> [T, F] (or [T, len(units)]) -> [T, D];
    # a bias of the second product belongs to the part that holds unit 0. `pool` goes to ops.linear.
    def mlp_hidden(self, h: np.ndarray, layer, units: slice = ALL_UNITS, pool: Executor | None = None) -> np.ndarray:
        raise NotImplementedError

    def mlp_down(self, a: np.ndarray, layer, units: slice = ALL_UNITS, pool: Executor | None = None) -> np.ndarray:
        raise NotImplementedError

    def final_norm(self, x: np.ndarray) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    def unembed(self, x: np.ndarray, pool: Executor | None = None) -> np.ndarray:
        """Normed hidden states [T, D] -> logits [T, V]. A logit lens is unembed(final_norm(h))."""
        return ops.linear(x, self.unembedding, pool)  # [T, D] @ [D, V] -> [T, V] (ops.linear: a tied [D, V] is a view of [V, D] rows)


PART_MIN_TOKENS = 160  # shorter parts are faster as one part on BLAS's own threads (see benchmarks/README.md)


def split_prompt(cfg: ModelConfig, start: int, t_len: int, workers: int) -> list[int]:
    """How many tokens of a prompt pass each thread takes: [T] in one part, or consecutive parts
    of about equal work. A token's work is its matrix products (the same for every token) plus
    its attention over the positions up to its own, so the later parts get fewer tokens."""
    n = min(workers, t_len // PART_MIN_TOKENS)
    if n < 2:
        return [t_len]
    matmul = 2 * cfg.d_model * ((cfg.n_head + 2 * cfg.n_kv_head) * cfg.head_dim + cfg.n_head * cfg.head_dim + cfg.mlp_matrices * cfg.d_ff)
    attention = 6 * cfg.n_head * cfg.head_dim  # per position attended: q.k and p.v (4 flops), at 2/3 of a matmul's speed (fitted: equal parts on SmolLM2)
    work = np.cumsum(matmul + attention * np.arange(start + 1, start + t_len + 1, dtype=np.float64))  # [T], per layer
    cuts = np.searchsorted(work, work[-1] * np.arange(1, n) / n)  # [n-1] the tokens where each share is reached
    bounds = [0, *(int(c) + 1 for c in cuts), t_len]
    return [b - a for a, b in zip(bounds, bounds[1:]) if b > a]
