"""How a gradient becomes a step: the learning-rate schedule, clipping, SGD and AdamW.

Each update is written as torch.optim writes it (torch/optim/adamw.py, sgd.py; torch.nn.utils.
clip_grad_norm_), in the same order, so that tests/test_train_optim.py can hold the two equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .model import Params

MIN_LR_RATIO = 0.1  # cosine decays to a tenth of --lr (nanoGPT, Chinchilla's recipe)


def lr_at(step: int, lr: float, warmup: int, steps: int, schedule: str) -> float:
    """Learning rate of step `step` (0-based): linear warmup over `warmup` steps, then constant,
    or a cosine from lr down to lr / 10 at the last step. Warmup: a new model's first gradients
    are large and point anywhere; small first steps keep AdamW's running averages from starting
    with them at full strength."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    floor = lr * MIN_LR_RATIO
    return floor + 0.5 * (lr - floor) * (1 + math.cos(math.pi * progress))


def clip_by_global_norm(grads: Params, max_norm: float) -> float:
    """Scale every gradient by max_norm / |all gradients| when that norm is larger (0: never).
    Returns the norm before clipping. One bad batch then moves the weights no further than
    max_norm allows, in the same direction."""
    # vdot: float32 sums (in float64 they would differ from torch's by ulps only)
    total = math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))
    if max_norm > 0:
        coef = max_norm / (total + 1e-6)  # torch's 1e-6 keeps a zero norm from dividing by zero
        if coef < 1:
            for g in grads.values():
                g *= np.float32(coef)
    return total


def decays(name: str, p: np.ndarray) -> bool:
    """nanoGPT's rule: weight decay on matrices (embeddings, projections), never on biases or
    norm gains, whose size is not a sign of overfitting and which a pull to zero would break."""
    return p.ndim >= 2


@dataclass
class SGD:
    """p <- p - lr (g + wd p): plain gradient descent, torch.optim.SGD without momentum; its
    weight decay is an L2 term added to the gradient."""

    weight_decay: float = 0.0
    step_count: int = 0

    def step(self, params: Params, grads: Params, lr: float) -> None:
        self.step_count += 1
        for name, p in params.items():
            g = grads[name]
            if self.weight_decay and decays(name, p):
                g = g + np.float32(self.weight_decay) * p
            p -= np.float32(lr) * g

    def state(self) -> Params:
        return {}

    def load_state(self, arrays: Params, step_count: int) -> None:
        self.step_count = step_count


@dataclass
class AdamW:
    """Adam with decoupled weight decay (Loshchilov and Hutter 2019): the decay shrinks the weight
    itself, not through the gradient, so that Adam's per-weight scaling does not undo it.

        p <- p (1 - lr wd)                              matrices only (decays())
        m <- b1 m + (1 - b1) g                          running mean of the gradient
        v <- b2 v + (1 - b2) g^2                        running mean of its square
        p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

    The two (1 - b^t) undo the start of m and v at zero (bias correction)."""

    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    weight_decay: float = 0.1
    step_count: int = 0

    def __post_init__(self):
        self.m: Params = {}
        self.v: Params = {}

    def step(self, params: Params, grads: Params, lr: float) -> None:
        self.step_count += 1
        t, (b1, b2) = self.step_count, self.betas
        for name, p in params.items():
            g = grads[name]
            if name not in self.m:
                self.m[name], self.v[name] = np.zeros_like(p), np.zeros_like(p)
            m, v = self.m[name], self.v[name]
            if self.weight_decay and decays(name, p):
                p *= np.float32(1 - lr * self.weight_decay)
            m *= np.float32(b1)
            m += np.float32(1 - b1) * g
            v *= np.float32(b2)
            v += np.float32(1 - b2) * (g * g)
            denom = np.sqrt(v) / np.float32(math.sqrt(1 - b2**t)) + np.float32(self.eps)
            p -= np.float32(lr / (1 - b1**t)) * m / denom

    def state(self) -> Params:
        """m and v by parameter name, for a checkpoint that --resume continues exactly."""
        return {f"m.{k}": a for k, a in self.m.items()} | {f"v.{k}": a for k, a in self.v.items()}

    def load_state(self, arrays: Params, step_count: int) -> None:
        self.step_count = step_count
        self.m = {k[2:]: np.array(a) for k, a in arrays.items() if k.startswith("m.")}
        self.v = {k[2:]: np.array(a) for k, a in arrays.items() if k.startswith("v.")}
