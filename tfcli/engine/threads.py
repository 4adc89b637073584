"""How many threads tfcli uses: the idle cores, and the BLAS library's own thread count.

OpenBLAS splits each matrix product across its threads and makes them wait for each other. When
other programs keep the cores busy, a thread that loses its core stalls every product (with one
of two cores busy, SmolLM2 decoded several times slower on 2 threads than on 1: benchmarks/README.md).
So by default we use only the cores that are idle right now.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_cpus() -> int | None:
    """Tasks running or runnable right now besides this process's own threads (the 4th field of
    /proc/loadavg, an instant count, unlike the load averages). Our own threads are not other
    work: right after NumPy is imported, OpenBLAS's workers spin for a moment before they sleep.
    The least of five readings 2 ms apart, so that a kernel thread passing through (kswapd, a
    shell) is not taken for a busy core. None off Linux."""
    import time

    counts = []
    try:
        for i in range(5):
            if i:
                time.sleep(0.002)
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
            counts.append(running - _own_running_threads())
    except (OSError, ValueError, IndexError):
        return None
    return max(0, min(counts))


def _own_running_threads() -> int:
    """This process's threads that are running or runnable (at least this one)."""
    own = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                own += f.read().rpartition(")")[2].split()[0] == "R"  # the state follows the (name)
        except OSError:  # the thread ended meanwhile
            pass
    return max(1, own)


def auto_threads() -> int:
    """Idle cores, at least one. A thread count set in the environment wins."""
    for var in ("TFCLI_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isascii() and value.isdigit():  # "²" is a digit to isdigit, not to int
            n = int(value) if len(value) <= 18 else 10**18  # thousands of digits are more than int() takes
            if n > 0:
                return n
    cpus = available_cpus()
    busy = busy_cpus()
    return cpus if busy is None else max(1, cpus - busy)


def set_blas_threads(n: int) -> bool:
    """Let the BLAS library use n threads (a setting of the process, kept by the library itself).
    False if it cannot be controlled here. The parts of a long prompt pass are a separate choice,
    passed to the forward pass as `workers` (a Session's field)."""
    import numpy  # noqa: F401  # loads the BLAS library: threadpoolctl only sees libraries already loaded

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return False
    threadpool_limits(limits=n, user_api="blas")
    return True


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS on one thread for the duration (each of our threads then runs its own products:
    BLAS threads on top of them would fight for the same cores), back to what it was after.
    The libraries are looked up once (threadpoolctl's own lookup costs about 0.6 ms; a batch step
    enters this every step), then each use costs tens of microseconds."""
    controller = _blas_controller()
    if controller is None:
        yield
        return
    with controller.limit(limits=1, user_api="blas"):
        yield


@functools.cache
def _blas_controller():
    """threadpoolctl's view of the BLAS libraries loaded (NumPy's), or None without threadpoolctl."""
    import numpy  # noqa: F401  # loads the BLAS library: threadpoolctl only sees libraries already loaded

    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


def new_helper() -> ThreadPoolExecutor:
    """A helper thread for the second half of a few-row pass's MLP or of each_row's blocks
    (fast/run/dense_ops.py), started on its first task: a Session keeps one, since a thread started
    for each step cost 1.3 ms of a 37 ms batch step."""
    return ThreadPoolExecutor(1, thread_name_prefix="tfcli-half")


class OnThisThread(Executor):
    """An Executor that runs each call at once, on the calling thread."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as e:  # raised by result(), as a thread's error would be
            future.set_exception(e)
        return future


ON_THIS_THREAD = OnThisThread()
