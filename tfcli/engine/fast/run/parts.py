"""A prompt pass cut into parts, one per thread (fast/run/fast_executor.py, Parts): the cache as
each part sees it, and the relay that makes each part wait, at every layer, for the keys and values
of the part before it."""

from __future__ import annotations

import threading

import numpy as np

from ...errors import ResourceError
from ...kvcache import KVCache


class PartCache(KVCache):
    """The cache as one part of a prompt pass split between threads sees it (engine/executor.py):
    the same arrays, but at each layer the part waits for its turn to write (Relay). The caller
    reserves room for the whole pass first, so no part ever moves the arrays."""

    def __init__(self, whole: KVCache, relay: Relay):  # noqa: super().__init__ would allocate new arrays
        self.config, self.capacity, self.length = whole.config, whole.capacity, whole.length
        self.k, self.v, self.ks, self.vs, self.off = whole.k, whole.v, whole.ks, whole.vs, whole.off
        self.window, self.slot, self.n_sliding = whole.window, whole.slot, whole.n_sliding
        self.relay = relay

    def store(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        end = start + k.shape[0]
        room = self.off + self.ks.shape[2] if self.slot[layer][0] else self.room
        if end > room:
            raise ResourceError(f"a part of a prompt pass reached position {end - 1} beyond the room reserved")
        self.relay.wait(layer, start)
        self._write(layer, start, k, v)
        self.relay.done(layer, end)
        return self.held(layer, end)


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
