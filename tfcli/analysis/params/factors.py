"""A count as a product of named factors, so that its number, its formula and its filled-in numbers
come from one source.

    Row("query", (L, H, Dh, D))   count 14,495,514,624, formula "L × H × Dh × D",
                                  numbers "96 × 96 × 128 × 12,288"

A factor is one value with its letter and the way it is printed; `times` and `plus` build one factor
out of several ("H·Dh" printed as 12,288; "(H + Hkv)" printed as "(9 + 3)"), computing its value and
both its texts together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tfcli.numbers import count


@dataclass(frozen=True)
class Factor:
    symbol: str  # in the axes' letters: "L", "H·Dh", "(3·H·Dh + D)"
    value: int
    shown: str  # the value as the numbers line prints it: "96", "12,288", "(9 + 3)"
    symbol_zh: str = ""  # a symbol in words ("one block") in Chinese ("一个块"); "" for letters and numbers

    @property
    def zh(self) -> str:
        return self.symbol_zh or self.symbol


def axis(symbol: str, value: int, zh: str = "") -> Factor:
    """A size named by its letter, axis("L", 96), or in words with their Chinese: axis("one block", n, "一个块")."""
    return Factor(symbol, value, count(value), zh)


def _zh(factors, sep: str) -> str:
    """The Chinese of a factor built from `factors`: "" when none of them has words."""
    return sep.join(f.zh for f in factors) if any(f.symbol_zh for f in factors) else ""


def const(n: int) -> Factor:
    """A plain number, written the same in the formula and the numbers: the 2 of "2 × D × Dh"."""
    return Factor(str(n), n, count(n))


def times(*factors: Factor, sep: str = "·") -> Factor:
    """One factor standing for a product, printed as its value: times(H, Dh) is "H·Dh", 12,288;
    with sep=" × " it reads as the product written out ("D × Dh")."""
    value = math.prod(f.value for f in factors)
    return Factor(sep.join(f.symbol for f in factors), value, count(value), _zh(factors, sep))


def plus(*terms: Factor, parts: bool = False) -> Factor:
    """One factor standing for a sum, in parentheses when it has several terms: "(F + D)".
    Printed as its value, or with parts=True as the sum of the terms' numbers: "(9 + 3)"."""
    if len(terms) == 1:
        return terms[0]
    value = sum(t.value for t in terms)
    shown = "(" + " + ".join(t.shown for t in terms) + ")" if parts else count(value)
    zh = _zh(terms, " + ")
    return Factor("(" + " + ".join(t.symbol for t in terms) + ")", value, shown, f"({zh})" if zh else "")


@dataclass(frozen=True)
class Row:
    """One line of a tally: a product of factors. No factors: nothing to count (the count is 0), and
    `note` says why (RoPE has no position table, a tied unembedding is the embedding)."""

    key: str  # a key of labels.LABELS
    factors: tuple[Factor, ...] = ()
    note: str = ""  # e.g. "tied: shares the embedding"
    note_zh: str = ""  # the note in Chinese ("共享：与嵌入是同一个矩阵"), as labels.LABELS pairs the names
    sep: str = " × "  # between the factors of the formula ("·" for 2·L·T·H·Dh)

    @property
    def count(self) -> int:
        return math.prod(f.value for f in self.factors) if self.factors else 0

    @property
    def formula(self) -> str:
        return self.sep.join(f.symbol for f in self.factors)

    @property
    def formula_zh(self) -> str:
        """The formula with its words in Chinese ("L × 一个块"); the same as `formula` when it has none."""
        return self.sep.join(f.zh for f in self.factors)

    @property
    def numbers(self) -> str:
        return " × ".join(f.shown for f in self.factors)


@dataclass(frozen=True)
class Sum:
    """A line that adds up other lines (with a sign): what the tally adds to or leaves out of the exact
    count. Its formula and numbers are those of the rows it adds, joined by " + "."""

    key: str
    rows: tuple[Row, ...] = ()
    sign: int = 1  # -1: the rows are left out
    note: str = ""
    note_zh: str = ""

    @property
    def count(self) -> int:
        return self.sign * sum(r.count for r in self.rows)

    @property
    def formula(self) -> str:
        return " + ".join(r.formula for r in self.rows if r.count)

    @property
    def formula_zh(self) -> str:
        return " + ".join(r.formula_zh for r in self.rows if r.count)

    @property
    def numbers(self) -> str:
        return " + ".join(r.numbers for r in self.rows if r.count)
