"""Attention heatmaps as PNG (Pillow) and SVG (plain text, no library), with token labels on both axes.

One layout serves both formats: `layout` turns panels into rectangles and text at pixel positions,
and each writer only paints them. Text widths are estimated from character classes rather than
measured with a font, so the SVG needs no font file and both images get the same geometry.
Pillow is optional (`pip install 'tfcli[images]'`); a PNG of CJK labels needs a font with CJK glyphs.
"""

from __future__ import annotations

import math
import os
import subprocess
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from tfcli.engine.errors import TfcliError

from .heatmap import ROW_LABEL_MAX, clip, column_glyphs, viridis

WHITE = (255, 255, 255)
INK = (40, 40, 40)
MASKED_FILL = (232, 232, 232)  # light grey: clearly not a colour of the scale
PAD = 14
GAP = 22  # between panels
BAR_WIDTH = 14
MASKED_LABEL = "0 (masked)"

# Fonts with CJK glyphs where the usual packages put them (Debian/Ubuntu, Fedora, Arch, macOS, Windows);
# the number is the face inside a .ttc collection (Noto Sans CJK: 0 JP, 1 KR, 2 SC, 3 TC).
CJK_FONTS = [
    ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2),
    ("/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc", 2),
    ("/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc", 2),
    ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0),
    ("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc", 0),
    ("/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf", 0),
    ("/usr/share/fonts/truetype/arphic/uming.ttc", 0),
    ("/System/Library/Fonts/PingFang.ttc", 0),
    ("/System/Library/Fonts/STHeiti Light.ttc", 0),
    ("C:/Windows/Fonts/msyh.ttc", 0),
]
LATIN_FONTS = [
    ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 0),
    ("/usr/share/fonts/dejavu/DejaVuSans.ttf", 0),
    ("/System/Library/Fonts/Helvetica.ttc", 0),
    ("C:/Windows/Fonts/arial.ttf", 0),
]
SVG_FONTS = "'Noto Sans CJK SC', 'Source Han Sans SC', 'WenQuanYi Micro Hei', 'PingFang SC', 'Microsoft YaHei', 'DejaVu Sans', sans-serif"
INSTALL_HINT = "install one (Debian/Ubuntu: apt install fonts-noto-cjk) or set TFCLI_FONT to a .ttf/.otf/.ttc file that has them"


@dataclass
class Panel:
    """One heatmap: weights [R, C] in [0, 1], allowed [R, C] False where masked, and its labels."""

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
    texts: list[tuple[float, float, str, int, str, tuple]] = field(default_factory=list)  # x, y, text, size, anchor, rgb
    grids: list[tuple[int, int, int]] = field(default_factory=list)  # each panel's cells: x0, y0, cell size

    def text(self, x, y, s, size, anchor="lm", rgb=INK):
        self.texts.append((x, y, s, size, anchor, rgb))


def wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in "WF"


def needs_cjk_font(strings) -> bool:
    return any(wide(ch) for s in strings for ch in s)


def _text_width(s: str, size: int) -> float:
    return sum(size if wide(ch) else 0.62 * size for ch in s)


def layout(grid: list[list[Panel]], heading: str, labels: bool = True) -> Drawing:
    """Panels in rows and columns, each with its title, row labels on the left and column labels
    written downwards on top, plus a heading and a colour bar; labels=False leaves the label
    margins empty (the tests compare the two)."""
    panels = [p for row in grid for p in row]
    n = max(p.weights.shape[1] for p in panels)
    budget = 560 if len(panels) == 1 else 300  # pixels for the side of one heatmap
    cell = min(max(round(budget / n), 3), 36)
    size = min(max(round(cell * 0.62), 9), 16)
    line = round(size * 1.2)
    every = math.ceil(size * 1.15 / cell)  # label every k-th token when cells are smaller than the text
    row_text = max(_text_width(clip(s, ROW_LABEL_MAX), size) for p in panels for s in p.row_labels)
    col_lines = max(len(column_glyphs(s)) for p in panels for s in p.col_labels)
    left = math.ceil(row_text) + 8
    title_h = round(size * 1.8)
    top = title_h + col_lines * line + 6
    pw = left + max(p.weights.shape[1] for p in panels) * cell  # one panel's box
    ph = top + max(p.weights.shape[0] for p in panels) * cell
    heading_size = size + 3
    heading_h = round(heading_size * 2)
    ncols = max(len(row) for row in grid)
    bar_x = PAD + ncols * pw + (ncols - 1) * GAP + GAP
    width = max(bar_x + BAR_WIDTH + 4 + math.ceil(_text_width(MASKED_LABEL, size)) + PAD, 2 * PAD + math.ceil(_text_width(heading, heading_size)))
    by = PAD + heading_h + top  # the colour bar: beside the first row of cells, then the masked swatch
    bh = max(60, min(ph - top, 240))
    height = max(PAD + heading_h + len(grid) * ph + (len(grid) - 1) * GAP, by + bh + 8 + BAR_WIDTH) + PAD
    d = Drawing(int(width), int(height))
    d.text(PAD, PAD + heading_h / 2, heading, heading_size)

    for r, row in enumerate(grid):
        for c, p in enumerate(row):
            px, py = PAD + c * (pw + GAP), PAD + heading_h + r * (ph + GAP)
            x0, y0 = px + left, py + top
            d.grids.append((x0, y0, cell))
            d.text(x0, py + title_h / 2, p.title, size)
            rgb = np.where(p.allowed[..., None], viridis(p.weights), np.array(MASKED_FILL, dtype=np.uint8))  # [R, C, 3]
            d.bitmaps.append((x0, y0, cell, cell, rgb))
            if not labels:
                continue
            for i, s in enumerate(p.row_labels):
                if i % every == 0:
                    d.text(x0 - 5, y0 + i * cell + cell / 2, clip(s, ROW_LABEL_MAX), size, "rm")
            for j, s in enumerate(p.col_labels):
                if j % every:
                    continue
                glyphs = column_glyphs(s)
                for k, g in enumerate(glyphs):  # written downwards, ending just above the column
                    y = y0 - 4 - (len(glyphs) - k) * line + line / 2
                    d.text(x0 + j * cell + cell / 2, y, g, size, "mm")

    # The colour bar: 1 at the top, 0 at the bottom.
    d.bitmaps.append((bar_x, by, BAR_WIDTH, 1, viridis(np.linspace(1, 0, bh))[:, None]))  # [bh, 1, 3]
    for v in (1, 0.5, 0):
        d.text(bar_x + BAR_WIDTH + 4, by + (1 - v) * (bh - 1), f"{v:g}", size)
    d.bitmaps.append((bar_x, by + bh + 8, BAR_WIDTH, BAR_WIDTH, np.array([[MASKED_FILL]], dtype=np.uint8)))
    d.text(bar_x + BAR_WIDTH + 4, by + bh + 8 + BAR_WIDTH / 2, MASKED_LABEL, size)
    return d


# --- PNG --------------------------------------------------------------------------------------


def write_png(path: Path, drawing: Drawing, font: tuple[str, int] | None) -> None:
    """Paint a drawing with Pillow; font is (file, face index), or None for Pillow's own font."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        raise TfcliError("writing a PNG needs Pillow, which is not installed", "pip install 'tfcli[images]', or write --svg instead") from None
    fonts: dict[int, object] = {}

    def face(size: int):
        if size not in fonts:
            try:
                fonts[size] = ImageFont.truetype(font[0], size, index=font[1]) if font else ImageFont.load_default(size)
            except OSError as e:
                raise TfcliError(f"cannot open the font {font[0]} (face {font[1]}): {e}", "set TFCLI_FONT to a .ttf, .otf or .ttc font file") from None
        return fonts[size]

    img = Image.new("RGB", (drawing.width, drawing.height), WHITE)
    for x, y, cw, ch, rgb in drawing.bitmaps:
        block = Image.fromarray(np.ascontiguousarray(rgb), "RGB")
        img.paste(block.resize((rgb.shape[1] * cw, rgb.shape[0] * ch), Image.Resampling.NEAREST), (x, y))
    draw = ImageDraw.Draw(img)
    for x, y, s, size, anchor, rgb in drawing.texts:
        draw.text((x, y), s, fill=rgb, font=face(size), anchor=anchor)
    _write(path, lambda f: img.save(f, format="PNG"))


def find_font(need_cjk: bool) -> tuple[str, int] | None:
    """The font for a PNG: $TFCLI_FONT, else a CJK font (fontconfig, then the usual paths), else,
    when no CJK glyph is needed, a Latin font or None (Pillow's own). A one-line error otherwise."""
    env = os.environ.get("TFCLI_FONT")
    if env:
        path, index = env, 0
        head, _, tail = env.rpartition(":")
        if head and tail.isdigit():  # file.ttc:2 picks a face of a collection
            path, index = head, int(tail)
        if not Path(path).is_file():
            raise TfcliError(f"TFCLI_FONT={env} is not a file", "point it at a .ttf, .otf or .ttc font file")
        return path, index
    found = _fontconfig_cjk() or next(((p, i) for p, i in CJK_FONTS if Path(p).is_file()), None)
    if found:
        return found
    if need_cjk:
        raise TfcliError("no font with CJK glyphs found for the PNG labels", INSTALL_HINT)
    return next(((p, i) for p, i in LATIN_FONTS if Path(p).is_file()), None)


def _fontconfig_cjk() -> tuple[str, int] | None:
    """fontconfig's best sans-serif face for Simplified Chinese, if it really covers Chinese."""
    try:
        best = subprocess.run(["fc-match", "-f", "%{file}\n%{index}", "sans:lang=zh-cn"], capture_output=True, text=True, timeout=10)
        zh = subprocess.run(["fc-list", ":lang=zh-cn", "file"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    path, _, index = best.stdout.partition("\n")
    covering = {line.rstrip().rstrip(":") for line in zh.stdout.splitlines()}
    if path and path in covering and Path(path).is_file():
        return path, int(index) if index.strip().isdigit() else 0
    return None


# --- SVG --------------------------------------------------------------------------------------

_ANCHOR = {"l": "start", "m": "middle", "r": "end"}


def write_svg(path: Path, drawing: Drawing) -> None:
    """SVG text: one <rect> per cell, one <text> per label; the viewer picks a font from SVG_FONTS."""
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{drawing.width}" height="{drawing.height}" '
        f'viewBox="0 0 {drawing.width} {drawing.height}" font-family={quoteattr(SVG_FONTS)}>',
        f'<rect x="0" y="0" width="{drawing.width}" height="{drawing.height}" fill="{_hex(WHITE)}"/>',
        '<g shape-rendering="crispEdges">',
    ]
    for x, y, cw, ch, rgb in drawing.bitmaps:
        for i, j in np.ndindex(rgb.shape[:2]):
            parts.append(f'<rect x="{x + j * cw}" y="{y + i * ch}" width="{cw}" height="{ch}" fill="{_hex(rgb[i, j])}"/>')
    parts.append("</g>")
    for x, y, s, size, anchor, rgb in drawing.texts:
        parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{_ANCHOR[anchor[0]]}" '
            f'dominant-baseline="central" fill="{_hex(rgb)}">{escape(s)}</text>'
        )
    parts.append("</svg>\n")
    _write(path, lambda f: f.write("\n".join(parts).encode("utf-8")))


def _hex(rgb) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(c) for c in rgb))


def _write(path: Path, save) -> None:
    try:
        with open(path, "wb") as f:
            save(f)
    except OSError as e:
        raise TfcliError(f"cannot write {path}: {e.strerror or e}") from None
