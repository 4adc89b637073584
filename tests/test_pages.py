"""fast/pages.py: the interleaved weights' memory, cut from chunks that ask for 2 MB pages."""

import gc
import sys

import numpy as np
import pytest

from tfcli.engine.fast.load import pages
from tfcli.engine.fast.run import interleave


def _flags(address: int) -> set[str]:
    """The VmFlags of the mapping holding `address` (/proc/self/smaps)."""
    inside = False
    for line in open("/proc/self/smaps"):
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(v, 16) for v in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return set(line.split()[1:])
    raise AssertionError("no mapping holds the address")


def test_pieces_are_aligned_apart_and_writable():
    a, b = pages.empty(1000), pages.empty(5000)
    assert a.dtype == np.uint8 and a.shape == (1000,) and b.shape == (5000,)
    assert a.ctypes.data % pages.ALIGN == 0 and b.ctypes.data % pages.ALIGN == 0
    lo = sorted([(a.ctypes.data, a.size), (b.ctypes.data, b.size)])
    assert lo[0][0] + lo[0][1] <= lo[1][0]  # no overlap
    a[:] = 1
    b[:] = 2
    assert (a == 1).all() and (b == 2).all()


def test_a_piece_larger_than_a_chunk_gets_its_own():
    big = pages.empty(pages.CHUNK + 12345)
    assert big.size == pages.CHUNK + 12345
    big[-1] = 7
    assert big[-1] == 7


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_HUGEPAGE is Linux's")
def test_the_memory_asks_for_large_pages_and_goes_when_its_pieces_do(monkeypatch):
    monkeypatch.setattr(pages, "_chunk", None)  # a chunk of its own (a model another test keeps may hold pieces of the current one)
    piece = pages.empty(4096)
    assert "hg" in _flags(piece.ctypes.data)  # madvise(MADV_HUGEPAGE) on its mapping
    chunk = pages._chunk[0]
    assert chunk() is not None
    del piece
    gc.collect()
    assert chunk() is None  # the last piece gone: unmapped


def test_interleaved_weights_live_on_those_pages():
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 256, (16, 2 * 20), dtype=np.uint8)  # 16 Q4_1 rows of 2 blocks
    packed = interleave.interleave(rows, 3)
    if sys.platform.startswith("linux"):
        assert "hg" in _flags(packed.groups.ctypes.data)
    assert np.array_equal(interleave.restore(packed, 0, 16), rows)
