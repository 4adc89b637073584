"""Shared by the commands that look inside a model (lens, embed, neurons, geometry): the language of
the explanations, how a token is shown, and a value drawn as a coloured cell. Drawing only."""

from __future__ import annotations

from rich.cells import cell_len
from rich.color import Color
from rich.style import Style
from rich.text import Text

from .heatmap import clip, ink_on, uses_colour, viridis  # noqa: F401  (uses_colour: for the views)
from .prose import chinese, chinese_markup, wrap_chinese  # noqa: F401  (for the views)
from tfcli.draw.labels import token_str  # noqa: F401  (moved there: the pictures need no terminal)


def say(console, zh: bool, en: str, cn: str) -> None:
    """A few plain sentences of explanation, in Chinese with --lang zh."""
    if zh:
        chinese(console, cn, "dim")
    else:
        console.print(f"[dim]{en}[/]", soft_wrap=False)


def cell(text: str, value: float, width: int, colour: bool, lo: float = 0.0, hi: float = 1.0) -> Text:
    """`text` cut to `width` cells on a background coloured by value in [lo, hi] (viridis); without
    colour the text alone (the caller shows the number beside it)."""
    s = clip(text, width)
    s = s + " " * (width - cell_len(s))
    if not colour:
        return Text(s)
    x = 0.0 if hi == lo else (float(value) - lo) / (hi - lo)
    bg = tuple(int(c) for c in viridis(x))
    return Text(s, style=Style(bgcolor=Color.from_rgb(*bg), color=Color.from_rgb(*ink_on(bg))))


def bar(value: float, top: float, width: int) -> str:
    """A horizontal bar of eighths: value / top of `width` characters (negative values: empty)."""
    if top <= 0 or value <= 0:
        return ""
    eighths = round(min(value / top, 1.0) * width * 8)
    return "█" * (eighths // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[eighths % 8]


