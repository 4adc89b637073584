"""Prose in the terminal: Chinese wrapped between characters, never inside a formula. Drawing only."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

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


def chinese_markup(console, markup: str) -> None:
    """Chinese prose in Rich markup, wrapped by wrap_chinese with its styles kept (newlines kept)."""
    for text in Text.from_markup(markup).split("\n", allow_blank=True):
        at = 0
        for line in wrap_chinese(text.plain, console.width) or [""]:
            start = text.plain.find(line, at)  # each wrapped line cut from the styled text at its place
            piece = text[start : start + len(line)] if start >= 0 else Text(line)
            at = max(at, start + len(line))
            console.print(piece, no_wrap=True, overflow="crop")
