"""The compiled candidates of a sampling step: sampling.top_k_ids of a batch's rows at once, a row a
chunk on the pool's threads (fast/run/top.py calls it). A numba job, compiled by build.py with jobs.py's;
imported only in build.py's process: importing it imports numba.

A row's values are only compared, float32 against float32, never summed into a result or rounded, so
the ids are exactly top_k_ids' (the values at least the k-th largest, ties kept, in order). The row is
read as TK_COLS columns (column j: every TK_COLS-th value from j, so that each pass runs down
contiguous values in vector lanes): the k-th largest column maximum is at most the row's k-th largest
value, so only the columns whose maximum reaches it hold candidates. The same pass adds each value
times 0 to its column's sum, which Inf or NaN anywhere in the column turns to NaN.
"""

from __future__ import annotations

import numpy as np
from numba import carray

from .jobs import _f32, _i64
from ..arguments import TK_CAP, TK_COLS, TK_COLS_AT, TK_COUNT, TK_K, TK_OUT, TK_ROWS, TK_V, TK_VALS


def top_k(a, c):
    """Row c: TK_COUNT[c] = how many ids it writes to its row of TK_OUT; -1 when a value is not
    finite, -2 when more than TK_CAP values reach the bound, -3 when k is not in 1..min(V, TK_COLS)
    (then sampling's own checks run on the row)."""
    v_len, k, cap = a[TK_V], carray(_i64(a[TK_K]), (c + 1,))[c], a[TK_CAP]
    counts = carray(_i64(a[TK_COUNT]), (c + 1,))
    if k < 1 or k > min(v_len, TK_COLS):
        counts[c] = -3
        return
    x = carray(_f32(carray(_i64(a[TK_ROWS]), (c + 1,))[c]), (v_len,))
    scratch = carray(_f32(a[TK_COLS_AT] + 4 * c * 3 * TK_COLS), (3 * TK_COLS,))
    cols, sums, sorted_ = scratch[:TK_COLS], scratch[TK_COLS : 2 * TK_COLS], scratch[2 * TK_COLS :]
    for j in range(TK_COLS):
        cols[j], sums[j] = -np.inf, np.float32(0)
    for r in range(0, v_len, TK_COLS):
        row = x[r : min(v_len, r + TK_COLS)]  # a view: indices from 0 up, which LLVM runs in vector lanes
        for j in range(row.shape[0]):
            v, m = row[j], cols[j]
            cols[j] = v if v > m else m
            sums[j] = sums[j] + v * np.float32(0)  # NaN from here on if v is Inf or NaN
    finite = True
    for j in range(TK_COLS):
        finite &= sums[j] == 0
    if not finite:
        counts[c] = -1
        return
    width = min(v_len, TK_COLS)
    for j in range(width):
        sorted_[j] = cols[j]
    bound = _kth_largest(sorted_, width, k)  # at most the row's k-th largest value
    ids, vals = carray(_i64(a[TK_OUT] + 8 * c * cap), (cap,)), carray(_f32(a[TK_VALS] + 4 * c * cap), (cap,))
    n = 0
    for j in range(width):  # the columns that reach the bound, then their values that do, in the row's order below
        if cols[j] >= bound:
            for i in range(j, v_len, TK_COLS):
                if x[i] >= bound:
                    if n == cap:
                        counts[c] = -2
                        return
                    ids[n] = i
                    n += 1
    _sort(ids, n)  # the row's order
    for j in range(n):
        vals[j] = x[ids[j]]
    kth = _kth_largest(vals, n, k)  # the row's k-th largest value: every value at least the bound is here
    m = 0
    for j in range(n):
        if x[ids[j]] >= kth:
            ids[m] = ids[j]
            m += 1
    counts[c] = m


def _kth_largest(a, n, k):
    """The k-th largest of a[:n] (1 <= k <= n, no NaN), a reordered (quickselect)."""
    lo, hi, want = 0, n - 1, n - k
    while lo < hi:
        pivot = a[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if want <= j:
            hi = j
        elif want >= i:
            lo = i
        else:
            return a[want]
    return a[want]


def _sort(a, n):
    """a[:n] in ascending order (insertion sort: a few dozen ids, mostly in order already)."""
    for i in range(1, n):
        v, j = a[i], i - 1
        while j >= 0 and a[j] > v:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = v


HELPERS = ("_kth_largest", "_sort")  # compiled into the job
JOBS = ("top_k",)
