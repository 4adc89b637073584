"""Shared by the commands that look inside a model (lens, embed, neurons, geometry): the language of
the explanations, how a token is shown, and a value drawn as a coloured cell. Drawing only."""

from __future__ import annotations

from rich.cells import cell_len
from rich.color import Color
from rich.style import Style
from rich.text import Text

from .heatmap import clip, ink_on, uses_colour, viridis  # noqa: F401  (uses_colour: for the views)


def say(console, zh: bool, en: str, cn: str) -> None:
    """A few plain sentences of explanation, in Chinese with --lang zh."""
    if zh:
        chinese(console, cn, "dim")
    else:
        console.print(f"[dim]{en}[/]", soft_wrap=False)


# Chinese is broken between any two characters, but a formula or a number inside it ("D → Dh",
# "1 ± 0.1", "softmax(unembed(final_norm(h)))") is one unit: Rich breaks at its spaces instead.
_CJK = "\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_NO_START = set("，。、；：！？）》」』】”’·…")  # punctuation that never begins a line (kinsoku)
_NO_END = set("（《「『【“‘")  # nor ends one


def wrap_chinese(text: str, width: int) -> list[str]:
    """Chinese text in lines of at most `width` cells, broken between Chinese characters, never
    inside a run of other characters (a formula, a number, a name) unless it alone is too long."""
    import re

    units = re.findall(f"[{_CJK}]|[^{_CJK}]+", text)
    merged: list[str] = []
    for u in units:  # closing punctuation sticks to what is before it, opening to what is after
        if merged and (u[0] in _NO_START or merged[-1][-1] in _NO_END):
            merged[-1] += u
        else:
            merged.append(u)
    lines, line = [], ""
    for u in merged:
        if line and cell_len(line + u.rstrip()) > width:
            lines.append(line.rstrip())
            line = u.lstrip()
        else:
            line += u
        while cell_len(line) > width:  # a unit longer than a line: at its spaces, else anywhere
            cut = line.rfind(" ", 0, width + 1)
            if cut <= 0:
                cut = 1
                while cut < len(line) and cell_len(line[: cut + 1]) <= width:
                    cut += 1
                while cut > 1 and line[cut] in _NO_START:  # never a line that begins with '，'
                    cut -= 1
            lines.append(line[:cut].rstrip())
            line = line[cut:].lstrip()
    if line:
        lines.append(line.rstrip())
    return lines


def chinese(console, text: str, style: str = "") -> None:
    """Print Chinese prose wrapped by wrap_chinese to the console's width (newlines kept)."""
    for para in text.split("\n"):
        for line in wrap_chinese(para, console.width) or [""]:
            console.print(Text(line, style=style), no_wrap=True, overflow="crop")


def token_str(tokenizer, token_id: int) -> str:
    """A vocabulary token as the text it adds, whitespace made visible; a piece of a character
    (a byte-level token that decodes to U+FFFD alone) is shown as its vocabulary piece in <...>."""
    from .attn import visible

    text = tokenizer.token_text(int(token_id))
    if text == "" or "\ufffd" in text:
        return f"<{tokenizer.piece(int(token_id))}>"
    return visible(text)


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



def chinese_markup(console, markup: str) -> None:
    """Chinese prose in Rich markup, wrapped by wrap_chinese with its styles kept (newlines kept)."""
    for text in Text.from_markup(markup).split("\n", allow_blank=True):
        at = 0
        for line in wrap_chinese(text.plain, console.width) or [""]:
            start = text.plain.find(line, at)  # each wrapped line cut from the styled text at its place
            piece = text[start : start + len(line)] if start >= 0 else Text(line)
            at = max(at, start + len(line))
            console.print(piece, no_wrap=True, overflow="crop")
