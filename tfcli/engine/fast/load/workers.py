"""The kernels' thread pool, its Python side: the pool's fields (source/pool.py lays them out) in an
int64 array, and the threads that each run the compiled tfcli_work for life (load/kernels.py calls
acquire before a product on several threads)."""

from __future__ import annotations

import os
import threading

import numpy as np

_lock = threading.Lock()


class Pool:
    """source/pool.py's fields in an int64 array, and the Python threads that each run tfcli_work for life."""

    def __init__(self, work) -> None:
        from ..source import pool

        self._bytes = np.zeros(pool.SIZE // 8 + 8, np.int64)
        start = (-self._bytes.ctypes.data % 64) // 8  # fields a cache line apart from a line's start
        self.fields = self._bytes[start : start + pool.SIZE // 8]  # [SIZE/8] int64
        self.address = self.fields.ctypes.data
        self.workers = 0
        self.work = work  # tfcli_work, loaded
        self.lock = threading.Lock()  # one product on the pool at a time; another caller runs its chunks alone
        self._workers_at = pool.at(pool.Field.WORKERS) // 8

    def grow(self, workers: int) -> None:
        """At least `workers` workers (called with self.lock held, so no product is running)."""
        while self.workers < workers:
            seen = int(self.fields[:1].view(np.int32)[0])  # GEN: the worker waits for the next product
            threading.Thread(target=self.work, args=(self.address, seen), daemon=True, name="tfcli-kernels").start()
            self.workers += 1
            self.fields[self._workers_at] = self.workers


_pool: list[Pool] = []  # made on first use; forgotten in a forked child, which has no worker threads
os.register_at_fork(after_in_child=_pool.clear)


def _the_pool(work) -> Pool:
    if not _pool:
        with _lock:
            if not _pool:
                _pool.append(Pool(work))
    return _pool[0]


def acquire(threads: int, work) -> Pool | None:
    """The pool for a call on `threads` threads, its lock taken (the caller releases it) and its
    workers started; None when one thread is asked for, the pool cannot have workers, or another
    call holds it (then the call runs every chunk on its own thread: the same bits). `work`: the
    loaded tfcli_work, None where the pool cannot have workers."""
    pool = _the_pool(work) if threads > 1 and work is not None else None
    if pool is None or not pool.lock.acquire(blocking=False):
        return None
    try:
        if pool.workers < threads - 1:
            pool.grow(threads - 1)
    except BaseException:
        pool.lock.release()
        raise
    return pool
