"""Weight rows interleaved 8 at a time, the layout the fast products read, for every quantized family.

A GGUF file stores each weight row's blocks one after another (formats.py draws them). A product
of a few rows of x then spends most of its time on each block's own scale: for every block and
every row of x, a dot product summed across lanes, converted, scaled. llama.cpp's CPU backend
repacks its types so that one instruction serves 8 weight rows at once (its ggml-cpu/repack.cpp);
tfcli does the same for each block format family, whose module draws its records and holds its
kernels' facts: source/blocks32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), source/k_quants (Q4_K, Q5_K, Q6_K).
A record is exactly the bytes of the 8 blocks, moved: the file's size, nothing added.

`interleave` makes the layout from the file's rows (in memory of 2 MB pages where the system gives
them), `restore` gives the file's rows back, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...formats import BLOCK_TYPES
from ..load import pages
from ..source import blocks32, k_quants

TYPES = blocks32.TYPES  # the 32-weight types
EVERY = TYPES + k_quants.TYPES  # what interleave() lays out
GROUP = 8  # weight rows per group
_FAMILY = {**{t: blocks32 for t in blocks32.TYPES}, **{t: k_quants for t in k_quants.TYPES}}


@dataclass(frozen=True)
class Interleaved:
    """A part's rows (`rows` of them, of `type_id`) interleaved: `groups` [ceil(rows/8), nb * 8 * nbytes] uint8."""

    groups: np.ndarray
    rows: int
    type_id: int

    @property
    def nbytes(self) -> int:
        return self.groups.nbytes


def interleave(data: np.ndarray, type_id: int, release=None) -> Interleaved:
    """The file's rows `data` [n, nb * nbytes] uint8 of a type of EVERY, interleaved as its family lays them
    out. `release(view)`, when given, is called with each tile of `data` once it is copied (to drop a
    file mapping's pages: the copy then costs its size once, not twice)."""
    nbytes = BLOCK_TYPES[type_id].nbytes
    n, row_bytes = data.shape
    nb = row_bytes // nbytes
    G = -(-n // GROUP)
    # [G, nb * record], on 2 MB pages where the system gives them
    groups = pages.empty(G * nb * GROUP * nbytes).reshape(G, nb * GROUP * nbytes)
    family = _FAMILY[type_id]
    for a in range(0, n, family.TILE):  # a tile at a time: bounds the temporaries and the file's pages held
        b = min(a + family.TILE, n)
        tile = data[a:b].reshape(b - a, nb, nbytes)  # [n', nb, nbytes]
        if (b - a) % GROUP:  # the last group: zero rows after the matrix's own (scale 0)
            tile = np.concatenate([tile, np.zeros((GROUP - (b - a) % GROUP, nb, nbytes), np.uint8)])
        groups[a // GROUP : -(-b // GROUP)] = family.records(tile, type_id).reshape(-1, nb * GROUP * nbytes)
        if release is not None:
            release(data[a:b])
    return Interleaved(groups, n, type_id)


def restore(packed: Interleaved, first: int, end: int) -> np.ndarray:
    """The file's rows first..end-1 ([end - first, nb * nbytes] uint8) from their interleaved groups."""
    return _FAMILY[packed.type_id].restore_rows(packed.groups, packed.type_id, first, end)
