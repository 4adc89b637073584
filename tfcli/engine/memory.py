"""Refuse allocations the machine cannot hold, before trying them, with the size they would need."""

from __future__ import annotations

import os

from ..numbers import human_bytes  # re-exported: cli/bench.py, cli/attn.py and benchmarks/compare.py import it from here
from .errors import ResourceError


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


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else physical memory from sysconf, else None."""
    avail = proc_bytes("/proc/meminfo", "MemAvailable")
    if avail is not None:
        return avail
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_allocation(nbytes: int, what: str, hint: str = "use a shorter prompt or fewer --max-tokens, or a smaller model") -> None:
    """ResourceError, naming the size, if `what` needs more than the memory available now."""
    avail = available_bytes()
    if avail is not None and nbytes > avail:
        raise ResourceError(f"{what} would need {human_bytes(nbytes)} but only {human_bytes(avail)} of memory is available", hint)
