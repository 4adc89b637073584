"""One decode step for sequences at different positions: the cache of continuous batching.

A server's requests arrive at different times with prompts of different lengths, so the sequences
that share a decode step (engine/batch.py explains why sharing it is nearly free) each stand at a
position of their own. `Slots` is the cache object the forward pass sees for such a step: each row
is a sequence with its own KVCache, its own length, and so its own position, which the family's
positions (RoPE angles, learned position rows) are taken from. Attention is each row's own, over
its own keys, with exactly the call a single sequence makes (KVCache.attend), so a row of a mixed
step computes what the sequence alone computes; only the matrix products see all rows at once.

A row joins the batch by running its prompt through its own cache (Session.prefill; the short
prompts of requests that arrive together in one pass, `Prompts` below) and leaves it by no longer
being listed (`keep`): nothing is copied when the company changes. The products of
such a step run row by row (fast/run/fast_executor.py, RowByRow), so that a row's numbers never depend on
its company.
"""

from __future__ import annotations

import numpy as np

from .kvcache import KVCache


class Slots:
    """The caches of B sequences, row b at position caches[b].length, for one decode step: a
    kvcache.Cache whose rows each attend through their own KVCache."""

    def __init__(self, caches: list[KVCache]):
        self.caches = caches

    @property
    def length(self) -> int:
        """The longest row's length (the forward pass sizes its temporaries by it)."""
        return max(c.length for c in self.caches)

    def positions(self, rows: int) -> np.ndarray:
        """The position of each row's next token [B]; PromptError if a row's does not fit."""
        if rows != len(self.caches):
            raise ValueError(f"{rows} new rows for {len(self.caches)} sequences")
        return np.array([c.positions(1)[0] for c in self.caches])  # [B]

    def add(self, cache: KVCache) -> None:
        """A sequence joins as the last row (its prompt pass filled its cache)."""
        self.caches.append(cache)

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (ascending), which become rows 0..len(rows)-1: the others' caches
        are simply no longer listed."""
        self.caches = [self.caches[i] for i in rows]

    def advance(self, positions: np.ndarray) -> None:
        for c, p in zip(self.caches, positions):
            c.length = int(p) + 1

    def attend(self, layer: int, start: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, attention, weights: bool, **mask):
        """q [B, H, Dh], k, v [B, Hkv, Dh]: one new token per row, each at its own position
        (`start`, the first row's, is not used) -> z [B, H, Dh]. No attention weights are kept.
        `mask`: a sliding window, if the layer has one (Gemma 3, Phi-3)."""
        return _each_own([(c, 1) for c in self.caches], layer, q, k, v, attention, mask), None  # [B, H, Dh]


class Prompts:
    """The prompts of several sequences in one forward pass (generate.prefill_together): the rows
    are sequence 0's new tokens, then sequence 1's, ..., counts[b] of them at caches[b]'s next
    positions, and each row attends through its own sequence's KVCache to the positions before it,
    as that sequence's own prompt pass does. The pass reads every weight once for all of them; its
    logits are each prompt's last row's (Transformer.forward)."""

    def __init__(self, caches: list[KVCache], counts: list[int]):
        self.groups = list(zip(caches, counts))
        self.caches = [c for c, n in self.groups for _ in range(n)]  # [T]: each row's cache
        self.ends = np.cumsum(counts) - 1  # [B]: each prompt's last row

    @property
    def length(self) -> int:
        return max(c.length for c, _ in self.groups)

    def positions(self, rows: int) -> np.ndarray:
        """Each sequence's next positions, one after the other [T]; PromptError if one does not fit."""
        if rows != len(self.caches):
            raise ValueError(f"{rows} new rows for prompts of {len(self.caches)} tokens")
        return np.concatenate([c.positions(n) for c, n in self.groups])  # [T]

    def advance(self, positions: np.ndarray) -> None:
        a = 0
        for c, n in self.groups:
            c.advance(positions[a : a + n])
            a += n

    def attend(self, layer: int, start: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, attention, weights: bool, **mask):
        """q [T, H, Dh], k, v [T, Hkv, Dh]: each sequence's rows through its own cache (`start` is
        not used) -> z [T, H, Dh]. No attention weights are kept."""
        return _each_own(self.groups, layer, q, k, v, attention, mask), None  # [T, H, Dh]


def _each_own(groups: list[tuple[KVCache, int]], layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, attention, mask: dict) -> np.ndarray:
    """The rows of q [T, H, Dh], k, v [T, Hkv, Dh], n at a time for each (cache, n) of `groups` in
    turn, through that cache at its next positions, as the sequence alone attends (KVCache.attend)
    -> z [T, H, Dh]."""
    z, a = np.empty_like(q), 0  # [T, H, Dh]
    for c, n in groups:
        z[a : a + n], _ = c.attend(layer, c.length, q[a : a + n], k[a : a + n], v[a : a + n], attention, False, **mask)  # [n, H, Dh]
        a += n
    return z
