"""How many threads the BLAS library may use.

OpenBLAS splits each matrix product across its threads and makes them wait for each other. When
other programs keep the cores busy, a thread that loses its core stalls every product: on a
2-core machine with one busy core we measured SmolLM2 decoding at 2.5 tokens/s with 2 threads
and 17.9 with 1. So by default we use only the cores that are idle right now.
"""

from __future__ import annotations

import os


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_cpus() -> int | None:
    """Tasks running or runnable right now besides this process (the 4th field of /proc/loadavg,
    an instant count, unlike the load averages). The least of five readings 2 ms apart, so that a
    kernel thread passing through (kswapd, a shell) is not taken for a busy core. None off Linux."""
    import time

    counts = []
    try:
        for i in range(5):
            if i:
                time.sleep(0.002)
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return None
    return max(0, min(counts))


def auto_threads() -> int:
    """Idle cores, at least one. A thread count set in the environment wins."""
    for var in ("TFCLI_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    cpus = available_cpus()
    busy = busy_cpus()
    return cpus if busy is None else max(1, cpus - busy)


def set_blas_threads(n: int) -> bool:
    """Limit the BLAS library NumPy uses to n threads; False if that cannot be controlled here."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return False
    threadpool_limits(limits=n, user_api="blas")
    return True
