"""The k-quants (Q4_K, Q5_K, Q6_K), one family: blocks of 256 weights whose sub-blocks carry scales of
their own (formats.py draws them and keeps the textbook `dequantize`). This package holds the family
together, as ggml keeps a format's layout and kernels: the facts and the interleaved layout here
(NumPy: the process that multiplies imports this module, never numba), the vector code that unpacks
and multiplies it in dot.py (build-time, imported by jobs.py only).

Rows 8g..8g+7 become group g, as the 32-weight types' (source/blocks32). For each block b of those
rows one record holds every field of the block, in the file's order, cut into runs of `width` bytes,
the 8 rows' run i side by side: run i of row r at 8 * at + (8 i + r) * width, `at` the field's offset
in a block (FIELDS). So a record is exactly the 8 blocks' bytes, moved (the file's size):

    Q4_K (1,152 bytes)  d [8] f16 at 0 · dmin [8] f16 at 16 · scales [12][8] bytes at 32
                        (byte i of row r at 32 + 8i + r) · qs [32][8][4] bytes at 128: vector k of
                        run j (32 bytes at 128 + 256 j + 32 k) holds bytes 32j+4k..+3 of each row,
                        whose low nibbles are weights 64j+4k..+3 (sub-block 2j), high ones 64j+32+4k..+3
    Q5_K (1,408 bytes)  as Q4_K, with qh [8][8][4] at 128 (vector k: the fifth bits of weights
                        l = 4k..4k+3 of every sub-block, bit s for sub-block s) and qs at 384
    Q6_K (1,680 bytes)  ql [32][8][4] at 0 · qh [16][8][4] at 1,024 · scales [16][8] int8 at 1,536
                        (scale s of row r at 1,536 + 8s + r) · d [8] f16 at 1,664; then the bytes
                        moved into the order the kernel reads them (READ_ORDER): scales at 0, d at
                        128, from 144 each run's three vectors (ql 16h+m, ql 16h+8+m, qh 8h+m)

A 32-byte vector of qs, ql or qh is "4 bytes of each of 8 rows", which vpmaddubsw multiplies by 4
bytes of x broadcast to the 8 lanes: each weight row's sums land in its own lanes (dot.py).
"""

from __future__ import annotations

import numpy as np

from ....formats import BLOCK_TYPES, GGMLType

TYPES = (GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K)
GROUP = 8  # weight rows per group

# (offset in a block, length, width of a run) of each field, in the file's order (formats._q4_k...)
FIELDS = {
    GGMLType.Q4_K: ((0, 2, 2), (2, 2, 2), (4, 12, 1), (16, 128, 4)),
    GGMLType.Q5_K: ((0, 2, 2), (2, 2, 2), (4, 12, 1), (16, 32, 4), (48, 128, 4)),
    GGMLType.Q6_K: ((0, 128, 4), (128, 64, 4), (192, 16, 1), (208, 2, 2)),
}

# Without VNNI, vpmaddubsw's pairs of products (int16) are summed in int16 over this many 32-byte
# vectors of one sub-block before one vpmaddwd multiplies them by its scale: a pair is at most
# 2 x 15 x 127 = 3,810 for Q4_K's q (8 of them: 30,480 < 32,767), 2 x 31 x 127 = 7,874 for Q5_K's
# (4: 31,496), 2 x 63 x 127 = 16,002 for Q6_K's (2: 32,004). The sums stay exact.
RUN16 = {GGMLType.Q4_K: 8, GGMLType.Q5_K: 4, GGMLType.Q6_K: 2}
TILE = 2048  # rows interleaved at a time: bounds the temporaries, and the file's pages held at once

_UINT = {1: "u1", 2: "<u2", 4: "<u4"}


def _q6k_read_order() -> np.ndarray:
    """Q6_K's record (FIELDS' layout, 1,680 bytes) in the order dot.py reads it: the scales and d first,
    then for each run m of each half h the three 32-byte vectors it multiplies (ql 16h+m, ql 16h+8+m,
    qh 8h+m), so that a record is read front to back. In the fields' order (the scales at its end read
    first, then ql and qh in turns) the hardware's prefetchers lost the stream: one core read Q6_K's
    weights from memory at 7-8 GB/s in a decode step, 18-19 in this order (Q4_K: 17-21; AMD EPYC Zen 4;
    docs/speed.md)."""
    vector = lambda at: np.arange(at, at + 32)  # noqa: E731
    parts = [np.arange(1536, 1680)]
    for h in (0, 1):
        for m in range(8):
            parts += [vector(32 * (16 * h + m)), vector(32 * (16 * h + 8 + m)), vector(1024 + 32 * (8 * h + m))]
    return np.concatenate(parts)


# a record's bytes, for the types whose kernels read them in another order than FIELDS lays them out
READ_ORDER = {GGMLType.Q6_K: _q6k_read_order()}
FIELDS_ORDER = {t: np.argsort(order) for t, order in READ_ORDER.items()}  # a record's bytes back in FIELDS' order
Q6K_SCALES, Q6K_D, Q6K_Q = 0, 128, 144  # where the reordered record holds them (Q6K_Q: 96 bytes per run m)


def records(blocks: np.ndarray, type_id: int) -> np.ndarray:
    """[8G, nb, nbytes] uint8 blocks -> [G, nb, 8 * nbytes] records (the layout above)."""
    n, nb, nbytes = blocks.shape
    G = n // GROUP
    by_group = blocks.reshape(G, GROUP, nb, nbytes)  # [G, 8r, nb, nbytes] (a view)
    out = np.empty((G, nb, GROUP * nbytes), np.uint8)
    for at, length, width in FIELDS[type_id]:
        runs = length // width
        field = by_group[..., at : at + length].view(_UINT[width])  # [G, 8r, nb, runs]
        dest = out[:, :, GROUP * at : GROUP * (at + length)].view(_UINT[width]).reshape(G, nb, runs, GROUP)
        dest[...] = field.transpose(0, 2, 3, 1)  # [G, nb, runs, 8r]
    return out if type_id not in READ_ORDER else np.ascontiguousarray(out[..., READ_ORDER[type_id]])


def restore_rows(groups: np.ndarray, type_id: int, first: int, end: int) -> np.ndarray:
    """The file's rows first..end-1 ([end - first, nb * nbytes] uint8) from their interleaved `groups`."""
    nbytes = BLOCK_TYPES[type_id].nbytes
    g0, g1 = first // GROUP, -(-end // GROUP)
    G, nb = g1 - g0, groups.shape[1] // (GROUP * nbytes)
    records = groups[g0:g1].reshape(G, nb, GROUP * nbytes)
    if type_id in READ_ORDER:
        records = np.ascontiguousarray(records[..., FIELDS_ORDER[type_id]])
    blocks = np.empty((G, GROUP, nb, nbytes), np.uint8)  # [G, 8r, nb, nbytes]
    for at, length, width in FIELDS[type_id]:
        runs = length // width
        src = records[:, :, GROUP * at : GROUP * (at + length)].view(_UINT[width]).reshape(G, nb, runs, GROUP)
        blocks[..., at : at + length].view(_UINT[width])[...] = src.transpose(0, 3, 1, 2)  # [G, 8r, nb, runs]
    rows = blocks.reshape(G * GROUP, nb * nbytes)  # [8G, row bytes]
    return rows[first - GROUP * g0 : end - GROUP * g0]
