"""Training in NumPy: a forward pass that keeps what it needs, a backward pass written by hand.

    layers.py      every operation, forward and backward side by side
    model.py       the pass over the layers and back; gpt2.py, llama.py: each family's block
    family.py      Qwen3, Phi-3, Gemma 3: the inference family's own forward and engine/grad's backward
    optim.py       learning-rate schedule, clipping, SGD, AdamW
    data.py        text -> tokenizer -> token stream -> batches
    folder.py      a checkpoint: a Hugging Face folder that tfcli and transformers load
    run.py         the loop: steps, evaluations, samples, checkpoints (`tfcli train`)
"""

from __future__ import annotations

from ..config import ModelConfig
from ..errors import TfcliError
from . import family, gpt2, llama
from .model import Params, Trainable

# The families the trainer has a backward pass for (Qwen2 is Llama's block with q/k/v biases); the
# others train through their inference family and engine/grad (no --dropout, no --no-mask there).
FAMILIES = {"gpt2": gpt2, "llama": llama, "qwen2": llama, "qwen3": family, "gemma3": family, "phi3": family}


class TrainError(TfcliError):
    """A run that cannot start or go on: the text, the folder, the model or the numbers."""


def trainable(config: ModelConfig, params: Params, causal: bool = True, dropout: float = 0.0) -> Trainable:
    """The trainable model of a family for these parameters (named and shaped as shapes() says)."""
    module = FAMILIES.get(config.family)
    if module is None:
        raise TrainError(f"tfcli cannot train a {config.family} model", f"it trains {', '.join(sorted(FAMILIES))}")
    if module is family and (dropout > 0 or not causal):
        raise TrainError(f"--dropout and --no-mask are not available for {config.family} models",
                         "drop them; they train GPT-2 and Llama blocks")  # fmt: skip
    return module.MODEL(config, params, causal, dropout)


def shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    module = FAMILIES.get(config.family)
    if module is None:
        raise TrainError(f"tfcli cannot train a {config.family} model", f"it trains {', '.join(sorted(FAMILIES))}")
    return module.shapes(config)
