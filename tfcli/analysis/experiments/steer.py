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
from tfcli.engine.executor import PLAIN, Plain
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


def mean_state(model, ids: list[int], text_ids: int, layer: int, run: Plain = PLAIN) -> np.ndarray:
    """The mean residual stream after block `layer` over the last `text_ids` positions (the text's own tokens): [D]."""
    return record(model, ids, run).resid[layer + 1][len(ids) - text_ids :].mean(axis=0)  # [D]


def steering_vector(model, toward: tuple[list[int], int], away: tuple[list[int], int], layer: int, scale: float,
                    run: Plain = PLAIN) -> Steering:
    """toward, away: (prompt ids, how many of them are the text's own tokens); `run`: the passes' executor."""
    layer = check_block(model, layer, "--block")
    if not np.isfinite(scale):
        raise UsageError(f"--scale must be a finite number, not {scale}")
    v = mean_state(model, *toward, layer, run) - mean_state(model, *away, layer, run)  # [D]
    return Steering(layer, v.astype(np.float32), float(scale))


def from_texts(model, tokenizer, toward: str, away: str, layer: int, scale: float, run: Plain = PLAIN) -> Steering:
    """The steering of `toward` minus `away`, each text tokenized as a prompt (the live page's
    fields; the command line checks its texts with its own messages first)."""
    prefix = len(tokenizer.prompt(""))  # what the tokenizer puts before any text (a BOS), the same in both

    def side(text: str, what: str) -> tuple[list[int], int]:
        ids = tokenizer.prompt(text)
        if len(ids) <= prefix:
            raise PromptError(f"{what} is empty", "give a word or a few for each side of the direction")
        if len(ids) > model.config.n_ctx:
            raise PromptError(f"{what} is {len(ids):,} tokens; the model reads at most {model.config.n_ctx:,}",
                              "shorten it")
        return ids, len(ids) - prefix

    return steering_vector(model, side(toward, "the text to steer toward"),
                           side(away, "the text to steer away from"), layer, scale, run)


def save(path, s: Steering, identity: str | None = None) -> None:
    """vector [D], layer, scale and the identity of the model it was made on (engine/identity.py)."""
    np.savez(path, vector=s.vector, layer=np.int64(s.layer), scale=np.float64(s.scale), model=np.array(identity or ""))


def load(path, model, identity: str | None = None, any_model: bool = False) -> Steering:
    """A vector saved by `tfcli steer --save`, checked against the model it is used with: its
    archive and each array's header before any data is read (engine/npyfile.py), its width, its
    block, and the identity of the model it was made on (unless any_model)."""
    from tfcli.engine.npyfile import read_npz

    what = f"{path} is not a steering vector saved by 'tfcli steer --save'"
    d = model.config.d_model
    try:
        z = read_npz(path, {"vector": (1, 1 << 24), "layer": (0, 1), "scale": (0, 1)}, UsageError)
    except UsageError as e:
        raise UsageError(f"{what} ({e.message})", "give the file --save wrote") from None
    vector, layer, scale = z["vector"], int(z["layer"]), float(z["scale"])
    if vector.shape != (d,) or not np.isfinite(vector).all() or not np.isfinite(scale):
        raise UsageError(f"{path} holds a vector of shape {vector.shape}, not this model's width {d}",
                         "save a vector with the same model")
    if identity is not None and not any_model:
        made_on = _made_on(path)
        if made_on != identity:
            whose = f"another model ({made_on})" if made_on else "a model it does not record (saved by an older tfcli)"
            raise UsageError(f"{path} was made on {whose}, not on this one ({identity})",
                             "save it again with this model, or pass --any-model to use it anyway")
    check_block(model, layer, "the saved layer")
    return Steering(layer, vector.astype(np.float32), scale)


def _made_on(path) -> str | None:
    from tfcli.engine.npyfile import read_npz

    try:
        found = read_npz(path, {"model": (0, 1)}, UsageError)["model"]
    except UsageError:
        return None
    return str(found) if found.dtype.kind == "U" and str(found) else None
