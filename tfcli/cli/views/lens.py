"""The logit lens drawn: a grid of layers x positions, one position's top tokens per layer, the
comparison of one token in several contexts, and the grid as a PNG/SVG. Drawing only."""

from __future__ import annotations

import numpy as np
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from .inside import cell, clip

CELL = 10  # a grid cell: 6 cells of token, the probability in percent (3), a space


def layer_name(i: int) -> str:
    """Row i of the residual stream (README, "Layers and blocks"): 0 = the embeddings, i = after block i-1."""
    return "0 emb" if i == 0 else str(i)


LAYERS = "layer i: the residual stream after block i-1 (layer 0 = the embeddings)"
LAYERS_ZH = "第 i 层：第 i-1 个块之后的残差流（第 0 层 = 嵌入）"


def grid(labels: list[str], probs: np.ndarray, names: list[list[str]], colour: bool) -> Text:
    """Layers as rows (the embeddings at the top, the output at the bottom), one column per
    position headed by its input token; each cell the lens's top token names[layer][j] and its
    probability probs [L+1, columns]."""
    text = Text(no_wrap=True, overflow="crop")
    lw = 5
    text.append("layer".rjust(lw) + " ", style="dim")
    for label in labels:
        label = clip(label, CELL - 1)
        text.append(label + " " * (CELL - cell_len(label)), style="bold")
    text.append("\n")
    n_layers = probs.shape[0]
    for layer in range(n_layers):
        text.append(layer_name(layer).rjust(lw) + " ", style="bold" if layer in (0, n_layers - 1) else "dim")
        for j in range(len(labels)):
            p = float(probs[layer, j])
            text.append_text(cell(names[layer][j], p, CELL - 4, colour))
            pct = " **" if p >= 0.995 else f"{p * 100:3.0f}"
            text.append_text(cell(pct, p, 3, colour))
            text.append(" ")
        if layer < n_layers - 1:
            text.append("\n")
    return text


def legend(colour: bool) -> Text:
    t = Text("the number: the top token's probability in percent (** = over 99.5%)")
    if colour:
        t.append("; colour: ")
        for x in np.linspace(0, 1, 11):
            t.append_text(cell(" ", x, 1, True))
        t.append(" 0 → 1")
    return t


def position_table(lens, position: int, names: list[list[list[str]]], colour: bool, title: str) -> Table:
    """One position: each layer's top tokens with their probabilities, and the entropy in bits."""
    table = Table(box=None, padding=(0, 1), pad_edge=False, title=title, title_justify="left")
    table.add_column("layer", justify="right", style="bold")
    k = lens.ids.shape[2]
    for j in range(k):
        table.add_column(f"#{j + 1}", no_wrap=True)
    table.add_column("bits", justify="right", style="dim")
    for layer in range(lens.ids.shape[0]):
        row = []
        for j in range(k):
            p = float(lens.probs[layer, position, j])
            label = f"{names[layer][j]} {p:.0%}" if p >= 0.01 else f"{names[layer][j]} <1%"
            row.append(cell(label, p, max(cell_len(label), 12), colour))
        table.add_row(layer_name(layer), *row, f"{lens.entropy[layer, position]:.1f}")
    return table


def compare_tables(texts: list[str], traj, reads: list[list[str]], base: np.ndarray, colour: bool) -> tuple[Table, Table]:
    """Two tables: the cosine between each pair of contexts per layer (with the baseline), and per
    text how far its state is from the bare token's embedding and what the lens reads."""
    c = len(texts)
    pairs = [(a, b) for a in range(c) for b in range(a + 1, c)]
    letters = [chr(ord("A") + i) for i in range(c)]
    one = Table(box=None, padding=(0, 1), pad_edge=False, title="cosine between the contexts' states", title_justify="left")
    one.add_column("layer", justify="right", style="bold")
    for a, b in pairs:
        one.add_column(f"{letters[a]}·{letters[b]}", justify="right")
    one.add_column("baseline", justify="right", style="dim")
    pw = traj.pairwise  # [L+1, C, C]
    for layer in range(pw.shape[0]):
        one.add_row(layer_name(layer), *[cell(f"{pw[layer, a, b]:.3f}", pw[layer, a, b], 6, colour) for a, b in pairs], f"{base[layer]:.3f}")
    two = Table(box=None, padding=(0, 1), pad_edge=False, title="each text's last token: cosine to its bare embedding, |h|, what the lens reads", title_justify="left")
    two.add_column("layer", justify="right", style="bold")
    for i in range(c):
        two.add_column(f"{letters[i]} cos", justify="right", no_wrap=True, min_width=6)
        two.add_column("|h|", justify="right", style="dim", no_wrap=True)
        two.add_column(f"{letters[i]} reads", no_wrap=True, max_width=14)
    fe, norms = traj.from_embedding, traj.norms  # [C, L+1]
    for layer in range(fe.shape[1]):
        row = []
        for i in range(c):
            row += [cell(f"{fe[i, layer]:.3f}", fe[i, layer], 6, colour), f"{norms[i, layer]:.0f}" if norms[i, layer] >= 10 else f"{norms[i, layer]:.1f}", reads[i][layer]]
        two.add_row(layer_name(layer), *row)
    return one, two


def lens_drawing(title: str, probs: np.ndarray, labels: list[str], names: list[list[str]]):
    """The grid as an image: cells coloured by the top token's probability [L+1, T], the token
    written in each cell when the cells are large enough to read."""
    from .images import Panel, layout

    rows = [layer_name(i) for i in range(probs.shape[0])]
    d = layout([[Panel("top-token probability", probs, np.ones(probs.shape, dtype=bool), rows, labels)]], title)
    # Nothing is masked in a lens: drop the "0 (masked)" swatch and its label, which layout adds last.
    d.bitmaps.pop()
    d.texts.pop()
    x0, y0, size = d.grids[0]
    if size >= 22:
        from .heatmap import ink_on, viridis

        font = max(7, min(12, size // 3))
        for i, j in np.ndindex(probs.shape):
            ink = ink_on(tuple(int(v) for v in viridis(probs[i, j])))
            d.text(x0 + j * size + size / 2, y0 + i * size + size / 2, clip(names[i][j], 4), font, "mm", ink)
    return d
