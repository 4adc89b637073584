"""Attention heatmaps as PNG (Pillow) and SVG (plain text, no library), with token labels on both axes.

One layout serves both formats: `layout` turns panels into rectangles and text at pixel positions,
and each writer only paints them. Text is measured with the fonts the PNG is drawn with (`Fonts`), so
that labels get the room they need; the SVG names the same font first and gets the same geometry.

Fonts, in this order: $TFCLI_FONT; the subset of Noto Sans CJK shipped in tfcli/fonts/ (the
characters of the shipped models' vocabularies, ASCII and the label marks: tools/make_font.py);
then the system's CJK and Latin fonts. Each text is drawn with the first font that has all its
characters, so a character outside the subset still finds a system font.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfcli.engine.errors import TfcliError

from .escape import unicode_safe, xml
from .fonts import Fonts, estimate, needs_cjk_font
from .scales import shade, viridis

Measure = Callable[[str, int], float]  # (text, font size) -> width in pixels

WHITE = (255, 255, 255)
INK = (40, 40, 40)
MASKED_FILL = (232, 232, 232)  # light grey: clearly not a colour of the scale
PAD = 14
GAP = 22  # between panels
BAR_WIDTH = 14
MASKED_LABEL = "0 (masked)"
# A signed scale (patching, ablation): blue below 0, white at 0, red above, as the terminal's grids.
NEGATIVE, ZERO, POSITIVE = (40, 90, 210), (247, 247, 247), (200, 40, 40)


def diverging(v) -> np.ndarray:
    """Values in [-1, 1], any shape [...] -> colours uint8 [..., 3]: blue (-1), white (0), red (+1)."""
    x = np.clip(np.asarray(v, dtype=np.float64), -1.0, 1.0)[..., None]  # [..., 1]
    zero, neg, pos = (np.array(c, dtype=np.float64) for c in (ZERO, NEGATIVE, POSITIVE))
    return np.where(x < 0, zero + -x * (neg - zero), zero + x * (pos - zero)).round().astype(np.uint8)

SVG_FONTS = ("'tfcli CJK Subset', 'Noto Sans CJK SC', 'Source Han Sans SC', 'WenQuanYi Micro Hei', 'PingFang SC', "
             "'Microsoft YaHei', 'DejaVu Sans', sans-serif")
ROW_LABEL_EMS = 10  # the longest row label, in font sizes; longer ones end in '…'
COL_LABEL_EMS = 10  # the same for the column labels, written upwards when they do not fit across


@dataclass(frozen=True)
class Signed:
    """A signed colour bar (patching, ablation): its labels as (place in [-1, 1], text), from the
    top down, and a caption under the bar naming the scale ('linear scale', 'log scale')."""

    ticks: tuple[tuple[float, str], ...]
    caption: str = ""

    @classmethod
    def linear(cls, top: float, caption: str = "") -> Signed:
        return cls(((1.0, f"+{top:.2f}"), (0.0, "0"), (-1.0, f"-{top:.2f}")), caption)


@dataclass
class Panel:
    """One heatmap: weights [R, C] in [0, 1] (or in [-1, 1] on a signed scale: layout's `signed`),
    allowed [R, C] False where masked, and its labels."""

    title: str
    weights: np.ndarray
    allowed: np.ndarray
    row_labels: list[str]
    col_labels: list[str]


@dataclass
class Drawing:
    width: int
    height: int
    # Blocks of coloured cells: x, y, cell width, cell height (px), colours uint8 [R, C, 3].
    bitmaps: list[tuple[int, int, int, int, np.ndarray]] = field(default_factory=list)
    # x, y, text, size, anchor, rgb, upright; anchor as Pillow's ("lm": left, middle); upright=False turns
    # the text a quarter to the left about (x, y), so that it reads upwards from there.
    texts: list[tuple[float, float, str, int, str, tuple, bool]] = field(default_factory=list)
    grids: list[tuple[int, int, int]] = field(default_factory=list)  # each panel's cells: x0, y0, cell size

    def text(self, x, y, s, size, anchor="lm", rgb=INK, upright=True):
        self.texts.append((x, y, unicode_safe(s), size, anchor, rgb, upright))  # a name's undecodable bytes as \xff


def clip_px(s: str, size: int, max_px: float, measure: Measure) -> str:
    """Cut a label to at most max_px pixels, ending in '…'."""
    if measure(s, size) <= max_px:
        return s
    while s and measure(s + "…", size) > max_px:
        s = s[:-1]
    return s + "…"


def picture_scale(top: float, log: bool, zh: bool = False):
    """The colour bar of a picture drawn on `shade`'s scale: ±top and 0, on the log scale ±top/10
    too (halfway up each side: the scale gives each tenfold step the same length), and a caption
    that names the scale."""
    if not log:
        return Signed.linear(top, "线性刻度" if zh else "linear scale")
    tick = lambda v: f"{v:+.2f}" if abs(v) >= 0.1 else f"{v:+.2g}"  # noqa: E731
    values = (top, top / 10, 0.0, -top / 10, -top)
    ticks = tuple((shade(v, top, True), "0" if v == 0 else tick(v)) for v in values)
    return Signed(ticks, "对数刻度" if zh else "log scale")


MAX_PNG_CELLS = 40_000_000  # a 12,288-pixel square of 3-pixel cells is 16.8 M cells, 450 MB as RGB
MAX_SVG_CELLS = 2_000_000  # one <rect> each: about 150 MB of text


def check_size(grid: list[list[Panel]], png: bool, svg: bool) -> None:
    """A one-line error before drawing a picture that would not fit in memory (or in a viewer)."""
    from tfcli.engine.errors import PromptError

    cells = sum(p.weights.size for row in grid for p in row)
    for wanted, limit, flag in ((png, MAX_PNG_CELLS, "--png"), (svg, MAX_SVG_CELLS, "--svg")):
        if wanted and cells > limit:
            raise PromptError(
                f"{flag} would draw {cells:,} cells, more than {limit:,}",
                "use a shorter text, or draw fewer blocks and heads",
            )


def no_pillow() -> TfcliError:
    return TfcliError(
        "writing a PNG needs Pillow, which is not installed",
        "pip install pillow (a dependency of tfcli), or write --svg instead",
    )


def fonts_or_none() -> Fonts | None:
    """The fonts to measure and draw with; None without Pillow (an SVG is then measured by estimate)."""
    try:
        return Fonts()
    except ImportError:
        return None


def layout(
    grid: list[list[Panel]],
    heading: str,
    labels: bool = True,
    measure: Measure | None = None,
    signed: float | Signed | None = None,
) -> Drawing:
    """Panels in rows and columns, each with its title, row labels on the left and column labels
    on top (across when every one fits its column, else written upwards), plus a heading and a
    colour bar. Text is measured with `measure` (default: the PNG's fonts); labels=False leaves the
    label margins empty (the tests compare the two).

    The colour bar says the scale the cells are drawn on: weights from 0 to 1 in viridis, or with
    `signed` values in [-1, 1] from blue through white to red, labelled as `signed` says (a
    number: -signed, 0, +signed on a linear scale), its caption under it. The masked swatch is
    drawn only when a cell is masked."""
    if isinstance(signed, (int, float)):
        signed = Signed.linear(float(signed))
    if measure is None:
        fonts = fonts_or_none()
        measure = fonts.measure if fonts else estimate
    panels = [p for row in grid for p in row]
    n = max(p.weights.shape[1] for p in panels)
    budget = 560 if len(panels) == 1 else 300  # pixels for the side of one heatmap
    cell = min(max(round(budget / n), 3), 36)
    size = min(max(round(cell * 0.62), 9), 16)
    line = round(size * 1.2)
    every = math.ceil(size * 1.15 / cell)  # label every k-th token when cells are smaller than the text
    rows = {s: clip_px(s, size, ROW_LABEL_EMS * size, measure) for p in panels for s in p.row_labels}
    cols = {s: clip_px(s, size, COL_LABEL_EMS * size, measure) for p in panels for s in p.col_labels}
    col_px = {s: measure(t, size) for s, t in cols.items()}
    across = all(w <= cell - 2 for w in col_px.values())
    left = math.ceil(max(measure(t, size) for t in rows.values())) + 8
    title_h = round(size * 1.8)
    top = title_h + (line if across else math.ceil(max(col_px.values()))) + 6
    pw = left + max(p.weights.shape[1] for p in panels) * cell  # one panel's box
    ph = top + max(p.weights.shape[0] for p in panels) * cell
    heading_size = size + 3
    heading_h = round(heading_size * 2)
    ncols = max(len(row) for row in grid)
    bar_x = PAD + ncols * pw + (ncols - 1) * GAP + GAP
    bar = _bar_labels(signed)
    masked = not all(p.allowed.all() for p in panels)
    caption = signed.caption if signed is not None else ""
    bar_text = [t for _, t in bar] + ([MASKED_LABEL] if masked else [])
    width = max(bar_x + BAR_WIDTH + 4 + max(math.ceil(measure(t, size)) for t in bar_text) + PAD,
                2 * PAD + math.ceil(measure(heading, heading_size)),
                bar_x + math.ceil(measure(caption, size)) + PAD)  # fmt: skip
    by = PAD + heading_h + top  # the colour bar: beside the first row of cells, its caption, then the masked swatch
    bh = max(60, min(ph - top, 240))
    below = (line + 8 if caption else 0) + (8 + BAR_WIDTH if masked else 0)
    height = max(PAD + heading_h + len(grid) * ph + (len(grid) - 1) * GAP, by + bh + below) + PAD
    d = Drawing(int(width), int(height))
    d.text(PAD, PAD + heading_h / 2, heading, heading_size)

    for r, row in enumerate(grid):
        for c, p in enumerate(row):
            px, py = PAD + c * (pw + GAP), PAD + heading_h + r * (ph + GAP)
            d.text(px + left, py + title_h / 2, p.title, size)
            corner = (px + left, py + top)  # of the panel's cells
            _draw_panel(d, p, corner, cell, signed is not None)
            if labels:
                _draw_labels(d, p, corner, cell, size, every, (rows, cols, across, line))
    _draw_colour_bar(d, (bar_x, by), bh, (size, line), signed, masked)
    return d


def _bar_labels(signed: Signed | None) -> list[tuple[float, str]]:
    """The colour bar's labels, each with its place from the top (0) to the bottom (1)."""
    if signed is None:
        return [(0.0, "1"), (0.5, "0.5"), (1.0, "0")]
    return [((1.0 - x) / 2, t) for x, t in signed.ticks]


def _draw_panel(d: Drawing, p: Panel, at: tuple[float, float], cell: int, signed: bool = False) -> None:
    """One panel's cells, its top-left corner at `at`: the weights in viridis (signed values in
    blue, white and red), the masked in grey."""
    x0, y0 = at
    d.grids.append((x0, y0, cell))
    colours = diverging(p.weights) if signed else viridis(p.weights)
    rgb = np.where(p.allowed[..., None], colours, np.array(MASKED_FILL, dtype=np.uint8))  # [R, C, 3]
    d.bitmaps.append((x0, y0, cell, cell, rgb))


def _draw_labels(d: Drawing, p: Panel, at: tuple[float, float], cell: int, size: int, every: int, placed) -> None:
    """Every `every`-th row label on the left and column label on top. placed: (rows, cols, across,
    line) from layout(): each label's clipped text, whether the column labels go across (else
    upwards), and their line height."""
    (x0, y0), (rows, cols, across, line) = at, placed
    for i, s in enumerate(p.row_labels):
        if i % every == 0:
            d.text(x0 - 5, y0 + i * cell + cell / 2, rows[s], size, "rm")
    for j, s in enumerate(p.col_labels):
        if j % every == 0:
            x = x0 + j * cell + cell / 2
            if across:
                d.text(x, y0 - 4 - line / 2, cols[s], size, "mm")
            else:  # upwards from just above its column
                d.text(x, y0 - 4, cols[s], size, "lm", upright=False)


def _draw_colour_bar(
    d: Drawing, at: tuple[float, float], bh: int, text: tuple[int, int], signed: Signed | None, masked: bool
) -> None:
    """The colour bar, its top value at the top, with its labels (_bar_labels) and, on a signed
    scale, the caption naming the scale under it; then, if a cell is masked, the masked swatch."""
    (bar_x, by), (size, line) = at, text
    colours = viridis(np.linspace(1, 0, bh)) if signed is None else diverging(np.linspace(1, -1, bh))
    d.bitmaps.append((bar_x, by, BAR_WIDTH, 1, colours[:, None]))  # [bh, 1, 3]
    for where, label in _bar_labels(signed):
        d.text(bar_x + BAR_WIDTH + 4, by + where * (bh - 1), label, size)
    y = by + bh
    if signed is not None and signed.caption:
        d.text(bar_x, y + 8 + line / 2, signed.caption, size)
        y += line + 8
    if masked:
        d.bitmaps.append((bar_x, y + 8, BAR_WIDTH, BAR_WIDTH, np.array([[MASKED_FILL]], dtype=np.uint8)))
        d.text(bar_x + BAR_WIDTH + 4, y + 8 + BAR_WIDTH / 2, MASKED_LABEL, size)


# --- PNG --------------------------------------------------------------------------------------


def write_png(path: Path, drawing: Drawing, fonts: Fonts | None) -> None:
    """Paint a drawing with Pillow, each text in the first of `fonts` that has its characters."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise no_pillow() from None
    fonts = fonts or Fonts()
    if not fonts.files and needs_cjk_font(t[2] for t in drawing.texts):
        from .fonts import INSTALL_HINT

        raise TfcliError("no font with CJK glyphs found for the PNG labels", INSTALL_HINT)
    img = Image.new("RGB", (drawing.width, drawing.height), WHITE)
    for x, y, cw, ch, rgb in drawing.bitmaps:
        block = Image.fromarray(np.ascontiguousarray(rgb), "RGB")
        img.paste(block.resize((rgb.shape[1] * cw, rgb.shape[0] * ch), Image.Resampling.NEAREST), (x, y))
    draw = ImageDraw.Draw(img)
    for x, y, s, size, anchor, rgb, upright in drawing.texts:
        face = fonts.face(s, size)
        if upright:
            draw.text((x, y), s, fill=rgb, font=face, anchor=anchor)
            continue
        # Drawn level on its own mask, turned a quarter to the left, pasted so that the anchor lands on (x, y).
        l, t, r, b = face.getbbox(s, anchor=anchor)  # relative to the anchor
        mask = Image.new("L", (max(1, math.ceil(r - l)), max(1, math.ceil(b - t))), 0)
        ImageDraw.Draw(mask).text((-l, -t), s, fill=255, font=face, anchor=anchor)
        turned = mask.transpose(Image.Transpose.ROTATE_90)  # (u, v) -> (v, W - 1 - u): the anchor goes to (-t, W + l)
        img.paste(Image.new("RGB", turned.size, rgb), (round(x + t), round(y - mask.width - l)), turned)
    _write(path, lambda f: img.save(f, format="PNG"))


# --- SVG --------------------------------------------------------------------------------------

_ANCHOR = {"l": "start", "m": "middle", "r": "end"}


def write_svg(path: Path, drawing: Drawing) -> None:
    """The drawing as an SVG file (svg_text)."""
    text = '<?xml version="1.0" encoding="UTF-8"?>\n' + svg_text(drawing)
    _write(path, lambda f: f.write(text.encode("utf-8")))


def svg_text(drawing: Drawing) -> str:
    """SVG text: one <rect> per cell, one <text> per label; the viewer picks a font from SVG_FONTS.
    Without the XML declaration: the text may go inline in an HTML page (the Python API's views)."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{drawing.width}" height="{drawing.height}" '
        f'viewBox="0 0 {drawing.width} {drawing.height}" font-family="{xml(SVG_FONTS)}">',
        f'<rect x="0" y="0" width="{drawing.width}" height="{drawing.height}" fill="{_hex(WHITE)}"/>',
        '<g shape-rendering="crispEdges">',
    ]
    for x, y, cw, ch, rgb in drawing.bitmaps:
        for i, j in np.ndindex(rgb.shape[:2]):
            parts.append(
                f'<rect x="{x + j * cw}" y="{y + i * ch}" width="{cw}" height="{ch}" fill="{_hex(rgb[i, j])}"/>'
            )
    parts.append("</g>")
    for x, y, s, size, anchor, rgb, upright in drawing.texts:
        turn = "" if upright else f' transform="rotate(-90 {x:.1f} {y:.1f})"'
        parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{_ANCHOR[anchor[0]]}" '
            f'dominant-baseline="central" fill="{_hex(rgb)}"{turn}>{xml(s)}</text>'
        )
    parts.append("</svg>\n")
    return "\n".join(parts)


def _hex(rgb) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(c) for c in rgb))


def _write(path: Path, save) -> None:
    from tfcli.output import save as save_output  # only when a file is written: the views' HTML needs none

    save_output(path, save)  # a whole new file renamed over the old, or a pipe/device as a stream
