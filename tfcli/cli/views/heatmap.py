"""Attention matrices drawn in a terminal with Rich: heatmaps, numbers, thumbnails, a legend.

A cell is two characters wide, so that it looks roughly square and a CJK character (two cells) fits
one column exactly. With colour, a cell's background follows viridis (perceptually even, readable for
colour-blind eyes, and dark-to-light so that it stands out on dark and light terminals alike); without
colour (NO_COLOR, a pipe, a file) the same weight is a shade character from ' ░▒▓█'. Masked cells
(the future: weight exactly 0) are a dim '·' in both, never a colour, so they cannot be mistaken for
a small weight. Column labels go across, one line above the columns, when every one fits its column;
otherwise they are written downwards, one character per line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.style import Style
from rich.text import Text

from tfcli.draw.scales import ink_on, viridis  # noqa: F401  (moved there: pictures need no terminal)

SHADES = "░▒▓█"
# Upper bounds of each shade; finer at the bottom because most weights of a long text are small.
SHADE_TOPS = (0.1, 0.3, 0.6, 1.0)
MASKED = "·"
ROW_LABEL_MAX = 12  # cells; longer labels end in '…'
COL_LABEL_MAX = 6  # lines


def _bg(rgb) -> Style:
    return Style(bgcolor=Color.from_rgb(*(int(c) for c in rgb)))


def shade(w: float) -> str:
    """A weight as a shade character: blank for exactly 0, then ░ ▒ ▓ █ up to SHADE_TOPS."""
    if w <= 0:
        return " "
    return next((c for c, top in zip(SHADES, SHADE_TOPS) if w <= top), SHADES[-1])


def uses_colour(console) -> bool:
    return console.color_system is not None and not console.no_color


def clip(label: str, width: int) -> str:
    """Cut a label to at most `width` terminal cells (a CJK character counts two), ending in '…'."""
    if cell_len(label) <= width:
        return label
    while label and cell_len(label) > width - 1:
        label = label[:-1]
    return label + "…"


def label_width(labels: Sequence[str]) -> int:
    return min(max((cell_len(s) for s in labels), default=0), ROW_LABEL_MAX)


def columns_that_fit(total_width: int, labels: Sequence[str], cell_width: int, extra: int = 0) -> int:
    """How many columns of `cell_width` fit beside the row labels (and an `extra` column) in total_width."""
    return max(1, (total_width - label_width(labels) - 1 - extra) // cell_width)


Cell = Callable[[int, int], tuple[str, Style | str | None]]


def column_header(col_labels: Sequence[str], cell_width: int) -> list[Text]:
    """The lines of column labels above a grid: one line across if every label fits its column
    (right-aligned over numbers, centred over cells), else each written downwards, ending just above it."""
    across = all(cell_len(label) <= cell_width for label in col_labels)
    columns = [[label] if across else column_glyphs(label) for label in col_labels]
    height = max((len(c) for c in columns), default=0)
    lines = []
    for line in range(height):
        text = Text(no_wrap=True, overflow="crop")
        for glyphs in columns:
            pad = height - len(glyphs)
            g = glyphs[line - pad] if line >= pad else ""
            gap = cell_width - cell_len(g)
            left = gap if across and cell_width > 2 else gap // 2
            text.append(" " * left + g + " " * (gap - left), style="bold")
        lines.append(text)
    return lines


def matrix(
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    cell_width: int,
    cell: Cell,
    row_end: Callable[[int], str] | None = None,
    end_title: str = "",
) -> Text:
    """A labelled grid: column labels on top (column_header), row labels on the left, cell(i, j)
    giving each cell's text (exactly cell_width wide) and style; row_end(i) an optional last column."""
    lw = label_width(row_labels)
    text = Text(no_wrap=True, overflow="crop")
    header = column_header(col_labels, cell_width)
    for k, line in enumerate(header):
        text.append(" " * (lw + 1))
        text.append_text(line)
        if row_end is not None and k == len(header) - 1:
            text.append(end_title, style="dim")
        text.append("\n")
    for i, label in enumerate(row_labels):
        text.append(row_label(label, lw), style="bold")
        for j in range(len(col_labels)):
            s, style = cell(i, j)
            text.append(s, style=style)
        if row_end is not None:
            text.append(row_end(i), style="dim")
        if i < len(row_labels) - 1:
            text.append("\n")
    return text


def row_label(label: str, width: int) -> str:
    """A row label right-aligned in `width` cells (cut with '…'), and the space after it."""
    shown = clip(label, width)
    return " " * (width - cell_len(shown)) + shown + " "


def column_glyphs(label: str) -> list[str]:
    """A column label as the characters written downwards, at most COL_LABEL_MAX of them."""
    chars = list(label) or [" "]
    return chars if len(chars) <= COL_LABEL_MAX else chars[: COL_LABEL_MAX - 1] + ["…"]


def heatmap(w: np.ndarray, allowed: np.ndarray, row_labels, col_labels, colour: bool) -> Text:
    """w [R, C] weights in [0, 1] as two-character cells; allowed [R, C] False where masked."""
    rgb = viridis(w)  # [R, C, 3]

    def cell(i: int, j: int):
        if not allowed[i, j]:
            return " " + MASKED, "dim"
        if colour:
            return "  ", _bg(rgb[i, j])
        return shade(w[i, j]) * 2, None

    return matrix(row_labels, col_labels, 2, cell)


def numbers(
    w: np.ndarray,
    allowed: np.ndarray,
    row_labels,
    col_labels,
    colour: bool,
    *,
    masked_as: str = "0",
    masked_style: str = "dim",
    fmt: str = "{:.2f}",
    row_sums: bool = True,
) -> Text:
    """w [R, C] as numbers, five characters a cell; masked cells show masked_as, dim.
    With colour the background is the heatmap's; row_sums adds a Σ column (each row's total)."""
    rgb = viridis(np.nan_to_num(w))  # [R, C, 3]

    def cell(i: int, j: int):
        if not allowed[i, j]:
            return f"{masked_as:>5}", masked_style
        s = f"{fmt.format(w[i, j]):>5}"
        if colour and np.isfinite(w[i, j]):
            bg = [int(c) for c in rgb[i, j]]
            return s, Style(bgcolor=Color.from_rgb(*bg), color=Color.from_rgb(*ink_on(bg)))
        return s, None

    row_end = (lambda i: f"{w[i][allowed[i]].sum():6.2f}") if row_sums else None
    return matrix(row_labels, col_labels, 5, cell, row_end, "     Σ")


def thumbnail(w: np.ndarray, allowed: np.ndarray, colour: bool, col_labels: Sequence[str] = ()) -> list[Text]:
    """w [R, C] as two-character cells, one Text per line: the column labels' lines (if given) then
    one per row (for grids of many heads; side_by_side puts the row labels on the left)."""
    rgb = viridis(w)  # [R, C, 3]
    lines = column_header(col_labels, 2) if len(col_labels) else []
    for i in range(w.shape[0]):
        line = Text(no_wrap=True)
        for j in range(w.shape[1]):
            if not allowed[i, j]:
                line.append(" " + MASKED, "dim")
            elif colour:
                line.append("  ", _bg(rgb[i, j]))
            else:
                line.append(shade(w[i, j]) * 2)
        lines.append(line)
    return lines


def side_by_side(
    panels: list[tuple[str, list[Text]]], cell_cols: int, gap: int = 3, row_labels: Sequence[str] = ()
) -> Text:
    """Panels (title, lines) of equal width cell_cols * 2 laid out in one row; row_labels, if given,
    on the left of the last len(row_labels) lines (the rows of cells under the column labels)."""
    width = cell_cols * 2
    lw = label_width(row_labels) + 1 if len(row_labels) else 0
    height = max(len(lines) for _, lines in panels)
    first_row = height - len(row_labels)
    text = Text(no_wrap=True, overflow="crop")
    text.append(" " * lw + (" " * gap).join(clip(title, width).ljust(width) for title, _ in panels), style="bold")
    for line in range(height):
        text.append("\n")
        if lw:
            text.append(
                row_label(row_labels[line - first_row], lw - 1) if line >= first_row else " " * lw, style="bold"
            )
        for k, (_, lines) in enumerate(panels):
            if k:
                text.append(" " * gap)
            text.append_text(lines[line] if line < len(lines) else Text(" " * width))
    return text


def legend(colour: bool, zh: bool = False) -> Text:
    """What the cells mean: a colour bar from 0 to 1 (or the shade steps), and the masked mark."""
    text = Text(no_wrap=True)
    weight = "权重" if zh else "weight"
    if colour:
        text.append(f"{weight} 0 ")
        for rgb in viridis(np.linspace(0, 1, 11)):
            text.append(" ", _bg(rgb))
        text.append(" 1")
    else:
        text.append(f"{weight} " + "  ".join(f"{c} ≤{top:g}".replace("0.", ".") for c, top in zip(SHADES, SHADE_TOPS)))
    text.append(
        f"    {MASKED} 被遮住（未来，恰好为 0）" if zh else f"    {MASKED} masked (the future, exactly 0)", style="dim"
    )
    return text
