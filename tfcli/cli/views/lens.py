"""The logit lens drawn: a grid of residual indices x positions, one position's top tokens per index, the
comparison of one token in several contexts, and the grid as a PNG/SVG. Drawing only."""

from __future__ import annotations

import numpy as np
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from .inside import cell, clip

CELL = 10  # a grid cell: 6 cells of token, the probability in percent (3), a space


from tfcli.draw.lens import lens_drawing  # noqa: E402, F401  (moved there: the pictures need no terminal)
from tfcli.numbering import RESID_RULE as LAYERS  # noqa: E402, F401
from tfcli.numbering import RESID_RULE_ZH as LAYERS_ZH  # noqa: E402, F401
from tfcli.numbering import resid_name as layer_name  # noqa: E402, F401


def grid(labels: list[str], probs: np.ndarray, names: list[list[str]], colour: bool, zh: bool = False) -> Text:
    """Layers as rows (the embeddings at the top, the output at the bottom), one column per
    position headed by its input token; each cell the lens's top token names[layer][j] and its
    probability probs [L+1, columns]."""
    text = Text(no_wrap=True, overflow="crop")
    lw = 5
    corner = "残差" if zh else "resid"
    text.append(" " * (lw - cell_len(corner)) + corner + " ", style="dim")
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


def legend(colour: bool, zh: bool = False) -> Text:
    t = Text("数字：最可能的词元的概率（百分比，** 表示超过 99.5%）" if zh else "the number: the top token's probability in percent (** = "
                                                          "over 99.5%)")
    if colour:
        t.append("；颜色：" if zh else "; colour: ")
        for x in np.linspace(0, 1, 11):
            t.append_text(cell(" ", x, 1, True))
        t.append(" 0 → 1")
    return t


def position_table(
    lens, position: int, names: list[list[list[str]]], colour: bool, title: str, width: int = 80, zh: bool = False
) -> Table:
    """One position: each layer's top tokens with their probabilities, and the entropy in bits.
    Token names are cut to fit `width` (never the layer or the percentage)."""
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, title=title, title_justify="left")
    table.add_column("残差" if zh else "resid", justify="right", style="bold", no_wrap=True, min_width=5)
    k = lens.ids.shape[2]
    for j in range(k):
        table.add_column(f"#{j + 1}", no_wrap=True)
    table.add_column("bits", justify="right", style="dim", no_wrap=True)
    # layer (5) + k cells of "token pct" (a space and at most 4 for "100%" or "<1%") + bits (4), a space between
    room = max(4, (width - 5 - 1 - 4) // k - 1 - 5)
    for layer in range(lens.ids.shape[0]):
        row = []
        for j in range(k):
            p = float(lens.probs[layer, position, j])
            label = f"{clip(names[layer][j], room)} {p:.0%}" if p >= 0.01 else f"{clip(names[layer][j], room)} <1%"
            row.append(cell(label, p, min(max(cell_len(label), 12), room + 5), colour))
        table.add_row(layer_name(layer), *row, f"{lens.entropy[layer, position]:.1f}")
    return table


def compare_tables(
    texts: list[str],
    traj,
    reads: list[list[tuple[str, float]]],
    base: np.ndarray,
    colour: bool,
    width: int = 80,
    zh: bool = False,
) -> list[Table | Text]:
    """The cosine between each pair of contexts per layer (with the baseline), and per text how far
    its state is from the bare token's embedding, its length and what the lens reads (token, p).
    Columns that do not fit `width` go on into a further table, each with the layer column, so
    that no number or label is cut."""
    c = len(texts)
    pairs = [(a, b) for a in range(c) for b in range(a + 1, c)]
    letters = [chr(ord("A") + i) for i in range(c)]
    pw = traj.pairwise  # [L+1, C, C]
    n_rows = pw.shape[0]
    tables = []
    # The pairs: "layer" (5), 8 cells a pair, then the baseline (9).
    per = max(1, (width - 5 - 9) // 8)
    for start in range(0, len(pairs), per):
        chunk = pairs[start : start + per]
        last = start + per >= len(pairs)
        if start == 0:
            tables.append(
                Text("两段文本中状态之间的余弦" if zh else "cosine between the contexts' states", style="italic")
            )
        one = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False)
        one.add_column("残差" if zh else "resid", justify="right", style="bold", no_wrap=True, min_width=5)
        for a, b in chunk:
            one.add_column(f"{letters[a]}·{letters[b]}", justify="right", no_wrap=True, min_width=7)
        if last:
            one.add_column("baseline", justify="right", style="dim", no_wrap=True)
        for layer in range(n_rows):
            cells = [cell(f"{pw[layer, a, b]:.3f}", pw[layer, a, b], 6, colour) for a, b in chunk]
            one.add_row(layer_name(layer), *cells, *([f"{base[layer]:.3f}"] if last else []))
        tables.append(one)
    fe, norms = traj.from_embedding, traj.norms  # [C, L+1]
    size = [f"{x:.0f}" if x >= 10 else f"{x:.1f}" for x in norms.ravel()]
    hw = max(3, max(cell_len(x) for x in size))
    tok_room = 8  # a token's text in "reads", before its percentage
    text_w = 6 + 1 + hw + 1 + tok_room + 5  # cos, |h|, reads ("token pct"), a space between
    per = max(1, (width - 5) // (text_w + 1))
    for start in range(0, c, per):
        group = range(start, min(c, start + per))
        if start == 0:
            tables.append(
                Text(
                    "每个末尾词元：与其嵌入的余弦、|h|、透镜读出"
                    if zh
                    else "each text's last token: cosine to its bare embedding, |h|, what the lens reads",
                    style="italic",
                )
            )
        two = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False)
        two.add_column("残差" if zh else "resid", justify="right", style="bold", no_wrap=True, min_width=5)
        for i in group:
            two.add_column(f"{letters[i]} cos", justify="right", no_wrap=True, min_width=6)
            two.add_column("|h|", justify="right", style="dim", no_wrap=True, min_width=hw)
            two.add_column(f"{letters[i]} reads", no_wrap=True)
        for layer in range(fe.shape[1]):
            row = []
            for i in group:
                name, p = reads[i][layer]
                n = norms[i, layer]
                row += [
                    cell(f"{fe[i, layer]:.3f}", fe[i, layer], 6, colour),
                    f"{n:.0f}" if n >= 10 else f"{n:.1f}",
                    f"{clip(name, tok_room)} {p:.0%}" if p >= 0.01 else f"{clip(name, tok_room)} <1%",
                ]
            two.add_row(layer_name(layer), *row)
        tables.append(two)
    return tables
