"""Loss curves: a few lines of text for the terminal, and a PNG (Pillow) for a page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Series:
    label: str
    steps: list[int]  # x: the step after which each value was measured
    values: list[float]
    colour: tuple[int, int, int] = (31, 119, 180)
    mark: str = "·"  # its character in the terminal chart


def smoothed(losses: list[float], window: int = 10) -> Series:
    """The training loss of every step, as running means of `window` steps (one batch is noisy)."""
    v = np.asarray(losses, dtype=np.float64)
    if len(v) >= window:
        v = np.convolve(v, np.ones(window) / window, mode="valid")
        return Series("train", list(range(window, window + len(v))), v.tolist())
    return Series("train", list(range(1, len(v) + 1)), v.tolist())


def text_chart(series: list[Series], width: int = 60, height: int = 12) -> list[str]:
    """The series on a grid of characters, loss upwards, steps to the right, with the axes' values."""
    points = [(s, x, y) for s in series for x, y in zip(s.steps, s.values) if np.isfinite(y)]
    if not points:
        return []
    xs, ys = [p[1] for p in points], [p[2] for p in points]
    x0, x1, y0, y1 = min(xs), max(max(xs), min(xs) + 1), min(ys), max(max(ys), min(ys) + 1e-6)
    grid = [[" "] * width for _ in range(height)]
    for s, x, y in points:
        col = round((x - x0) / (x1 - x0) * (width - 1))
        row = round((y1 - y) / (y1 - y0) * (height - 1))
        if grid[row][col] == " " or s.mark != "·":  # the sparse marks (validation) stay on top
            grid[row][col] = s.mark
    label = [f"{y1:7.3f} ┤", *(["        │"] * (height - 2)), f"{y0:7.3f} ┤"]
    lines = [label[i] + "".join(r) for i, r in enumerate(grid)]
    lines.append("        └" + "─" * width)
    lines.append(f"         step {x0:<{width - 18},}step {x1:,}")
    lines.append("         " + "   ".join(f"{s.mark} {s.label}" for s in series))
    return lines


def write_png(path: Path, series: list[Series], title: str, size: tuple[int, int] = (720, 420)) -> None:
    """The series as lines on one chart, with a legend and the axes' ranges, written to `path`."""
    from PIL import Image, ImageDraw

    w, h = size
    left, right, top, bottom = 64, 16, 40, 40
    img = Image.new("RGB", size, (255, 255, 255))
    d = ImageDraw.Draw(img)
    xs = [x for s in series for x in s.steps]
    ys = [y for s in series for y in s.values if np.isfinite(y)]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(0.0, min(ys)), max(ys) * 1.05

    def at(x: float, y: float) -> tuple[float, float]:
        return left + (x - x0) / (x1 - x0) * (w - left - right), top + (y1 - y) / (y1 - y0) * (h - top - bottom)

    ink = (40, 40, 40)
    d.line([at(x0, y0), at(x1, y0)], fill=ink)
    d.line([at(x0, y0), at(x0, y1)], fill=ink)
    for k in range(6):
        y = y0 + (y1 - y0) * k / 5
        px, py = at(x0, y)
        d.line([(px - 4, py), (px, py)], fill=ink)
        d.text((6, py - 6), f"{y:.2f}", fill=ink)
        d.line([(left + 1, py), (w - right, py)], fill=(235, 235, 235))
    d.text((left, h - bottom + 8), f"step {x0:,}", fill=ink)
    end = f"step {x1:,}"  # its right edge under the curve's last point, where the axis ends
    d.text((at(x1, y0)[0] - d.textlength(end), h - bottom + 8), end, fill=ink)
    d.text((left, 10), title, fill=ink)
    for i, s in enumerate(series):
        pts = [at(x, y) for x, y in zip(s.steps, s.values) if np.isfinite(y)]
        if len(pts) > 1:
            d.line(pts, fill=s.colour, width=2)
        for px, py in pts if len(pts) < 40 else []:
            d.ellipse([px - 3, py - 3, px + 3, py + 3], fill=s.colour)
        lx, ly = w - right - 250, top + 8 + 16 * i
        d.line([(lx, ly + 6), (lx + 24, ly + 6)], fill=s.colour, width=3)
        d.text((lx + 30, ly), s.label, fill=ink)
    img.save(path, format="PNG", optimize=True)
