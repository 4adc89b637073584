"""The pieces every part of the `tfcli params` drawing shares: the words in one language (_Say), a
sentence, and a borderless table (views/params.py and views/params_from.py draw with them)."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

from tfcli.analysis.params.labels import LABELS

from ..console import out


class _Say:
    """Names and sentences in English, or under --lang zh in Chinese only (the one rule of cli/lang.py);
    symbols, numbers and the names of methods (SwiGLU, RMSNorm) stay as they are."""

    def __init__(self, zh: bool):
        self.zh = zh

    def name(self, item: dict) -> str:
        return item["name_zh"] if self.zh else item["name"]

    def label(self, key: str) -> str:
        en, zh = LABELS[key]
        return zh if self.zh else en

    def both(self, en: str, zh: str) -> str:
        return zh if self.zh else en

    def formula(self, item: dict) -> str:
        """A row's formula; under zh its words in Chinese ("L × 一个块"), its symbols and numbers as they are."""
        return item.get("formula_zh", item["formula"]) if self.zh else item["formula"]


def _say(text: str, style: str = "") -> None:
    """A sentence; Chinese wrapped between characters (prose.chinese), not at the ASCII spaces around its numbers."""
    import re

    from .prose import _CJK, chinese

    if re.search(f"[{_CJK}]", text):
        chinese(out, text, style)
        return
    out.print(escape(text), style=style or None)


_HEADERS_ZH = {"formula": "公式", "parameters": "参数"}


def _table(title: str, *columns: tuple[str, dict], say: _Say | None = None):
    """A borderless table with a bold title; columns are (header, Rich column options), their
    headers in Chinese with `say` in Chinese."""
    table = Table(
        title=escape(title),
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for header, opts in columns:
        table.add_column(say.both(header, _HEADERS_ZH[header]) if say and header in _HEADERS_ZH else header, **opts)
    return table


_NAME = ("", {"ratio": 1, "overflow": "fold"})  # a Chinese name has no spaces to wrap at: folded, never cut with '…'
