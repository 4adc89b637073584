"""Gradients through every family's own forward pass.

    logits, tape = record(model, tokens)     # the model's forward, its values kept (tape.py)
    grads = backward(model, tape, d_logits)  # d scalar / d every weight and every site (model.py)

    ops.py        the backward of each building block of engine/ops.py
    tape.py       the forward pass, on the textbook executor, keeping what its backward needs
    model.py      the shared backward walk (embed <- blocks <- final norm <- unembedding), Grads
    gpt2.py llama.py phi3.py gemma3.py   each family's steps backward, beside its forward's order

`loss_and_grads` and `metric_grads` are the two scalars tfcli differentiates: the next-token
cross-entropy (training) and logit(answer) - logit(wrong) at the last position (attribution).
"""

from __future__ import annotations

import numpy as np

from ..errors import TfcliError
from . import gemma3, gpt2, llama, phi3
from .model import Backward, Grads
from .tape import Tape, record

# The backward of each family's block (Qwen2 and Qwen3 run Llama's block, as their forward does).
BACKWARDS: dict[str, type[Backward]] = {
    "gpt2": gpt2.GPT2Backward,
    "llama": llama.LlamaBackward,
    "qwen2": llama.LlamaBackward,
    "qwen3": llama.LlamaBackward,
    "phi3": phi3.Phi3Backward,
    "gemma3": gemma3.Gemma3Backward,
}

__all__ = ["IGNORED", "Grads", "Tape", "backward", "backward_of", "loss_and_grads", "metric_grads", "record"]


def backward_of(model) -> Backward:
    """The backward pass of `model`'s family."""
    kind = BACKWARDS.get(model.config.family)
    if kind is None:
        raise TfcliError(f"tfcli has no backward pass for {model.config.family} models",
                         f"it has one for {', '.join(sorted(BACKWARDS))}")  # fmt: skip
    return kind(model)


def backward(model, tape: Tape, d_logits: np.ndarray, grads: Grads | None = None) -> Grads:
    """d scalar / d logits [B*T, V] of the recorded pass -> the gradient of every weight and site
    (into `grads`: a Grads that freezes some weights, as a LoRA step's does)."""
    return backward_of(model).run(tape, np.asarray(d_logits, dtype=np.float32), grads)


IGNORED = -100  # a target that is not scored (torch's ignore_index): a chat's system and user turns


def loss_and_grads(model, tokens: np.ndarray, targets: np.ndarray, grads: Grads | None = None, causal: bool = True,
                   dropout: float = 0.0, rng: np.random.Generator | None = None) -> tuple[float, Grads]:  # fmt: skip
    """The mean next-token cross-entropy of `targets` [B, T] after `tokens` [B, T], in nats, and its
    gradients. A target of IGNORED is left out of the mean. `causal`, `dropout`, `rng`: tape.record's."""
    logits, tape = record(model, tokens, causal=causal, dropout=dropout, rng=rng)  # [N, V]
    y = np.asarray(targets).reshape(-1)  # [N]
    rows = np.flatnonzero(y != IGNORED)  # [n] the scored positions
    if len(rows) == 0:
        raise TfcliError("no target of this batch is scored", "give it at least one token to learn")
    shifted = logits[rows] - logits[rows].max(axis=-1, keepdims=True)  # [n, V]
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # [n, V] log-softmax
    loss = -float(logp[np.arange(len(rows)), y[rows]].mean(dtype=np.float64))
    d = np.zeros_like(logits)  # [N, V]: d loss / d logits = (softmax - one_hot) / n on the scored rows, 0 elsewhere
    d[rows] = np.exp(logp)
    d[rows, y[rows]] -= 1.0
    d /= np.float32(len(rows))
    return loss, backward(model, tape, d, grads)


def metric_grads(model, tokens: np.ndarray, answer: int, wrong: int) -> tuple[float, Grads]:
    """M = logit(answer) - logit(wrong) at the last position of `tokens` [T], and its gradients."""
    logits, tape = record(model, tokens)  # [T, V]
    d = np.zeros_like(logits)  # [T, V]
    d[-1, answer] += 1.0
    d[-1, wrong] -= 1.0
    return float(logits[-1, answer] - logits[-1, wrong]), backward(model, tape, d)
