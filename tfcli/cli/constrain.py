"""--json-schema, --grammar and --regex of generate and chat: the grammar a generation must follow."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

_PANEL = "Constrained decoding"
MAX_FILE_BYTES = 1 << 20  # a schema or grammar file: far past any real one

JsonSchema = Annotated[
    Optional[str],
    typer.Option(
        "--json-schema",
        help="Only text that is a JSON document valid under this JSON Schema (a file, or the schema's JSON itself): "
             "each step the tokens it forbids are removed before sampling.",
        show_default=False, rich_help_panel=_PANEL),
]
Grammar = Annotated[
    Optional[Path],
    typer.Option("--grammar", help="Only text this GBNF grammar (llama.cpp's format, a .gbnf file) matches.",
                 show_default=False, dir_okay=False, rich_help_panel=_PANEL),
]
Regex = Annotated[
    Optional[str],
    typer.Option("--regex", help="Only text this regular expression matches whole.", show_default=False,
                 rich_help_panel=_PANEL),
]


def check_one(json_schema: str | None, grammar: Path | None, regex: str | None) -> None:
    """At most one of the three (before a model is loaded)."""
    from tfcli.engine.errors import UsageError

    given = [flag for flag, v in (("--json-schema", json_schema), ("--grammar", grammar), ("--regex", regex))
             if v is not None]
    if len(given) > 1:
        raise UsageError(f"give one of {' and '.join(given)}", "a generation follows one grammar")


def compiled(lm, json_schema: str | None, grammar: Path | None, regex: str | None, eos_ids: tuple[int, ...]):
    """The grammar asked for, compiled against the model's vocabulary (engine/grammar.py), or None."""
    from tfcli.engine.grammar import compile_grammar

    check_one(json_schema, grammar, regex)
    if json_schema is not None:
        text = json_schema if json_schema.lstrip().startswith("{") else _read(Path(json_schema), "--json-schema")
        kind = "json_schema"
    elif grammar is not None:
        text, kind = _read(grammar, "--grammar"), "gbnf"
    elif regex is not None:
        text, kind = regex, "regex"
    else:
        return None
    return compile_grammar(kind, text, lm.tokenizer, lm.config.vocab_size, eos_ids)


def _read(path: Path, flag: str) -> str:
    from tfcli.engine.errors import UsageError

    try:
        if not path.is_file():
            raise UsageError(f"{flag} {path}: no such file",
                             "give a file, or (--json-schema) the schema's JSON itself, starting with {")
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise UsageError(f"{flag} {path} cannot be read ({e.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        raise UsageError(f"{flag} {path} is more than {MAX_FILE_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{flag} {path} is not UTF-8 text") from None
