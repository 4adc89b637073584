"""What every model family shares: the forward pass skeleton and cached self-attention.

A family (gpt2.py, llama.py) supplies three pieces, `embed`, `block` and `unembed`; the loop over
layers, the KV cache bookkeeping and the attention itself live here once.
"""

from __future__ import annotations

import numpy as np

from . import ops
from .config import ModelConfig
from .errors import PromptError
from .kvcache import KVCache
from .memory import check_allocation


class Transformer:
    config: ModelConfig
    layers: list
    tables: tuple[str, ...] = ()  # attributes that are precomputed tables, not weights (RoPE cos/sin)

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
        attn_probs: list[np.ndarray] | None = None,
    ) -> np.ndarray:
        """Run tokens [T] at positions cache.length .. cache.length+T-1 through the model.

        Returns logits [T, V] with all_logits, else [1, V] for the last position only (all that
        sampling needs; the unembedding is the single largest matmul of a small model).
        If attn_probs is a list, each layer appends its attention weights [H, T, S] to it.
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
        x = self.embed(tokens, start)  # [T, D]
        for i, layer in enumerate(self.layers):
            x = self.block(x, layer, i, cache, start, attn_probs)  # [T, D]
        cache.length = start + t_len
        if not all_logits:
            x = x[-1:]  # [1, D]
        return self.unembed(x)  # [T or 1, V]

    def self_attention(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        layer: int,
        cache: KVCache,
        start: int,
        attn_probs: list[np.ndarray] | None,
    ) -> np.ndarray:
        """q [T, H, Dh], new k, v [T, Hkv, Dh] -> context vectors [T, H*Dh], through the cache."""
        cfg = self.config
        t_len = q.shape[0]
        k_all, v_all = cache.store(layer, start, k, v)  # [Hkv, S, Dh] each
        # Query head h reads key/value head h // G (the grouping of transformers' repeat_kv).
        qg = q.reshape(t_len, cfg.n_kv_head, cfg.q_per_kv, cfg.head_dim).transpose(1, 2, 0, 3)  # [Hkv, G, T, Dh]
        out, weights = ops.attention(qg, k_all, v_all, start, return_weights=attn_probs is not None)  # [Hkv, G, T, Dh], [Hkv, G, T, S]
        if attn_probs is not None:
            attn_probs.append(weights.reshape(cfg.n_head, t_len, -1))  # [H, T, S]
        return out.transpose(2, 0, 1, 3).reshape(t_len, cfg.n_head * cfg.head_dim)  # [T, H*Dh]

    # Supplied by each family.
    def embed(self, tokens: np.ndarray, start: int) -> np.ndarray:  # [T] -> [T, D]
        raise NotImplementedError

    def block(self, x, layer, index, cache, start, attn_probs) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    def unembed(self, x: np.ndarray) -> np.ndarray:  # [T, D] -> [T, V]
        raise NotImplementedError
