"""The two Rich consoles: stdout for results, stderr for progress, statistics, warnings and errors.

Rich already drops colour when a stream is not a terminal or NO_COLOR is set.
"""

from __future__ import annotations

from rich.console import Console as RichConsole
from rich.markup import escape


class Console(RichConsole):
    def on_broken_pipe(self) -> None:
        # Rich would exit with code 1 here; the error boundary (cli/__init__.py) ends a command whose
        # reader went away (`tfcli params | head`) quietly and with 0, whichever way it noticed.
        self.quiet = True
        raise BrokenPipeError


out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}", markup=True, soft_wrap=True)


def note(message: str) -> None:
    err.print(f"[dim]{escape(message)}[/]", soft_wrap=True)
