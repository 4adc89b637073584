"""Training in NumPy: the inference families' own forward pass, engine/grad's backward.

    model.py       the trainable model (any family, through engine/grad), its parameters' names and shapes
    optim.py       learning-rate schedule, clipping, SGD, AdamW
    data.py        text -> tokenizer -> token stream -> batches; chat.py: conversations, the assistant's turns scored
    lora.py        a LoRA adapter on a frozen model, in PEFT's format
    folder.py      a checkpoint: a Hugging Face folder that tfcli and transformers load
    run.py         the loop: steps, evaluations, samples, checkpoints (`tfcli train`)
"""

from __future__ import annotations

from ..config import ModelConfig
from ..errors import TfcliError
from ..grad import BACKWARDS
from .model import Params, Trainable
from .model import shapes as _shapes


class TrainError(TfcliError):
    """A run that cannot start or go on: the text, the folder, the model or the numbers."""


def _check(config: ModelConfig) -> None:
    if config.family not in BACKWARDS:
        raise TrainError(f"tfcli cannot train a {config.family} model", f"it trains {', '.join(sorted(BACKWARDS))}")


def trainable(config: ModelConfig, params: Params, causal: bool = True, dropout: float = 0.0) -> Trainable:
    """The trainable model of a family for these parameters (named and shaped as shapes() says)."""
    _check(config)
    return Trainable(config, params, causal, dropout)


def shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    _check(config)
    return _shapes(config)
