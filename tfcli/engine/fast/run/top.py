"""The candidates of a batch step's draws, compiled: sampling.top_k_ids of every row at once, the rows
shared among the pool's threads (top_job.top_k). The rows of a batch (generate --samples, tfcli
serve) each draw from logits the step's last product wrote, half of them on the other core: NumPy's
passes over each row, one row after another on one thread, cost about a tenth of a 4-row step."""

from __future__ import annotations

import numpy as np

from .. import arguments as S
from .kernel_products import running

CAP = 1024  # ids a row may have (its values that reach the bound): more, and sampling's own top_k_ids runs


def top_k_rows(rows: list[np.ndarray], ks: list[int], threads: int) -> list[np.ndarray | None] | None:
    """For each row of logits [V] (float32, contiguous, one length) and its k: top_k_ids(row, k), the
    same ids; None for a row with a value that is not finite (sampling.check_finite then says
    which), or k past TK_COLS or more than CAP values to sort out. None when the kernels do not run."""
    k = running()
    if k is None or not rows or any(r.dtype != np.float32 or r.ndim != 1 or not r.flags.c_contiguous or r.shape != rows[0].shape for r in rows):
        return None
    n = len(rows)
    addresses, want = np.array([r.ctypes.data for r in rows], np.int64), np.array(ks, np.int64)  # [B], [B]
    ids, counts = np.empty((n, CAP), np.int64), np.empty(n, np.int64)  # [B, CAP], [B]
    cols, vals = np.empty((n, 3 * S.TK_COLS), np.float32), np.empty((n, CAP), np.float32)  # the job's scratch
    slots = [0] * S.SLOTS
    slots[S.TK_ROWS], slots[S.TK_V], slots[S.TK_K], slots[S.TK_OUT] = addresses.ctypes.data, rows[0].shape[0], want.ctypes.data, ids.ctypes.data
    slots[S.TK_CAP], slots[S.TK_COUNT], slots[S.TK_COLS_AT], slots[S.TK_VALS] = CAP, counts.ctypes.data, cols.ctypes.data, vals.ctypes.data
    k.run_job("top_k", slots, n, threads)
    return [ids[b, : counts[b]].copy() if counts[b] >= 0 else None for b in range(n)]
