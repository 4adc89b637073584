"""What a run will cost before it starts: the memory a step holds, and the time it takes.

A step keeps, in float32: the parameters, their gradients and (AdamW) the two moments, 4 P; every
block's saved activations for the backward pass (per position about 12 D and 4 F values, the
attention weights B x H x T x T four times: the weights, and three temporaries of their gradient); and the logits, their
softmax and gradient, 3 x B T x V. The time is the arithmetic of a forward and backward pass, 6
multiply-adds per parameter and token plus attention's 12 L B T^2 D, at the rate this machine's
BLAS reaches on a small matrix product (measured once, in a few milliseconds).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from math import prod

from ..config import ModelConfig
from ..memory import flops_per_second
from . import shapes


@dataclass(frozen=True)
class Cost:
    parameters: int  # P
    nbytes: int  # the memory a step holds at its peak (estimate)
    step_flops: float  # floating-point operations of one step, forward and backward
    flops_per_second: float  # measured on this machine

    @property
    def step_seconds(self) -> float:
        return self.step_flops / self.flops_per_second


def parameters(cfg: ModelConfig) -> int:
    """P, from the shapes of a one- and a two-layer model: shapes() of a million layers would take
    longer to list than the answer is worth."""
    one, two = (sum(prod(s) for s in shapes(dataclasses.replace(cfg, n_layer=n, windows=())).values()) for n in (1, 2))
    return one + (cfg.n_layer - 1) * (two - one)


def estimate(cfg: ModelConfig, batch: int, seq_len: int, optimizer: str, lora: bool = False) -> Cost:
    p = parameters(cfg)
    n, d, f, v, h, L = batch * seq_len, cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_head, cfg.n_layer  # noqa: N806
    # parameters, gradients, and m and v; LoRA: the base, the merged copy its step builds, the
    # gradients of the effective weights (the adapter's own are small beside them)
    weights = p * (3 if lora else 4 if optimizer == "adamw" else 2)
    saved = L * (n * (12 * d + 4 * f) + 4 * batch * h * seq_len * seq_len)
    logits = 3 * n * v
    flops = 6.0 * p * n + 12.0 * L * batch * seq_len * seq_len * d
    return Cost(p, 4 * (weights + saved + logits), flops, flops_per_second())
