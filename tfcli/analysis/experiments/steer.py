"""Steering (activation addition, Turner et al. 2023): push the residual stream along a direction.

The direction is the difference of two texts' mean residual streams after block I: v = mean(h_A)
- mean(h_B), each text run alone as a prompt (with the special tokens the tokenizer adds; the
mean is over the text's own tokens, so that a BOS, the same in both, does not weigh in). C v is
then added to the output of block I at every position, of the prompt and of every new token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfcli.engine.errors import PromptError, UsageError
from tfcli.engine.sites import Hooks

from .common import check_block, record


@dataclass(frozen=True)
class Steering:
    layer: int  # the block whose output is pushed
    vector: np.ndarray  # [D] v, before the scale
    scale: float

    @property
    def norm(self) -> float:
        return float(np.linalg.norm(self.vector))

    def hooks(self, hooks: Hooks | None = None) -> Hooks:
        push = (np.float32(self.scale) * self.vector).astype(np.float32)  # [D]
        return (hooks if hooks is not None else Hooks()).add("resid_post", lambda value, site: value + push, self.layer)


def mean_state(model, ids: list[int], text_ids: int, layer: int) -> np.ndarray:
    """The mean residual stream after block `layer` over the last `text_ids` positions (the text's own tokens): [D]."""
    run = record(model, ids)
    return run.resid[layer + 1][len(ids) - text_ids :].mean(axis=0)  # [D]


def steering_vector(model, toward: tuple[list[int], int], away: tuple[list[int], int], layer: int, scale: float) -> Steering:
    """toward, away: (prompt ids, how many of them are the text's own tokens)."""
    layer = check_block(model, layer, "--layer")
    if not np.isfinite(scale):
        raise UsageError(f"--scale must be a finite number, not {scale}")
    v = mean_state(model, *toward, layer) - mean_state(model, *away, layer)  # [D]
    return Steering(layer, v.astype(np.float32), float(scale))


def from_texts(model, tokenizer, toward: str, away: str, layer: int, scale: float) -> Steering:
    """The steering of `toward` minus `away`, each text tokenized as a prompt (the live page's
    fields; the command line checks its texts with its own messages first)."""
    prefix = len(tokenizer.prompt(""))  # what the tokenizer puts before any text (a BOS), the same in both

    def side(text: str, what: str) -> tuple[list[int], int]:
        ids = tokenizer.prompt(text)
        if len(ids) <= prefix:
            raise PromptError(f"{what} is empty", "give a word or a few for each side of the direction")
        if len(ids) > model.config.n_ctx:
            raise PromptError(f"{what} is {len(ids):,} tokens; the model reads at most {model.config.n_ctx:,}", "shorten it")
        return ids, len(ids) - prefix

    return steering_vector(model, side(toward, "the text to steer toward"), side(away, "the text to steer away from"), layer, scale)


def save(path, s: Steering) -> None:
    np.savez(path, vector=s.vector, layer=np.int64(s.layer), scale=np.float64(s.scale))


def load(path, model) -> Steering:
    """A vector saved by `tfcli steer --save`, checked against the model it is used with."""
    import os
    from pathlib import Path

    from tfcli.engine.files import open_regular

    # A regular file only, opened without blocking: a named pipe or /dev/zero is refused, not waited on.
    try:
        fd = open_regular(Path(path), UsageError)
    except UsageError as e:
        raise UsageError(f"{path} is not a steering vector saved by 'tfcli steer --save' ({e.message})", "give the file --save wrote") from None
    try:
        with os.fdopen(fd, "rb") as f, np.load(f, allow_pickle=False) as z:
            vector, layer, scale = z["vector"], int(z["layer"]), float(z["scale"])
    except (OSError, KeyError, ValueError, EOFError) as e:
        raise UsageError(f"{path} is not a steering vector saved by 'tfcli steer --save' ({type(e).__name__})") from None
    if vector.shape != (model.config.d_model,) or not np.isfinite(vector).all() or not np.isfinite(scale):
        raise UsageError(f"{path} holds a vector of shape {vector.shape}, not this model's width {model.config.d_model}", "save a vector with the same model")
    check_block(model, layer, "the saved layer")
    return Steering(layer, vector.astype(np.float32), scale)
