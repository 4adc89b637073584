"""What the commands that run a model on a text share: the model of -m with its warnings, the
text as token ids (refused in one line when it cannot run), and a position in it."""

from __future__ import annotations

from pathlib import Path

from . import options
from .console import warn


def load(model: str | None, threads: int | None = None):
    """The model of -m on --threads (by default only the idle cores: busy ones stall BLAS threads,
    engine/threads.py), its warnings shown."""
    options.apply_threads(threads)
    return warned(options.load_model(model))


def warned(lm):
    """A loaded model, its warnings (tensors the family does not use, ...) shown on stderr."""
    for w in lm.warnings:
        warn(w)
    return lm


def text_ids(lm, text: str, what: str = "the text", *, read: bool = False) -> list[int]:
    """The token ids of a text as the model sees it (a BOS where the tokenizer adds one), refused
    with one line when empty or longer than the context. `read`: the text is read already
    (text_or_file), so a '-' is the text itself, not stdin."""
    from tfcli.engine.errors import PromptError

    if not read:
        text = options.read_text(text, what, "give some text to run through the model")
    ids = lm.tokenizer.prompt(text)
    options.warn_unknown(lm.tokenizer, text, ids, lm.name)
    if not ids:
        raise PromptError(f"{what} encodes to no tokens", "give some text to run through the model")
    if len(ids) > lm.config.n_ctx:
        raise PromptError(f"{what} is {len(ids)} tokens but {lm.name}'s context is {lm.config.n_ctx}", "shorten it")
    bad = [i for i in ids if i >= lm.config.vocab_size]
    if bad:
        raise PromptError(f"{what} has token id {bad[0]}, past {lm.name}'s vocabulary of {lm.config.vocab_size}",
                          "the tokenizer does not match the model")
    return ids


def pick_position(position: int, t_len: int) -> int:
    from tfcli.engine.errors import UsageError

    p = position + t_len if position < 0 else position
    if not 0 <= p < t_len:
        raise UsageError(f"--position {position} is outside the text's {t_len} tokens (0 to {t_len - 1}, "
                         "or -1 for the last)")
    return p


def text_or_file(text: str | None, file: Path | None, command: str, to: str = "run through the model") -> str:
    """TEXT ('-': stdin) or the text of --file FILE: exactly one of the two (`to`: what the text is for, in a hint)."""
    from tfcli.engine.errors import UsageError

    if (text is None) == (file is None):
        raise UsageError("give a TEXT or --file FILE (one of the two)",
                         f"e.g. tfcli {command} 'some text', or tfcli {command} --file notes.txt")
    return read_file(file, to) if file is not None else options.read_text(text, "the text", f"give some text to {to}")


def read_file(path: Path, verb: str) -> str:
    """The text of --file: UTF-8, not empty, at most options.PROMPT_BYTES (refused in one line otherwise)."""
    from tfcli.engine.errors import PromptError
    from tfcli.engine.tokenizer import check_utf8

    data = _read_bounded(path, verb)
    try:
        body = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PromptError(f"{path} is not valid UTF-8 (byte {data[e.start]:#04x} at offset {e.start:,})",
                          "convert the text to UTF-8") from None
    if not body:
        raise PromptError(f"{path} is empty", f"give a file with some text to {verb}")
    check_utf8(body, str(path))
    return body


def _read_bounded(path: Path, verb: str) -> bytes:
    """The bytes of --file, at most options.PROMPT_BYTES: a regular file, or a pipe (`--file <(...)`);
    /dev/zero, a folder or a file of gigabytes are refused with one line, never read whole."""
    import os
    import stat

    from tfcli.engine.errors import PromptError, TfcliError
    from tfcli.engine.files import kind_of

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TfcliError(f"{path} does not exist", "check the path") from None
    except OSError as e:
        raise TfcliError(f"{path} cannot be read ({e.strerror})", "check the path and its permissions") from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        os.close(fd)
        raise TfcliError(f"{path} is {kind_of(mode)}, not a text file", f"give a file with some text to {verb}")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        limit = options.PROMPT_BYTES
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise TfcliError(f"{path} cannot be read ({e.strerror})", "check the file") from None
    if len(data) > limit:
        raise PromptError(f"{path} holds more than {limit:,} bytes", f"{verb} a part of it, e.g. with head -c or split")
    return data


