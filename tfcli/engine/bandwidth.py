"""How fast this machine streams memory: the physical limit on decoding speed.

Decoding one token reads every weight once, so tokens/s can be no higher than
bandwidth / weight bytes. We measure bandwidth with the same operation decoding uses, a float32
matrix-vector product (BLAS sgemv, all threads), over a matrix far larger than any CPU cache.
"""

from __future__ import annotations

import time

import numpy as np


def measure_read_bandwidth(nbytes: int = 1 << 30, runs: int = 3) -> float:
    """Bytes per second read by `A @ x` over an nbytes float32 matrix; the best of `runs`."""
    cols = 4096
    rows = max(1, nbytes // (4 * cols))
    a = np.empty((rows, cols), dtype=np.float32)  # [rows, cols]
    a.fill(1.0)  # touch every page: untouched pages all map to one shared zero page
    x = np.ones(cols, dtype=np.float32)  # [cols]
    a @ x  # warm up the BLAS threads
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        a @ x  # [rows, cols] @ [cols] -> [rows]
        best = min(best, time.perf_counter() - t)
    return a.nbytes / best
