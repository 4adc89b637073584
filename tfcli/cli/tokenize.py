"""tfcli tokenize: how a model's tokenizer cuts text into tokens."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .console import out


TABLE_ROWS = 2_000  # a table of 75,000 rows took minutes to lay out; nobody reads past this at a terminal


def tokenize(
    text: Annotated[Optional[str], typer.Argument(help="The text to tokenize ('-' reads stdin).", show_default=False)] = None,
    file: options.TextFile = None,
    model: options.Model = None,
    as_json: options.Json = False,
) -> None:
    """Show the tokens of TEXT as the model gets them: each token's id, its text and its UTF-8 bytes
    (with the BOS first where the model's tokenizer adds one).

    Examples:

      tfcli tokenize "Hello, world"

      tfcli tokenize -m tang "今天天气很好"

      tfcli tokenize --file notes.txt --json
    """
    from tfcli.engine.errors import PromptError
    from tfcli.engine.tokenizer import Tokenizer

    from .json import token

    from .inputs import text_or_file

    text = text_or_file(text, file, "tokenize", "tokenize")
    tok = Tokenizer(options.model_folder(model) / "tokenizer.json")
    ids = tok.prompt(text)  # as generate feeds it to the model (a BOS where the tokenizer adds one)
    options.warn_unknown(tok, text, ids, model or "shakespeare")
    if not ids:
        raise PromptError("the text encodes to no tokens")
    listed = ids if as_json else ids[:TABLE_ROWS]
    if as_json:
        from tfcli.engine.memory import check_allocation

        check_allocation(len(ids) * 700, f"the --json of {len(ids):,} tokens", "tokenize a shorter text")  # ~700 bytes of objects and text per token
    rows = []
    for i in listed:
        rows.append(token(tok, i, with_bytes=True) | {"piece": tok.piece(i)})
    for row, ch in zip((r for r in rows if r["id"] == options.unknown_id(tok)), unknown_characters(tok, text, ids)):
        # The unknown token stands for a character the vocabulary cannot spell: its own bytes are
        # what a learner wants to see (e4 bb 8a for 今), not those of the letters '<unk>'.
        row["bytes"] = " ".join(f"{b:02x}" for b in ch.encode("utf-8"))
        row["unknown"] = ch
    if as_json:
        from .json import emit

        emit({"model": model or "shakespeare", "text": text, "n_tokens": len(ids), "tokens": rows})
        return
    from rich.table import Table

    table = Table(title=f"{len(ids)} tokens, {len(text)} characters, {len(text.encode('utf-8'))} bytes", title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("id", justify="right", style="cyan")
    table.add_column("text", style="bold")
    table.add_column("vocabulary piece")
    table.add_column("bytes", style="dim")
    for n, row in enumerate(rows):
        shown = repr(row["text"]) if "\ufffd" not in row["text"] else "(part of a character)"
        if "unknown" in row:
            shown = f"{row['text']} for {row['unknown']!r}"
        table.add_row(str(n), str(row["id"]), shown, row["piece"], row["bytes"])
    out.print(table)
    if len(ids) > len(listed):
        from .console import note

        note(f"the first {len(listed):,} of {len(ids):,} tokens (--json lists them all)")


def unknown_characters(tok, text: str, ids: list[int]) -> list[str]:
    """The text each unknown token of `ids` stands for, in order: the characters the vocabulary
    cannot spell (a character-level vocabulary reads each as one <unk>). Empty when the two do not
    pair up one to one (a vocabulary whose <unk> swallows several characters)."""
    unk = options.unknown_id(tok)
    if unk is None or unk not in ids:
        return []
    spelled: dict[str, bool] = {}
    missing = []
    for ch in text:
        if ch not in spelled:
            spelled[ch] = unk not in tok.encode(ch)
        if not spelled[ch]:
            missing.append(ch)
    return missing if len(missing) == ids.count(unk) else []
