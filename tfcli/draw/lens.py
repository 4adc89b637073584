"""The logit lens as a picture: residual indices x positions, each cell coloured by the top token's
probability and, when large enough to read, the token written in it."""

from __future__ import annotations

import numpy as np

from tfcli.numbering import resid_name as layer_name

from .labels import clip_cells


def lens_drawing(title: str, probs: np.ndarray, labels: list[str], names: list[list[str]]):
    """The grid as an image: cells coloured by the top token's probability [L+1, T], the token
    written in each cell when the cells are large enough to read."""
    from .images import Panel, layout
    from .scales import ink_on, viridis

    rows = [layer_name(i) for i in range(probs.shape[0])]
    d = layout([[Panel("top-token probability", probs, np.ones(probs.shape, dtype=bool), rows, labels)]], title)
    # Nothing is masked in a lens: drop the "0 (masked)" swatch and its label, which layout adds last.
    d.bitmaps.pop()
    d.texts.pop()
    x0, y0, size = d.grids[0]
    if size >= 22:
        font = max(7, min(12, size // 3))
        for i, j in np.ndindex(probs.shape):
            ink = ink_on(tuple(int(v) for v in viridis(probs[i, j])))
            d.text(x0 + j * size + size / 2, y0 + i * size + size / 2, clip_cells(names[i][j], 4), font, "mm", ink)
    return d
