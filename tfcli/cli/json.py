"""The command line's side of --json: `emit` prints a document on stdout.

The documents' shapes (a model, a token, a generation, the float policy, the JSON text) live in
tfcli/json_shapes.py, which the Python API's `.save("x.json")` uses too; they are named here as well
so that a command reads its JSON from one module (`js.token(...)`, `js.emit(...)`).
"""

from __future__ import annotations

from typing import Any

from tfcli.json_shapes import (
    SIGNIFICANT,
    dumps,
    generated,
    generation,
    model_shape,
    stats,
    token,
)

__all__ = ["SIGNIFICANT", "dumps", "emit", "generated", "generation", "model_shape", "stats", "token"]


def emit(document: dict[str, Any], *, indent: int | None = None, digits: int = SIGNIFICANT) -> None:
    """Print a document on stdout, the product of a --json command."""
    import sys

    sys.stdout.write(dumps(document, indent=indent, digits=digits) + "\n")
    sys.stdout.flush()
