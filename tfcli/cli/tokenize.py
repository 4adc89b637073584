"""tfcli tokenize: how a model's tokenizer cuts text into tokens."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .console import out


TABLE_ROWS = 2_000  # a table of 75,000 rows took minutes to lay out; nobody reads past this at a terminal


def tokenize(
    text: Annotated[
        Optional[str], typer.Argument(help="The text to tokenize ('-' reads stdin).", show_default=False)
    ] = None,
    file: options.TextFile = None,
    model: options.Model = None,
    as_json: options.Json = False,
    lang: options.LangOption = None,
) -> None:
    """Show the tokens of TEXT as the model gets them: each token's id, its text and its UTF-8 bytes
    (with the BOS first where the model's tokenizer adds one).

    Examples:

      tfcli tokenize "Hello, world"

      tfcli tokenize -m tang "今天天气很好"

      tfcli tokenize --file notes.txt --json

      tfcli tokenize -m tang "床前明月光" --lang zh
    """
    from tfcli.engine.errors import PromptError
    from tfcli.engine.tokenizer import Tokenizer

    from tfcli.json_shapes import token

    from .inputs import text_or_file

    zh = options.chinese(lang)
    text = text_or_file(text, file, "tokenize", "tokenize")
    tok = Tokenizer(options.model_folder(model) / "tokenizer.json")
    ids = tok.prompt(text)  # as generate feeds it to the model (a BOS where the tokenizer adds one)
    options.warn_unknown(tok, text, ids, model or "shakespeare")
    if not ids:
        raise PromptError("the text encodes to no tokens")
    listed = ids if as_json else ids[:TABLE_ROWS]
    if as_json:
        from tfcli.engine.memory import check_allocation

        check_allocation(
            len(ids) * 700, f"the --json of {len(ids):,} tokens", "tokenize a shorter text"
        )  # ~700 bytes of objects and text per token
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
    _table(rows, len(ids), text, zh)
    if len(ids) > len(listed):
        from .console import note

        shown_part = (
            f"只列出 {len(ids):,} 个词元中的前 {len(listed):,} 个（--json 列出全部）"
            if zh
            else f"the first {len(listed):,} of {len(ids):,} tokens (--json lists them all)"
        )
        note(shown_part)


def _table(rows: list[dict], n_ids: int, text: str, zh: bool) -> None:
    """The tokens as a table: position, id, text, the vocabulary's piece and the UTF-8 bytes."""
    from rich.table import Table

    n_chars, n_bytes = len(text), len(text.encode("utf-8"))
    title = (
        f"{n_ids} 个词元，{n_chars} 个字符，{n_bytes} 字节"
        if zh
        else f"{n_ids} tokens, {n_chars} characters, {n_bytes} bytes"
    )
    table = Table(title=title, title_justify="left")
    styles = (
        {"justify": "right", "style": "dim"},
        {"justify": "right", "style": "cyan"},
        {"style": "bold"},
        {},
        {"style": "dim"},
    )
    for header, opts in zip(HEADERS[zh], styles):
        table.add_column(header, **opts)
    part = "（一个字符的一部分）" if zh else "(part of a character)"
    for n, row in enumerate(rows):
        shown = repr(row["text"]) if "\ufffd" not in row["text"] else part
        if "unknown" in row:
            shown = f"{row['text']} {'代表' if zh else 'for'} {row['unknown']!r}"
        table.add_row(str(n), str(row["id"]), shown, row["piece"], row["bytes"])
    out.print(table)


HEADERS = {False: ("#", "id", "text", "vocabulary piece", "bytes"), True: ("#", "id", "文本", "词表中的片段", "字节")}


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
