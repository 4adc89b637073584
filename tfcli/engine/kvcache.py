"""The key/value cache: every layer's keys and values for the positions seen so far.

Allocated once, for the positions a generation can reach, and written by slice: no list of
arrays, no concatenate per token (growing a cache by concatenation copies it every step).
Values are [L, Hkv, S, Dh] and keys are stored transposed, [L, Hkv, Dh, S]: the scores of a head's
queries are then q [G*T, Dh] @ k [Dh, S] and its output weights [G*T, S] @ v [S, Dh], two plain
row-major products (with keys as [S, Dh], q k^T made OpenBLAS take a slow path: decoding at 2,000
cached positions spent 15 ms per token on it, 7 ms this way). Writing T new positions is a small
strided copy either way.
"""

from __future__ import annotations

import threading

import numpy as np

from .config import ModelConfig
from .errors import ResourceError
from .memory import check_allocation


class KVCache:
    def __init__(self, config: ModelConfig, capacity: int):
        nbytes = config.kv_cache_bytes(capacity)
        check_allocation(nbytes, f"a KV cache of {capacity:,} positions")
        L, Hkv, Dh = config.n_layer, config.n_kv_head, config.head_dim
        # np.zeros maps fresh zero pages lazily: memory is only committed as positions are written.
        self.k = np.zeros((L, Hkv, Dh, capacity), dtype=np.float32)  # [L, Hkv, Dh, capacity], transposed
        self.v = np.zeros((L, Hkv, capacity, Dh), dtype=np.float32)  # [L, Hkv, capacity, Dh]
        self.capacity = capacity
        self.length = 0  # positions filled so far, the same for every layer once a forward pass ends
        self.relay: Relay | None = None  # set while a prompt pass runs in parts on several threads

    def store(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write k, v [T, Hkv, Dh] at positions start..start+T-1; return the keys [Hkv, Dh, S] and
        values [Hkv, S, Dh] of positions 0..start+T-1 (views, no copy)."""
        end = start + k.shape[0]
        if end > self.capacity:
            raise ResourceError(f"the KV cache holds {self.capacity} positions; position {end - 1} does not fit")
        if self.relay is not None:
            self.relay.wait(layer, start)
        self.k[layer, :, :, start:end] = k.transpose(1, 2, 0)  # [T, Hkv, Dh] -> [Hkv, Dh, T]
        self.v[layer, :, start:end] = v.transpose(1, 0, 2)  # [T, Hkv, Dh] -> [Hkv, T, Dh]
        if self.relay is not None:
            self.relay.done(layer, end)
        return self.k[layer, :, :, :end], self.v[layer, :, :end]

    def reset(self, length: int = 0) -> None:
        """Forget positions from `length` on (they are overwritten by the next forward pass)."""
        self.length = length


class Cancelled(Exception):
    """A part of a prompt pass stopped because another part failed or was interrupted."""


class Relay:
    """The order in which the parts of one prompt pass, each on its own thread, fill the cache.

    The part for positions a..b-1 must not read a layer's keys and values before the part before
    it has written positions up to a: causal attention needs all earlier positions, and only those.
    So at each layer a part waits for its turn, writes its positions, and hands over to the next.
    """

    def __init__(self, n_layer: int, start: int):
        self._changed = threading.Condition()
        self._filled = [start] * n_layer  # per layer: positions 0..filled-1 are written
        self._cancelled = False

    def wait(self, layer: int, start: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._cancelled or self._filled[layer] == start)
            if self._cancelled:
                raise Cancelled

    def done(self, layer: int, end: int) -> None:
        with self._changed:
            self._filled[layer] = end
            self._changed.notify_all()

    def cancel(self) -> None:
        """Make every waiting part (and every part that reaches its next layer) stop."""
        with self._changed:
            self._cancelled = True
            self._changed.notify_all()
