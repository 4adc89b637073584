"""Refuse allocations the machine cannot hold, before trying them, with the size they would need.

"What the machine can hold" is the smallest of the limits that apply to this process: the memory
the kernel says is available (MemAvailable), the room left under an address-space limit (`ulimit
-v`, RLIMIT_AS) or a data limit (`ulimit -d`, RLIMIT_DATA), and the room left in its control
group (cgroup v2 memory.max, or v1 memory.limit_in_bytes, of its own group and every parent). A
container or a `ulimit -v` then gets one line naming the limit, not a NumPy MemoryError.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import numbers
from .errors import ResourceError

# Where the kernel shows them; tests point these at a fake tree.
PROC_SELF = Path("/proc/self")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def proc_bytes(path: str, field: str) -> int | None:
    """A "Field:  123 kB" line of a Linux /proc file (meminfo, self/status) in bytes; None elsewhere."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _physical() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else physical memory from sysconf, else None."""
    avail = proc_bytes("/proc/meminfo", "MemAvailable")
    if avail is not None:
        return avail
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _rlimit_room() -> list[tuple[int, str]]:
    """Room under RLIMIT_AS and RLIMIT_DATA: the soft limit minus what the process already maps."""
    try:
        import resource
    except ImportError:  # not a Unix
        return []
    rooms = []
    limits = ((resource.RLIMIT_AS, "VmSize", "the address-space limit (ulimit -v)"),
              (getattr(resource, "RLIMIT_DATA", None), "VmData", "the data-size limit (ulimit -d)"))  # fmt: skip
    for limit, field, name in limits:
        if limit is None:
            continue
        try:
            soft, _hard = resource.getrlimit(limit)
        except (OSError, ValueError):
            continue
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        used = proc_bytes(str(PROC_SELF / "status"), field) or 0
        rooms.append((max(soft - used, 0), name))
    return rooms


def _read_number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) and anything odd: None


def _cgroup_room() -> list[tuple[int, str]]:
    """Room in the process's control group and its parents: limit minus current use, for cgroup v2
    (memory.max, memory.current) and v1 (memory.limit_in_bytes, memory.usage_in_bytes)."""
    try:
        lines = (PROC_SELF / "cgroup").read_text().splitlines()
    except OSError:
        return []
    rooms = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _id, controllers, rel = parts
        if controllers == "":  # v2: one unified tree
            base, files = CGROUP_ROOT, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # v1: the memory controller's own tree
            base, files = CGROUP_ROOT / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        group = base / rel.lstrip("/")
        while True:  # a parent's limit binds too
            limit, used = _read_number(group / files[0]), _read_number(group / files[1])
            if limit is not None and limit < 1 << 60:  # v1 writes "no limit" as a huge number
                rooms.append((max(limit - (used or 0), 0), f"the control group's memory limit ({group / files[0]})"))
            if group == base or base not in group.parents:
                break
            group = group.parent
    return rooms


def limits() -> list[tuple[int, str]]:
    """Every limit that applies now, as (bytes still available under it, what it is)."""
    found = []
    physical = _physical()
    if physical is not None:
        found.append((physical, ""))
    return found + _rlimit_room() + _cgroup_room()


def available_bytes() -> int | None:
    """The memory this process can still allocate: the smallest of its limits, or None if unknown."""
    found = limits()
    return min(n for n, _ in found) if found else None


def check_allocation(
    nbytes: int, what: str, hint: str = "use a shorter prompt or fewer {max_new_tokens}, or a smaller model"
) -> None:
    """ResourceError, naming the size and the limit, if `what` needs more than this process can still allocate."""
    avail = available_bytes()
    if avail is not None and nbytes > avail:
        binding = next((name for n, name in limits() if n == avail and name), "")
        under = f" under {binding}" if binding else ""
        raise ResourceError(
            f"{what} would need {numbers.size(nbytes)} but only {numbers.size(avail)} of memory is available{under}",
            hint,
        )


def flops_per_second() -> float:
    """This machine's float32 rate on the matrix products a small model is made of: a 256 x 256 by
    256 x 256 product, the best of five (a few milliseconds, once per process). What a command says
    its work will take is its arithmetic divided by this: an estimate, not a promise."""
    if not _RATE:
        import time

        import numpy as np

        a = np.ones((256, 256), np.float32)
        a @ a  # the first product starts BLAS's threads: not counted
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            a @ a
            best = min(best, time.perf_counter() - t0)
        _RATE.append(2 * 256**3 / max(best, 1e-6))
    return _RATE[0]


_RATE: list[float] = []


def give_back() -> None:
    """Return the heap's free pages to the system (glibc's malloc_trim). Parsing a large tokenizer.json
    frees hundreds of MB that glibc keeps for later (Gemma 3's 262,144-token vocabulary: 290 MB
    resident after loading, 100 MB after this); the weights then fill that room instead of adding to it."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass
