"""tfcli rm: remove a pulled or converted model from the cache."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .console import err, note


def rm(
    name: Annotated[str, typer.Argument(
        help="The model to remove (see 'tfcli models': pulled ones only).", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask: remove it.")] = False,
) -> None:
    """Remove a pulled (or converted) model from the cache, freeing its disk space.

    The shipped models are part of tfcli and are not removed. At a terminal you are asked first;
    in a script, pass --yes. 'tfcli pull NAME' fetches it again.

    Examples:

      tfcli rm smollm2

      tfcli rm smollm2 --yes
    """
    from tfcli.engine.errors import UsageError
    from tfcli.store import remove

    from .models import _size

    folder = remove.removable(name)
    size = _size(remove.folder_bytes(folder))
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"tfcli rm asks before it removes {name} ({size}), and stdin is not a terminal",
                             "pass --yes to remove it without asking")
        err.print(f"remove {name} ({size}, {folder})? [y/N] ", end="", markup=False, highlight=False)
        try:
            answer = input()
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            note("nothing removed")
            raise typer.Exit(1)
    remove.remove(name)
    note(f"removed {name}: {size} freed ({folder})")
