"""How tfcli writes numbers: thousands separators, SI prefixes, byte sizes, signed deltas, shares.

Pure functions on ints and floats, no imports beyond the standard library, so that the engine, the
analysis and the CLI can all use them (and `tfcli params` stays fast). Decimal units throughout
(1 kB = 1,000 bytes), as disk sizes and model cards write them.
"""

from __future__ import annotations

from decimal import Decimal

MINUS = "−"  # U+2212: a minus sign that lines up with "+" in a column of deltas


def count(n: int) -> str:
    """1234567 -> "1,234,567"."""
    return f"{n:,}"


def signed(n: int) -> str:
    """A difference with its sign: +617,558,016, −25,165,824 (a true minus sign), +0."""
    return f"{n:+,}".replace("-", MINUS)


def _scaled(n: float, ladder: tuple[tuple[int, str], ...]) -> str | None:
    """n in the largest unit of `ladder` (largest first) it reaches, to 3 significant digits."""
    for scale, unit in ladder:
        if n >= scale:
            try:
                return f"{n / scale:.3g} {unit}"
            except OverflowError:  # an int too large for a float (a size of 10^160): Decimal still divides
                return f"{Decimal(n) / scale:.3g} {unit}"
    return None


_SI = ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))


def si(n: int, unit: str) -> str:
    """4_831_838_208, "FLOP" -> "4.83 GFLOP"; below 1,000 the count itself: "512 FLOP"."""
    return _scaled(n, tuple((scale, prefix + unit) for scale, prefix in _SI)) or f"{count(n)} {unit}"


def size(n: float) -> str:
    """A byte count to 3 significant digits: 349_208_518_656 -> "349 GB"; "512 bytes" below 1 kB.
    The one way tfcli writes a size: files, memory needed and available, a bandwidth (with "/s")."""
    return _scaled(n, ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB"))) or f"{count(round(n))} bytes"


def share(part: int, whole: int) -> str:
    """part as a percentage of whole to one decimal ("33.2"); "<0.1" for a part too small to show
    (but not for nothing, which is "0.0")."""
    pct = 100 * part / whole
    return f"{pct:.1f}" if pct >= 0.1 or not part else "<0.1"


def percent(part: int, whole: int, decimals: int = 2) -> str:
    """part as a percentage of whole: 40_525_824, 174_604_259_328 -> "0.02%"."""
    return f"{100 * part / whole:.{decimals}f}%"


def signed_percent(fraction: float) -> str:
    """A relative difference: 0.0179 -> "+1.8%", -0.0113 -> "-1.1%"."""
    return f"{fraction:+.1%}"


_FIGURE_UNITS = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def parse_figure(figure: str) -> int:
    """A parameter figure as papers print it: "1.3B" -> 1_300_000_000, "125M" -> 125_000_000."""
    return int(Decimal(figure[:-1]) * _FIGURE_UNITS[figure[-1]])


def rounds_to(n: int, figure: str) -> bool:
    """Whether `n` rounded like `figure` ("125M", "1.3B", "175B": to the digits printed) gives `figure`."""
    mantissa = Decimal(figure[:-1])
    decimals = max(0, -mantissa.as_tuple().exponent)
    return round(Decimal(n) / _FIGURE_UNITS[figure[-1]], decimals) == mantissa
