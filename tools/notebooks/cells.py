"""What a notebook is made of here: cells whose prose has an English and a Chinese text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Cell:
    kind: str  # "markdown" or "code"
    en: str
    zh: str | None = None  # None: the same in both

    def text(self, lang: str) -> str:
        return (self.zh if lang == "zh" and self.zh is not None else self.en).strip("\n")


def md(en: str, zh: str | None = None) -> Cell:
    return Cell("markdown", en, zh)


def code(en: str, zh: str | None = None) -> Cell:
    return Cell("code", en, zh)


@dataclass
class Notebook:
    name: str
    cells: list[Cell]
    langs: tuple[str, ...] = ("en", "zh")
    slow: bool = False  # needs SmolLM2: marked slow as the suite's SmolLM2 tests are
