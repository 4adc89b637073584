"""tfcli tokenize: how a model's tokenizer cuts text into tokens."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from . import options
from .options import read_text
from .console import out


def tokenize(
    text: Annotated[str, typer.Argument(help="The text to tokenize.")],
    model: options.Model = None,
    as_json: options.Json = False,
) -> None:
    """Show the tokens of TEXT as the model gets them: each token's id, its text and its UTF-8 bytes
    (with the BOS first where the model's tokenizer adds one).

    Examples:

      tfcli tokenize "Hello, world"

      tfcli tokenize -m tang "今天天气很好"
    """
    from tfcli.engine.errors import PromptError
    from tfcli.engine.tokenizer import Tokenizer

    text = read_text(text, "the text", "give some text to tokenize")
    tok = Tokenizer(options.model_folder(model) / "tokenizer.json")
    ids = tok.prompt(text)  # as generate feeds it to the model (a BOS where the tokenizer adds one)
    if not ids:
        raise PromptError("the text encodes to no tokens")
    rows = []
    for i in ids:
        piece = tok.token_text(i)
        rows.append({"id": i, "piece": tok.piece(i), "text": piece, "bytes": _token_bytes(tok, i, piece)})
    if as_json:
        print(json.dumps({"text": text, "n_tokens": len(ids), "tokens": rows}, ensure_ascii=False))
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
        table.add_row(str(n), str(row["id"]), shown, row["piece"], row["bytes"])
    out.print(table)


_BYTE_DECODER: dict[str, int] | None = None


def _token_bytes(tok, token_id: int, text: str) -> str:
    """The token's bytes: exact for byte-level BPE pieces (GPT-2's printable byte alphabet) and for
    SentencePiece's byte tokens, else its text's UTF-8."""
    global _BYTE_DECODER
    if _BYTE_DECODER is None:
        # GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest are shifted past 255.
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        _BYTE_DECODER = {chr(c): b for b, c in zip(bs, cs)}
    piece = tok.piece(token_id)
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):  # SentencePiece's byte fallback, <0xE4>
        data = bytes([int(piece[3:5], 16)])
    elif "\ufffd" in text and all(ch in _BYTE_DECODER for ch in piece):
        data = bytes(_BYTE_DECODER[ch] for ch in piece)
    else:
        data = text.encode("utf-8")
    return " ".join(f"{b:02x}" for b in data)
