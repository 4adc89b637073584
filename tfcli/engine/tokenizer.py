"""The model's tokenizer (a Hugging Face tokenizer.json), and text streaming that never splits a character."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager, nullcontext
from pathlib import Path

from .errors import PromptError, TokenizerError, printable
from .files import TOKENIZER_BYTES, check_utf8_file, read_small
from .memory import give_back



# A tokenizer.json of at least COMPACT_FROM bytes is held in arrays where engine/compact_bpe.py or
# compact_bytes.py reproduces it (Gemma 3's 16 MB, 262,144 tokens and 514,847 merges: the library's
# parse holds 97 MB after it, built from the parts 72 MB, in arrays 14 MB; SmolLM2's 1.5 MB: 12 MB
# in the library, 8 in arrays), else, from LEAN_FROM bytes, built from its parts (_lean_bpe); a
# small one the library parses (a test model's few hundred tokens: their arrays would save nothing).
COMPACT_FROM = 1_000_000
LEAN_FROM = 4_000_000
_BPE_OPTIONS = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                "byte_fallback", "ignore_merges")
# each part's module and a class to take its JSON (__setstate__ replaces the whole part)
_PARTS = {"normalizer": ("normalizers", "NFC"), "pre_tokenizer": ("pre_tokenizers", "Whitespace"),
          "decoder": ("decoders", "Fuse"), "post_processor": ("processors", "ByteLevel")}


def _large(text: bytes):
    """A large tokenizer.json's tokenizer in arrays (compact_bpe) or built from its parts (_lean_bpe);
    None when the file is small or neither takes it: the library then parses it."""
    import json

    if len(text) < COMPACT_FROM:
        return None
    from .compact_bpe import afresh, compact_bpe, revived  # imported here: only a large file's load pays for it
    from .compact_bytes import compact_bytes

    try:
        spec = json.loads(text)
    except ValueError:
        return None
    if not isinstance(spec, dict):
        return None
    tok = compact_bpe(spec) or compact_bytes(spec)
    if tok is None:
        return _lean_bpe(spec) if len(text) >= LEAN_FROM else None
    state = afresh(tok)
    del tok, spec
    give_back()
    return revived(state)


def _lean_bpe(spec: dict):
    """The tokenizer of a large BPE tokenizer.json (`spec`, its parse, changed in place) built from its
    vocabulary and merges directly, the other parts from their own JSON: the same tokenizer as the
    library's parse of the whole file (tests/test_memory_tokenizer.py holds that), held in less
    memory. None when it is anything else than the plain BPE tokenizer.json tfcli writes and Hugging
    Face ships: the library then parses it, and says what is wrong with a malformed one."""
    import json

    import tokenizers
    from tokenizers import AddedToken, models

    try:
        model = spec["model"]
        shaped = (set(spec) <= {"version", "truncation", "padding", "added_tokens", *_PARTS, "model"}
                  and spec.get("truncation") is None and spec.get("padding") is None
                  and model.get("type") == "BPE" and isinstance(model.get("vocab"), dict)
                  and isinstance(model.get("merges"), list)
                  and set(model) <= {"type", "vocab", "merges", *_BPE_OPTIONS})
        if not shaped:
            return None
        vocab, merges = model.pop("vocab"), model.pop("merges")
        merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]
        options = {k: model[k] for k in _BPE_OPTIONS if model.get(k) is not None}
        tok = tokenizers.Tokenizer(models.BPE(vocab, merges, **options))
        del vocab, merges
        for key, (module, base) in _PARTS.items():
            if spec.get(key) is not None:
                part = getattr(getattr(tokenizers, module), base)()
                part.__setstate__(json.dumps(spec[key]).encode())  # the part as the file spells it
                setattr(tok, key, part)
        added = spec.get("added_tokens") or []
        tok.add_tokens([AddedToken(t["content"], single_word=t["single_word"], lstrip=t["lstrip"], rstrip=t["rstrip"],
                                   normalized=t["normalized"], special=t["special"]) for t in added])
        if any(tok.token_to_id(t["content"]) != t["id"] for t in added):
            return None  # ids the library's parse would give otherwise: it decides
        return tok
    except Exception:  # anything unexpected: the library parses the file (and names what is wrong)
        return None


def _library(text: bytes):
    # imported here: only commands that tokenize pay for it (and not a tokenizer held in arrays)
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_buffer(text)


def _library_failure(e: BaseException) -> bool:
    """The tokenizers library raises bare Exceptions, and a Rust panic arrives as pyo3's
    PanicException, which derives from BaseException only (and cannot be imported by name): both are
    the file's fault. Ctrl-C and exits are not."""
    return isinstance(e, Exception) or type(e).__name__ == "PanicException"


class Tokenizer:
    def __init__(self, path: Path):
        path = Path(path)
        if not os.path.lexists(path):
            raise TokenizerError(f"{path} is missing", "a model folder needs tokenizer.json next to config.json")
        text = read_small(path, TOKENIZER_BYTES, TokenizerError)  # a regular file, of bounded size
        check_utf8_file(path, text, TokenizerError)
        try:
            with _stderr_captured():
                # bytes: a str of a large vocabulary would take 4 bytes a character
                self._tok = _large(text) or _library(text)
        except BaseException as e:  # the tokenizers library raises a bare Exception (or panics) on malformed files
            if not _library_failure(e):
                raise
            raise TokenizerError(
                f"{path} is not a valid tokenizer.json ({_first_line(e)})", "re-save or re-convert the tokenizer"
            ) from None
        self.path = path
        if hasattr(self._tok, "longest_piece"):  # held in arrays (compact_bpe): it knows both
            self.vocab_size, self.longest_piece = self._tok.vocab_size, self._tok.longest_piece
        else:
            vocab = self._run(self._tok.get_vocab, with_added_tokens=True)  # {piece: id}
            # The ids the tokenizer can produce run up to the largest one, not up to how many there are:
            # a vocabulary with gaps still needs a model with that many rows. The loader warns when the
            # model has fewer.
            self.vocab_size = max(vocab.values(), default=-1) + 1
            self.longest_piece = max(map(len, vocab), default=1)  # in characters, for tail_chars
            del vocab
        del text
        give_back()  # what parsing the file took and freed

    def encode(self, text: str) -> list[int]:
        """Token ids of text, without the special tokens a post-processor would add (for text that
        already holds them, such as a rendered chat template)."""
        check_utf8(text)
        check_encode_memory(text)
        return self._run(self._tok.encode, text, add_special_tokens=False, quiet=True).ids

    def prompt(self, text: str) -> list[int]:
        """Token ids of a prompt as the model expects it: with the special tokens the tokenizer's
        post-processor adds (a BOS for Llama 2 and 3, nothing for GPT-2), as transformers'
        `tokenizer(text)` does."""
        check_utf8(text)
        check_encode_memory(text)
        return self._run(self._tok.encode, text, add_special_tokens=True, quiet=True).ids

    def tail_chars(self, n_tokens: int) -> int:
        """How many characters at the end of a text surely hold its last `n_tokens` tokens, with a
        margin of tokens cut at the start: no token is longer than the longest vocabulary piece
        (SentencePiece pieces are as long as their text, byte-level pieces at least as long)."""
        return (n_tokens + 16) * max(self.longest_piece, 1) + 64

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._run(self._tok.decode, list(ids), skip_special_tokens=skip_special_tokens)

    def _run(self, fn, *args, quiet: bool = False, **kw):
        """A call into the tokenizers library, whose failures (a pre-tokenizer regex that gives up on a
        text and panics, ids it has no piece for) become one line naming the file. `quiet`: what the
        library's panic handler writes straight to file descriptor 2 (a Rust backtrace) is kept off
        the terminal, for the calls that run a file's regular expressions on a whole text."""
        try:
            with _stderr_captured() if quiet else nullcontext():
                return fn(*args, **kw)
        except BaseException as e:
            if not _library_failure(e):
                raise
            raise TokenizerError(
                f"the tokenizer of {self.path.parent.name} failed: {_first_line(e)}",
                f"check {self.path.name}; re-save or re-convert the tokenizer",
            ) from None

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


# The tokenizers library keeps, for every token, its id, type, offsets, masks and its piece as a
# string: encoding 20 MB of English took 3.1 GB at its peak (about 155 bytes per byte of text).
# Where that memory is not there, the library aborts the whole process (SIGABRT, no message).
ENCODE_BYTES_PER_BYTE = 160
ENCODE_CHECKED_FROM = 1_000_000  # characters: below this, a few hundred MB at most, not worth a look


def check_encode_memory(text: str) -> None:
    """ResourceError before encoding a text whose encoding would not fit in the memory left."""
    if len(text) < ENCODE_CHECKED_FROM:
        return
    from .memory import check_allocation

    nbytes = len(text.encode("utf-8", "surrogatepass"))
    check_allocation(
        nbytes * ENCODE_BYTES_PER_BYTE, f"tokenizing {nbytes:,} bytes of text",
        "give a shorter text (only its end: tail -c), or run where more memory is available",
    )  # fmt: skip


@contextmanager
def _stderr_captured():
    """File descriptor 2 pointed at a temporary file for the duration (a file, not a pipe: a long
    backtrace cannot fill it and block)."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all
        yield
        return
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _first_line(e: BaseException) -> str:
    # the library's words for "while loading"
    text = str(e).strip().removeprefix("Cannot instantiate Tokenizer from buffer: ")
    return printable(text.splitlines()[0][:160]) if text else type(e).__name__


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
