"""Option aliases shared by several commands (Typer `Annotated` style)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

Model = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-m",
        help="A model name (see 'tfcli models': shipped in weights/, or pulled) or a path to a model folder. Default: shakespeare.",
        show_default=False,
    ),
]
Seed = Annotated[Optional[int], typer.Option("--seed", "-s", help="Random seed: the same seed gives the same output.", show_default=False)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")]
