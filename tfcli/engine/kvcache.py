"""The key/value cache: every layer's keys and values for the positions seen so far.

Written by slice into preallocated arrays: no list of arrays, no concatenate per token (growing a
cache by concatenation copies it every step). `capacity` is the most positions a run may reach,
and memory for all of it is checked up front; the arrays themselves start small and double when a
write needs more room (each position is copied O(1) times on average). They cannot be allocated
at full capacity and left to the kernel to fill lazily: keys are stored transposed, so every one of
the L*Hkv*Dh rows of [.., S] is touched by the first position, and with transparent huge pages each
touched row commits 2 MB; a config claiming a 16M-token context committed gigabytes for a few tokens.
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


FIRST_ROOM = 256  # positions allocated before the first write asks for more


class KVCache:
    def __init__(self, config: ModelConfig, capacity: int):
        nbytes = config.kv_cache_bytes(capacity)
        check_allocation(nbytes, f"a KV cache of {capacity:,} positions")
        self.config = config
        self.capacity = capacity
        self.length = 0  # positions filled so far, the same for every layer once a forward pass ends
        self.relay: Relay | None = None  # set while a prompt pass runs in parts on several threads
        self._grow = threading.Lock()  # parts of a prompt pass on several threads may write at once
        self._allocate(min(capacity, FIRST_ROOM))

    @property
    def room(self) -> int:
        """Positions allocated now (<= capacity)."""
        return self.v.shape[2]

    def _allocate(self, room: int) -> None:
        L, Hkv, Dh = self.config.n_layer, self.config.n_kv_head, self.config.head_dim
        k = np.zeros((L, Hkv, Dh, room), dtype=np.float32)  # [L, Hkv, Dh, room], transposed
        v = np.zeros((L, Hkv, room, Dh), dtype=np.float32)  # [L, Hkv, room, Dh]
        if hasattr(self, "k"):
            kept = self.room
            k[..., :kept] = self.k  # [L, Hkv, Dh, kept]
            v[:, :, :kept] = self.v  # [L, Hkv, kept, Dh]
        self.k, self.v = k, v

    def _make_room(self, end: int) -> None:
        """Room for positions 0..end-1: double (or more, up to capacity), checking memory first."""
        room = min(self.capacity, max(end, 2 * self.room))
        check_allocation(self.config.kv_cache_bytes(room), f"a KV cache of {room:,} positions")
        self._allocate(room)

    def store(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write k, v [T, Hkv, Dh] at positions start..start+T-1; return the keys [Hkv, Dh, S] and
        values [Hkv, S, Dh] of positions 0..start+T-1 (views, no copy)."""
        end = start + k.shape[0]
        if end > self.capacity:
            raise ResourceError(f"the KV cache holds {self.capacity} positions; position {end - 1} does not fit")
        if self.relay is not None:
            self.relay.wait(layer, start)
        with self._grow:  # a part never writes into arrays another part is copying away from
            if end > self.room:
                self._make_room(end)
            self.k[layer, :, :, start:end] = k.transpose(1, 2, 0)  # [T, Hkv, Dh] -> [Hkv, Dh, T]
            self.v[layer, :, start:end] = v.transpose(1, 0, 2)  # [T, Hkv, Dh] -> [Hkv, T, Dh]
            keys, values = self.k[layer, :, :, :end], self.v[layer, :, :end]
        if self.relay is not None:
            self.relay.done(layer, end)
        return keys, values

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


BATCH_HINT = "use fewer --samples or fewer --max-tokens"


class BatchCache:
    """Keys and values of B sequences that all hold the same number of positions.

    Per layer, the B sequences sit side by side: keys [L, B, Hkv, Dh, S] (transposed, as KVCache
    keeps them) and values [L, B, Hkv, S, Dh]. A layer's keys of the first `rows` sequences are then
    one [rows*Hkv, Dh, S] view, and B sequences' attention is one call over B*Hkv heads.
    """

    def __init__(self, config: ModelConfig, rows: int, capacity: int):
        check_allocation(rows * config.kv_cache_bytes(capacity), f"a KV cache for {rows:,} samples of {capacity:,} positions", BATCH_HINT)
        L, Hkv, Dh = config.n_layer, config.n_kv_head, config.head_dim
        self.k = np.zeros((L, rows, Hkv, Dh, capacity), dtype=np.float32)  # [L, B, Hkv, Dh, capacity]; sized to prompt + new tokens by the caller
        self.v = np.zeros((L, rows, Hkv, capacity, Dh), dtype=np.float32)  # [L, B, Hkv, capacity, Dh]
        self.capacity = capacity
        self.rows = rows  # sequences still in the batch: rows 0..rows-1
        self.length = 0

    def fill(self, prefix: KVCache) -> None:
        """Give every row the positions a single-sequence cache holds (the shared prompt)."""
        n = prefix.length
        if n > self.capacity:
            raise ResourceError(f"the batch cache holds {self.capacity} positions; the prompt has {n}")
        self.k[:, : self.rows, :, :, :n] = prefix.k[:, None, :, :, :n]  # [L, 1, Hkv, Dh, n] -> every row
        self.v[:, : self.rows, :, :n] = prefix.v[:, None, :, :n]  # [L, 1, Hkv, n, Dh]
        self.length = n

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (ascending), moved to the front in that order."""
        n = self.length
        for dst, src in enumerate(rows):
            if dst != src:  # dst < src: a row is never overwritten before it is moved
                self.k[:, dst, :, :, :n] = self.k[:, src, :, :, :n]
                self.v[:, dst, :, :n] = self.v[:, src, :, :n]
        self.rows = len(rows)

    def store(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write each row's new k, v [B, Hkv, Dh] at position `start`; return the keys
        [B*Hkv, Dh, S] and values [B*Hkv, S, Dh] of positions 0..start (views, no copy)."""
        b_len, n_kv, head_dim = k.shape
        end = start + 1
        if b_len != self.rows:
            raise ValueError(f"{b_len} new rows for a batch of {self.rows}")
        if end > self.capacity:
            raise ResourceError(f"the batch cache holds {self.capacity} positions; position {start} does not fit")
        self.k[layer, :b_len, :, :, start] = k  # [B, Hkv, Dh]
        self.v[layer, :b_len, :, start] = v  # [B, Hkv, Dh]
        keys = self.k[layer, :b_len, :, :, :end].reshape(b_len * n_kv, head_dim, end)  # [B*Hkv, Dh, S], a view
        values = self.v[layer, :b_len, :, :end].reshape(b_len * n_kv, end, head_dim)  # [B*Hkv, S, Dh], a view
        return keys, values
