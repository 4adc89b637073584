"""The colour scales of the pictures and the terminal's grids: viridis for weights in [0, 1], and
the signed scale (linear or symmetric log) of the experiments' grids."""

from __future__ import annotations

import numpy as np

# Viridis (van der Walt and Smith, matplotlib's default colour map) at 11 even steps; linear in between.
_VIRIDIS = [
    (0x44, 0x01, 0x54),
    (0x48, 0x24, 0x75),
    (0x41, 0x44, 0x87),
    (0x35, 0x5F, 0x8D),
    (0x2A, 0x78, 0x8E),
    (0x21, 0x91, 0x8C),
    (0x22, 0xA8, 0x84),
    (0x44, 0xBF, 0x70),
    (0x7A, 0xD1, 0x51),
    (0xBD, 0xDF, 0x26),
    (0xFD, 0xE7, 0x25),
]


def viridis(w) -> np.ndarray:
    """Weights in [0, 1], any shape [...] -> colours uint8 [..., 3]."""
    x = np.clip(np.asarray(w, dtype=np.float64), 0.0, 1.0)
    stops = np.linspace(0.0, 1.0, len(_VIRIDIS))
    table = np.array(_VIRIDIS, dtype=np.float64)  # [11, 3]
    return np.stack([np.interp(x, stops, table[:, k]) for k in range(3)], axis=-1).round().astype(np.uint8)


def ink_on(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black or white, whichever reads better on this background (relative luminance, ITU-R BT.709)."""
    r, g, b = rgb
    return (0, 0, 0) if 0.2126 * r + 0.7152 * g + 0.0722 * b > 140 else (255, 255, 255)


LOG_SPAN = 100.0  # the log scale's colours run from top/LOG_SPAN to top


def shade(value, top: float, log: bool = False):
    """value (a number or an array [...]) -> [-1, 1], the colour's sign and strength: value/top, or
    on the symmetric log scale sign(v) * log(1 + |v|/s) / log(1 + top/s) with s = top/LOG_SPAN.
    NaN and infinities get no colour (0). The terminal's cells and the pictures both use it."""
    v = np.asarray(value, dtype=np.float64)
    v = np.where(np.isfinite(v), v, 0.0)
    if top <= 0:
        x = np.zeros_like(v)
    elif log:
        x = np.sign(v) * np.log1p(np.abs(v) / (top / LOG_SPAN)) / np.log1p(LOG_SPAN)
    else:
        x = v / top
    x = np.clip(x, -1.0, 1.0)
    return float(x) if x.ndim == 0 else x


def top_of(values: np.ndarray) -> float:
    """The largest magnitude of the finite values (0 when there is none): a signed grid's scale."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.nanmax(np.abs(values))) if values.size and np.isfinite(values).any() else 0.0
