"""The experiments drawn: grids of signed values (patching, ablation, attribution, detectors).

A cell is a number, always: the number is the result, the colour only helps the eye. With colour,
its background runs from blue (negative) through the terminal's own background (0) to red
(positive), as far as the largest |value| of the grid; without colour (NO_COLOR, a pipe) the
number alone. Cells are 7 characters wide, so that 10 columns and their labels fit 80 columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.style import Style
from rich.text import Text

from .heatmap import clip

CELL = 7


def _style(value: float, top: float) -> Style:
    x = 0.0 if top <= 0 or not np.isfinite(value) else max(-1.0, min(1.0, value / top))
    a = abs(x)
    # From a dark grey towards red (positive) or blue (negative); white ink reads on all of them.
    base = np.array([48, 48, 48])
    end = np.array([200, 40, 40]) if x > 0 else np.array([40, 90, 210])
    rgb = (base + a * (end - base)).round().astype(int)
    return Style(bgcolor=Color.from_rgb(*rgb), color=Color.from_rgb(255, 255, 255))


def number(value: float, fmt: str) -> str:
    return "  nan" if not np.isfinite(value) else fmt.format(value)


def grid(row_labels: Sequence[str], col_labels: Sequence[str], values: np.ndarray, colour: bool, fmt: str = "{:+.2f}", top: float | None = None) -> Text:
    """values [R, C] as a table: one line of column labels, then a row label and C cells per row."""
    values = np.asarray(values, dtype=np.float64)
    top = float(np.nanmax(np.abs(values))) if top is None and values.size and np.isfinite(values).any() else (top or 0.0)
    lw = max([cell_len(s) for s in row_labels] + [3])
    t = Text(" " * (lw + 1))
    for c in col_labels:
        s = clip(c, CELL - 1)
        t.append(" " * (CELL - cell_len(s)) + s)
    t.append("\n")
    for label, row in zip(row_labels, values):
        t.append(" " * (lw - cell_len(label)) + label + " ")
        for v in row:
            s = number(v, fmt)
            s = " " * (CELL - len(s)) + s
            t.append(s, style=_style(v, top) if colour else None)
        t.append("\n")
    t.rstrip()
    return t


def ranked(items: list[tuple[str, float]], fmt: str = "{:+.3f}") -> str:
    return ", ".join(f"{name} {number(v, fmt).strip()}" for name, v in items)


def write_pictures(png, svg, heading: str, title: str, values01: np.ndarray, row_labels: list[str], col_labels: list[str]) -> None:
    """--png / --svg: the grid as one heatmap panel, values already mapped to [0, 1]."""
    from ..console import note
    from . import images

    panel = images.Panel(title, np.clip(np.nan_to_num(values01), 0.0, 1.0), np.ones(values01.shape, dtype=bool), row_labels, col_labels)
    images.check_size([[panel]], bool(png), bool(svg))
    fonts = images.fonts_or_none()
    if png and fonts is None:
        raise images.no_pillow()
    drawing = images.layout([[panel]], heading, measure=fonts.measure if fonts else images.estimate)
    for path, write in ((png, lambda p: images.write_png(p, drawing, fonts)), (svg, lambda p: images.write_svg(p, drawing))):
        if path:
            write(path)
            note(f"wrote {path} ({drawing.width}×{drawing.height} px)")
