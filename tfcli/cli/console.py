"""The two Rich consoles: stdout for results, stderr for progress, statistics, warnings and errors.

Rich already drops colour when a stream is not a terminal or NO_COLOR is set.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}", markup=True, soft_wrap=True)


def note(message: str) -> None:
    err.print(f"[dim]{escape(message)}[/]", soft_wrap=True)
