"""The prompt cache: keys and values of earlier requests, so that a request sharing a prefix with
one of them reads only what is new (a chat client resends the whole conversation every turn).

A bounded store, least recently used first out: each entry is the token ids a sequence ran and a
KVCache holding exactly their positions (trimmed copies, so an entry's size is what it holds).
A new prompt takes the entry with the longest common prefix: a copy of its keys and values up to
there, never the entry itself, so one request cannot change what another reads. llama.cpp's
server keeps a prompt per slot and vLLM hashes blocks of 16 tokens; a few whole prefixes are
enough for the chats of a local server.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from tfcli.engine.kvcache import KVCache


def cache_bytes(cache: KVCache) -> int:
    return sum(a.nbytes for a in (cache.k, cache.v, cache.ks, cache.vs))


@dataclass
class Entry:
    tokens: np.ndarray  # [n] the ids whose keys and values `cache` holds
    cache: KVCache
    nbytes: int


class PromptCache:
    """Entries of at most `budget` bytes in all; used on the engine thread, read by /health."""

    def __init__(self, budget: int):
        self.budget = budget
        self.entries: OrderedDict[int, Entry] = OrderedDict()  # oldest use first
        self.used = 0
        self.hits = 0
        self.reused_tokens = 0
        self._next = 0
        self._lock = threading.Lock()  # /health reads the figures from another thread

    def __bool__(self) -> bool:
        return self.budget > 0

    def longest(self, ids: list[int]) -> tuple[int, int | None]:
        """(how many of ids an entry holds, its key), the longest; (0, None) when none shares any."""
        want = np.asarray(ids)
        best, key = 0, None
        for k, e in self.entries.items():
            n = min(len(e.tokens), len(want))
            same = np.flatnonzero(e.tokens[:n] != want[:n])
            common = int(same[0]) if len(same) else n
            if common > best:
                best, key = common, k
        return best, key

    def take(self, ids: list[int], capacity: int) -> tuple[KVCache | None, int]:
        """A cache of `capacity` positions holding the longest cached prefix of ids (all but their
        last token at most: it must run to give logits), and its length; (None, 0) on a miss."""
        common, key = self.longest(ids)
        if key is None:
            return None, 0
        e = self.entries[key]
        n = e.cache.resumable(min(common, len(ids) - 1))
        if n == 0:
            return None, 0
        with self._lock:
            self.entries.move_to_end(key)
            self.hits += 1
            self.reused_tokens += n
        cache = e.cache.copy(capacity=max(capacity, e.cache.length))
        cache.reset(n)
        return cache, n

    def keep(self, tokens: list[int], cache: KVCache) -> None:
        """Store what `cache` holds (its first cache.length positions, the ids `tokens`), replacing
        entries it extends; the least recently used go until the whole fits the budget."""
        n = cache.length
        if n == 0 or not self.budget:
            return
        copy = cache.copy(capacity=n)
        size = cache_bytes(copy)
        if size > self.budget:
            return
        held = np.asarray(tokens[:n])
        with self._lock:
            for k in [
                k
                for k, e in self.entries.items()
                if len(e.tokens) <= n and np.array_equal(e.tokens, held[: len(e.tokens)])
            ]:
                self.used -= self.entries.pop(k).nbytes  # a prefix of the new entry: it says nothing more
            while self.entries and self.used + size > self.budget:
                self.used -= self.entries.popitem(last=False)[1].nbytes
            self.entries[self._next] = Entry(held, copy, size)
            self._next += 1
            self.used += size

    def figures(self) -> dict:
        with self._lock:
            return {
                "mb": round(self.budget / 2**20, 1),
                "used_mb": round(self.used / 2**20, 2),
                "entries": len(self.entries),
                "hits": self.hits,
                "reused_tokens": self.reused_tokens,
            }
