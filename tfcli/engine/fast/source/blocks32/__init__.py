"""The 32-weight block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), one family: their rows interleaved 8 at a
time, the layout the fast products read, and the facts their kernels rely on. The vector code that
multiplies them is dot.py's (build-time, imported by jobs.py only); this module imports no numba.

A GGUF file stores each weight row's blocks one after another (formats.py draws them). A product
of a few rows of x then spends most of its time on each block's own scale: for every block and
every row of x, a dot product of 32 bytes summed across 8 lanes, converted, scaled. llama.cpp's
CPU backend repacks Q4_0 and a few other types so that one instruction serves 8 weight rows at
once (its ggml-cpu/repack.cpp); this package does the same for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.

Rows 8g..8g+7 become group g. For each block b of those rows, one record holds, in order:

    d    [8] float16    the 8 rows' scales (as in the file)
    m    [8] float16    Q4_1, Q5_1: their minimums
    hb   [8] uint32     Q5_0, Q5_1: the fifth bits, dword j holding those of weights 4j..4j+3:
                        bit 4r + t is row r's bit for weight 4j + t
    qs   Q4_*, Q5_*: [4][8][4] bytes: for k < 4, row r's bytes 4k..4k+3 of its 16 (their low
                    nibbles are weights 4k..4k+3, the high ones weights 16+4k..16+4k+3)
         Q8_0: [8][8][4] int8: for j < 8, row r's weights 4j..4j+3

So a record is exactly the bytes of the 8 blocks, moved: the file's size, nothing added. A 32-byte
load of qs (then a mask or a shift for nibbles) gives "4 weights of each of 8 rows", which one
vpdpbusd multiplies by 4 bytes of x broadcast to the 8 lanes (dot.py). A matrix whose row count
is not a multiple of 8 has its last group padded with zero rows (scale 0, never written out).

`records` makes the layout from the file's rows, `restore_rows` gives the file's rows back (bit
for bit: the tiles of a long prompt are dequantized from them by formats.py's rules); run/interleave.py
calls them (and the k-quants', source/k_quants) for every family.
"""

from __future__ import annotations

import numpy as np

from ....formats import BLOCK_TYPES, GGMLType

TYPES = (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0)
GROUP = 8  # weight rows per group
TILE = 4096  # rows interleaved at a time: bounds the temporary arrays, and the file's pages held at once

# Without VNNI, vpmaddubsw's pairs of products (int16) are summed in int16 over this many of a block's 8
# runs of 4 weights before one vpmaddwd widens them: a pair is at most 2 x 15 x 127 = 3,810 for 4-bit q
# (8 of them: 30,480 < 32,767), 2 x 31 x 127 = 7,874 for 5-bit q (4: 31,496). The sums stay exact, so the
# bits do not change; the multiplier port (one on Zen 1) does 9 multiplies per run of 8 instead of 16.
# Q8_0's pairs (|q| up to 128: 32,512) take a vpmaddwd each. llama.cpp's AVX2 q4_0 products do the same.
RUN16 = {GGMLType.Q4_0: 8, GGMLType.Q4_1: 8, GGMLType.Q5_0: 4, GGMLType.Q5_1: 4}


def _fields(type_id: int) -> tuple[int, int | None, int | None, int]:
    """Where a GGUF block of this type holds (d, m, qh, qs), in bytes from its start (None: absent)."""
    return {
        GGMLType.Q4_0: (0, None, None, 2), GGMLType.Q4_1: (0, 2, None, 4), GGMLType.Q5_0: (0, None, 2, 6),
        GGMLType.Q5_1: (0, 2, 4, 8), GGMLType.Q8_0: (0, None, None, 2),
    }[type_id]


def _nibbles_swapped(words: np.ndarray) -> np.ndarray:
    """[..., 8] uint32 -> [..., 8]: nibble r of word j is nibble j of word r (its own inverse). The
    fifth bits: row r's 32 bits, in nibbles j = weights 4j..4j+3, become dword j's nibble r."""
    shifts = 4 * np.arange(8, dtype=np.uint32)  # [8]
    nibbles = (words[..., None, :] >> shifts[:, None]) & np.uint32(15)  # [..., 8j, 8r]: nibble j of word r
    return np.bitwise_or.reduce(nibbles << shifts, axis=-1)  # [..., 8j]


def records(blocks: np.ndarray, type_id: int) -> np.ndarray:
    """[8G, nb, nbytes] uint8 blocks -> [G, nb, 8 * nbytes] records (the module's layout)."""
    n, nb, nbytes = blocks.shape
    G = n // GROUP
    by_group = blocks.reshape(G, GROUP, nb, nbytes).transpose(0, 2, 1, 3)  # [G, nb, 8, nbytes] (a view)
    out = np.empty((G, nb, GROUP * nbytes), np.uint8)
    d_at, m_at, qh_at, qs_at = _fields(type_id)
    at = 0
    for field in (d_at, m_at):  # float16s moved as uint16, the runs of 4 bytes below as uint32: fewer, wider moves
        if field is not None:
            # [G, nb, 8r]
            out[:, :, at : at + 16].view("<u2")[...] = by_group[:, :, :, field : field + 2].view("<u2")[..., 0]
            at += 16
    if qh_at is not None:  # row r's bit 4j + t -> bit 4r + t of dword j
        out[:, :, at : at + 32].view("<u4")[...] = _nibbles_swapped(
            by_group[:, :, :, qh_at : qh_at + 4].view("<u4")[..., 0]
        )
        at += 32
    runs = 8 if type_id == GGMLType.Q8_0 else 4  # runs of 4 bytes in a row's qs
    qs = by_group[:, :, :, qs_at : qs_at + 4 * runs].view("<u4")  # [G, nb, 8r, runs]
    out[:, :, at:].view("<u4").reshape(G, nb, runs, GROUP)[...] = qs.transpose(0, 1, 3, 2)
    return out


def restore_rows(groups: np.ndarray, type_id: int, first: int, end: int) -> np.ndarray:
    """The file's rows first..end-1 ([end - first, nb * nbytes] uint8) from their interleaved `groups`."""
    nbytes = BLOCK_TYPES[type_id].nbytes
    g0, g1 = first // GROUP, -(-end // GROUP)
    G, nb = g1 - g0, groups.shape[1] // (GROUP * nbytes)
    records = groups[g0:g1].reshape(G, nb, GROUP * nbytes)
    blocks = np.empty((G, nb, GROUP, nbytes), np.uint8)  # [G, nb, 8r, nbytes]
    d_at, m_at, qh_at, qs_at = _fields(type_id)
    at = 0
    for field in (d_at, m_at):
        if field is not None:
            # [G, nb, 8r]
            blocks[:, :, :, field : field + 2].view("<u2")[..., 0] = records[:, :, at : at + 16].view("<u2")
            at += 16
    if qh_at is not None:
        blocks[:, :, :, qh_at : qh_at + 4].view("<u4")[..., 0] = _nibbles_swapped(
            records[:, :, at : at + 32].view("<u4")
        )
        at += 32
    runs = 8 if type_id == GGMLType.Q8_0 else 4
    qs = records[:, :, at:].view("<u4").reshape(G, nb, runs, GROUP)  # [G, nb, runs, 8r]
    blocks[:, :, :, qs_at:].view("<u4")[...] = qs.transpose(0, 1, 3, 2)
    rows = blocks.transpose(0, 2, 1, 3).reshape(G * GROUP, nb * nbytes)  # [8G, row bytes]
    return rows[first - GROUP * g0 : end - GROUP * g0]
