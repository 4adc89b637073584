"""The model's tokenizer (a Hugging Face tokenizer.json), and text streaming that never splits a character."""

from __future__ import annotations

from pathlib import Path

from .errors import PromptError, TokenizerError


class Tokenizer:
    def __init__(self, path: Path):
        from tokenizers import Tokenizer as HFTokenizer  # imported here: only commands that tokenize pay for it

        path = Path(path)
        if not path.exists():
            raise TokenizerError(f"{path} is missing", "a model folder needs tokenizer.json next to config.json")
        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises a bare Exception on malformed files
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise TokenizerError(f"{path} is not a valid tokenizer.json ({first[:120]})", "re-save or re-convert the tokenizer") from None
        self.path = path
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of text, without the special tokens a post-processor would add (for text that
        already holds them, such as a rendered chat template)."""
        check_utf8(text)
        return self._tok.encode(text, add_special_tokens=False).ids

    def prompt(self, text: str) -> list[int]:
        """Token ids of a prompt as the model expects it: with the special tokens the tokenizer's
        post-processor adds (a BOS for Llama 2 and 3, nothing for GPT-2), as transformers'
        `tokenizer(text)` does."""
        check_utf8(text)
        return self._tok.encode(text, add_special_tokens=True).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """The text one token adds to a text. A SentencePiece piece decoded alone loses its leading
        space ("\u2581the" is "the" at the start of a text, " the" inside one): it is put back."""
        text = self.decode([token_id])
        if self.piece(token_id).startswith("\u2581") and not text.startswith(" "):
            text = " " + text
        return text

    def piece(self, token_id: int) -> str:
        """The token's string in the vocabulary (for byte-level BPE, bytes shown as GPT-2's printable stand-ins)."""
        p = self._tok.id_to_token(int(token_id))
        return p if p is not None else f"<{token_id}>"

    def token_id(self, piece: str) -> int | None:
        return self._tok.token_to_id(piece)

    def special_ids(self) -> set[int]:
        return {int(i) for i, tok in self._tok.get_added_tokens_decoder().items() if tok.special}


def check_utf8(text: str, what: str = "the text") -> None:
    """PromptError if text holds lone surrogates: bytes that were not UTF-8, as Python hands them
    over from argv or stdin (PEP 383). The tokenizer cannot encode them."""
    try:
        text.encode("utf-8")  # fails exactly on surrogates, at C speed
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        what_byte = f"byte {code - 0xDC00:#04x}" if code >= 0xDC80 else f"code point U+{code:04X}"
        raise PromptError(
            f"{what} is not valid UTF-8 ({what_byte} at character {e.start})",
            "set the terminal to UTF-8, or pass the text with '-' from a UTF-8 file",
        ) from None


class TextStream:
    """Turn a stream of token ids into text deltas that never end in half a character.

    A byte-level BPE token can hold part of a multi-byte UTF-8 character (an emoji is often split in
    three); decoding it alone gives U+FFFD. We re-decode a short window of recent tokens and release
    text only when it no longer ends in U+FFFD (the approach of Hugging Face's TextStreamer and vLLM's
    incremental detokenizer, bounded to a window so that each step costs O(1)).
    """

    def __init__(self, tokenizer: Tokenizer, context: list[int] = (), skip_special_tokens: bool = True):
        self.tok = tokenizer
        self.skip = skip_special_tokens
        # A few prompt tokens as context, so that a decoder that strips the first token's leading
        # space (SentencePiece style) sees the new tokens as a continuation.
        self.ids: list[int] = [int(i) for i in context]
        self.prefix = 0  # ids[prefix:read] decode to text already released
        self.read = len(self.ids)

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        done = self.tok.decode(self.ids[self.prefix : self.read], self.skip)
        full = self.tok.decode(self.ids[self.prefix :], self.skip)
        if full.endswith("\ufffd") or len(full) < len(done) or not full.startswith(done):
            return ""  # incomplete character (or a decoder that rewrote the past): wait for more
        self.prefix, self.read = self.read, len(self.ids)
        return full[len(done) :]

    def flush(self) -> str:
        """Whatever is left at the end (an incomplete character is released as U+FFFD)."""
        done = self.tok.decode(self.ids[self.prefix : self.read], self.skip)
        full = self.tok.decode(self.ids[self.prefix :], self.skip)
        self.prefix = self.read = len(self.ids)
        return full[len(done) :] if full.startswith(done) else ""
