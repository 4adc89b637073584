"""The k-quants' rows interleaved 8 at a time (tfcli/engine/fast/source/k_quants/__init__.py), the layout
their compiled products read (the products against the textbook: test_kernels.py, test_kernel_rows.py).

- the layout is what the package's docstring draws: each weight read from a record by that drawing,
  by plain loops, equals formats' dequantizer bit for bit (Q4_K, Q5_K, Q6_K; row counts not a
  multiple of 8);
- restore() gives the file's bytes back, bit for bit, for any range of rows, across interleave's tiles;
- a record is the 8 blocks' bytes, moved: the copy is the file's size.
"""

from __future__ import annotations

import numpy as np
import pytest

from tfcli.engine import formats
from tfcli.engine.fast.run.interleave import GROUP, interleave, restore
from tfcli.engine.fast.source.k_quants import TYPES

from test_kernels import random_rows


def name(t: int) -> str:
    return formats.BLOCK_TYPES[t].name


def _half(rec: np.ndarray, at: int) -> np.float32:
    return rec[at : at + 2].view(np.float16)[0].astype(np.float32)


def _scales_mins(b: list[int]) -> tuple[list[int], list[int]]:
    """A Q4_K/Q5_K block's 12 scale bytes -> 8 scales, 8 mins (llama.cpp's get_scale_min_k4)."""
    sc = [b[j] & 63 for j in range(4)] + [(b[8 + j] & 15) | ((b[j] >> 6) << 4) for j in range(4)]
    mn = [b[4 + j] & 63 for j in range(4)] + [(b[8 + j] >> 4) | ((b[4 + j] >> 6) << 4) for j in range(4)]
    return sc, mn


def weights_by_the_drawing(groups: np.ndarray, t: int, n: int, ns: int) -> np.ndarray:
    """[n, 256 ns] float32, read from the records as the docstring draws them."""
    record = 8 * formats.BLOCK_TYPES[t].nbytes
    out = np.empty((n, 256 * ns), np.float32)
    for row in range(n):
        g, r = divmod(row, GROUP)
        for s in range(ns):
            rec = groups[g, s * record : (s + 1) * record]
            if t == 14:  # scales [16][8] at 0, d at 128, then per run 8h+m: ql 16h+m, ql 16h+8+m, qh 8h+m
                d = _half(rec, 128 + 2 * r)
                for i in range(256):
                    h, g4, l = i // 128, (i % 128) // 32, i % 32
                    ql_byte = 64 * h + l + 32 * (g4 % 2)  # the byte of the row's ql (formats._q6_k)
                    v = ql_byte // 4  # its 32-byte vector of ql
                    ql = rec[144 + 96 * (8 * (v // 16) + v % 8) + 32 * (v % 16 // 8) + 4 * r + ql_byte % 4]
                    low = ql & 15 if g4 < 2 else ql >> 4
                    qh_byte = 32 * h + l
                    top = (rec[144 + 96 * (qh_byte // 4) + 64 + 4 * r + qh_byte % 4] >> (2 * g4)) & 3
                    sc = np.float32(int(rec[8 * (i // 16) + r].astype(np.int8)))
                    out[row, 256 * s + i] = (d * sc) * np.float32(int(low | (top << 4)) - 32)
                continue
            d, dmin = _half(rec, 2 * r), _half(rec, 16 + 2 * r)
            sc, mn = _scales_mins([int(rec[32 + 8 * i + r]) for i in range(12)])
            qs_at = 384 if t == 13 else 128
            for i in range(256):
                j, l = divmod(i, 32)  # sub-block j, weight l of it: byte 32 (j // 2) + l of qs
                run, k = j // 2, l // 4
                byte = rec[qs_at + 256 * run + 32 * k + 4 * r + l % 4]
                q = int(byte & 15) if j % 2 == 0 else int(byte >> 4)
                if t == 13:
                    q |= ((int(rec[128 + 32 * k + 4 * r + l % 4]) >> j) & 1) << 4
                out[row, 256 * s + i] = (d * np.float32(sc[j])) * np.float32(q) - dmin * np.float32(mn[j])
    return out


@pytest.mark.parametrize("t", TYPES, ids=name)
def test_the_layout_is_the_drawing(t):
    rng = np.random.default_rng(t)
    n, ns = 11, 2  # a group and a part of one
    rows = random_rows(t, n, 256 * ns, rng)
    packed = interleave(rows, t)
    assert packed.groups.shape == (2, ns * 8 * formats.BLOCK_TYPES[t].nbytes) and packed.rows == n
    want = formats.dequantize(rows, t, (n, 256 * ns))
    np.testing.assert_array_equal(weights_by_the_drawing(packed.groups, t, n, ns), want)


@pytest.mark.parametrize("t", TYPES, ids=name)
def test_restore_gives_the_files_bytes_back(t):
    rng = np.random.default_rng(20 + t)
    for n in (8, 21, 2048 + 19):  # the last: more than one tile of interleave's
        rows = random_rows(t, n, 256, rng)
        packed = interleave(rows, t)
        assert packed.groups.nbytes == -(-n // 8) * 8 * rows.shape[1]  # the file's size, the padding aside
        np.testing.assert_array_equal(restore(packed, 0, n), rows)
        for a, b in ((3, 7), (3, min(n, 11)), (0, 8), (n - 5, n)):
            np.testing.assert_array_equal(restore(packed, a, b), rows[a:b])
