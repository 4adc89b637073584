"""Memory for the weights tfcli copies (interleave.py's layout), in pages of 2 MB where the system
gives them.

A decode step reads every weight once, 4 KB page after 4 KB page: SmolLM2's 96 MB are 24,000
pages, more than the CPU's table of recent pages holds (a few thousand entries), so each page costs
a walk of the page tables. Linux backs memory with 2 MB pages where a program asks for them
(madvise MADV_HUGEPAGE; /sys/kernel/mm/transparent_hugepage), and NumPy asks for its arrays of 4 MB
and more; a matrix of a layer is smaller (0.3-1.1 MB), so its copy would sit on 4 KB pages. Here
the copies are cut from chunks of 64 MB of address space that ask for 2 MB pages: only the pages
written become memory. A chunk is unmapped when the last copy cut from it is gone.

Measured (SmolLM2 Q4_1, Intel Xeon, 2 threads, the two trees in turn): a decode step 2.48-2.55 ->
2.40-2.45 ms, a step of 4 rows 3.16-3.25 -> 3.07-3.12 ms, for 3 MB more at the peak (the chunks'
part-filled pages; benchmarks/README.md). Where there is no such call (not Linux), np.empty.
"""

from __future__ import annotations

import mmap
import threading
import weakref

import numpy as np

HUGE = 1 << 21  # bytes in a large page (x86-64, arm64 with 4 KB pages)
CHUNK = 32 * HUGE  # address space asked for at a time
ALIGN = 64  # bytes: each copy starts on a cache line

_lock = threading.Lock()
_chunk: tuple[weakref.ref, int, int] | None = None  # (the mapping, bytes used, its size)


def empty(size: int) -> np.ndarray:
    """[size] uint8, uninitialised: a piece of a chunk that asks for 2 MB pages (or np.empty)."""
    global _chunk
    if not hasattr(mmap, "MADV_HUGEPAGE") or size <= 0:
        return np.empty(size, np.uint8)
    with _lock:
        m = _chunk[0]() if _chunk is not None else None
        if m is None or _chunk[1] + size > _chunk[2]:
            total = max(CHUNK, -(-size // HUGE) * HUGE) + HUGE  # + HUGE: its start moved to a 2 MB boundary
            try:
                m = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                m.madvise(mmap.MADV_HUGEPAGE)
            except (OSError, ValueError):  # no room for the mapping, or a kernel without the advice
                return np.empty(size, np.uint8)
            start = -np.frombuffer(m, np.uint8, count=1).ctypes.data % HUGE
            _chunk = (weakref.ref(m), start, total)
        at = _chunk[1]
        _chunk = (_chunk[0], at + -(-size // ALIGN) * ALIGN, _chunk[2])
        return np.frombuffer(m, np.uint8, count=size, offset=at)
