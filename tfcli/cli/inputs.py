"""What the commands that run a model on a text share: the model of -m with its warnings, the
text as token ids (refused in one line when it cannot run), and a position in it."""

from __future__ import annotations

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


def text_ids(lm, text: str, what: str = "the text") -> list[int]:
    """The token ids of a text as the model sees it (a BOS where the tokenizer adds one), refused
    with one line when empty or longer than the context."""
    from tfcli.engine.errors import PromptError

    text = options.read_text(text, what, "give some text to run through the model")
    ids = lm.tokenizer.prompt(text)
    options.warn_unknown(lm.tokenizer, text, ids, lm.name)
    if not ids:
        raise PromptError(f"{what} encodes to no tokens", "give some text to run through the model")
    if len(ids) > lm.config.n_ctx:
        raise PromptError(f"{what} is {len(ids)} tokens but {lm.name}'s context is {lm.config.n_ctx}", "shorten it")
    bad = [i for i in ids if i >= lm.config.vocab_size]
    if bad:
        raise PromptError(f"{what} has token id {bad[0]}, past {lm.name}'s vocabulary of {lm.config.vocab_size}", "the tokenizer does not match the model")
    return ids


def pick_position(position: int, t_len: int) -> int:
    from tfcli.engine.errors import UsageError

    p = position + t_len if position < 0 else position
    if not 0 <= p < t_len:
        raise UsageError(f"--position {position} is outside the text's {t_len} tokens (0 to {t_len - 1}, or -1 for the last)")
    return p
