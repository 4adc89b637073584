"""Ablation: take a part out of the pass and see how much the answer needed it.

A head is taken out by zeroing its context vector z (before W_O) at every position: it then adds
nothing but the output bias. An MLP is taken out by zeroing its output; one neuron by zeroing its
hidden activation. The measure is the change in the log-probability of the answer at the last
position: negative means the answer needed the part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tfcli.engine.errors import UsageError
from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.score import log_softmax
from tfcli.engine.sites import Hooks

from .common import Run, check_block, logits_of, record, run_variants


@dataclass(frozen=True)
class Ablation:
    run: Run
    answer: int
    logprob: float  # of the answer, nothing ablated
    heads: np.ndarray  # [L, H] change of the answer's log-probability with head (b, h) zeroed
    mlps: np.ndarray  # [L] with block b's MLP output zeroed


def ablate(model, ids, answer: int | None = None, progress=None, run: Plain = PLAIN) -> Ablation:
    """progress(done, total), if given, is called after each block's H + 1 variants; `run`: the
    executor of the passes (engine/executor.py)."""
    clean = record(model, ids, run)
    answer = int(np.argmax(clean.logits)) if answer is None else answer
    base = float(log_softmax(clean.logits)[answer])
    cfg, t_len = model.config, len(clean.ids)
    n_head = cfg.n_head
    heads, mlps = np.empty((cfg.n_layer, n_head)), np.empty(cfg.n_layer)
    for b in range(cfg.n_layer):
        # H + 1 variants from block b on, together: head h zeroed in variant h, the MLP in variant H.
        make = lambda group, b=b: np.repeat(clean.resid[b][None], len(group), axis=0)  # noqa: E731  [n, T, D]

        def hooks(group, b=b) -> Hooks:
            return (
                Hooks()
                .add("z", _in_variants(group, t_len, lambda v, j: v[:, j].fill(0) if j < n_head else None), b)
                .add("mlp_out", _in_variants(group, t_len, lambda v, j: v.fill(0) if j == n_head else None), b)
            )

        last = run_variants(model, b, n_head + 1, t_len, make, hooks, run)  # [H+1, D]
        change = log_softmax(logits_of(model, last, run=run))[:, answer] - base  # [H+1]
        heads[b], mlps[b] = change[:n_head], change[n_head]
        if progress is not None:
            progress(b + 1, cfg.n_layer)
    return Ablation(clean, answer, base, heads, mlps)


def _in_variants(group: range, t_len: int, edit):
    """A hook over the rows of several variants [n*T, ...]: edit(rows of variant j [T, ...], j) in place, on a copy."""

    def hook(value: np.ndarray, site) -> np.ndarray:
        value = value.reshape(len(group), t_len, *value.shape[1:]).copy()
        for k, j in enumerate(group):
            edit(value[k], j)
        return value.reshape(len(group) * t_len, *value.shape[2:])

    return hook


def zero(value: np.ndarray, site) -> np.ndarray:
    return np.zeros_like(value)


def zero_head(h: int):
    def hook(value: np.ndarray, site) -> np.ndarray:
        value = value.copy()  # [T, H, Dh]
        value[:, h] = 0.0
        return value

    return hook


def zero_neuron(n: int):
    def hook(value: np.ndarray, site) -> np.ndarray:
        value = value.copy()  # [T, F]
        value[:, n] = 0.0
        return value

    return hook


SPEC = re.compile(r"^(-?\d+)\.(?:(\d+)|mlp|n(\d+))$")


def ablation_hooks(model, specs: list[str], hooks: Hooks | None = None) -> Hooks:
    """Hooks for `--ablate B.H` (a head), `B.mlp` (an MLP) and `B.nN` (one neuron of block B's MLP)."""
    hooks = hooks if hooks is not None else Hooks()
    cfg = model.config
    for spec in specs:
        m = SPEC.match(spec.strip())
        if m is None:
            raise UsageError(f"--ablate {spec!r} is not B.H (a head), B.mlp (an MLP) or B.nN (a neuron)",
                             "e.g. --ablate 3.1 --ablate 5.mlp --ablate 2.n100")
        b = check_block(model, int(m.group(1)))
        if m.group(2) is not None:
            h = int(m.group(2))
            if h >= cfg.n_head:
                raise UsageError(f"--ablate {spec}: head {h} is out of range "
                                 f"(each block has heads 0 to {cfg.n_head - 1})")
            hooks.add("z", zero_head(h), b)
        elif m.group(3) is not None:
            n = int(m.group(3))
            if n >= cfg.d_ff:
                raise UsageError(f"--ablate {spec}: neuron {n} is out of range "
                                 f"(each MLP has neurons 0 to {cfg.d_ff - 1})")
            hooks.add("mlp_act", zero_neuron(n), b)
        else:
            hooks.add("mlp_out", zero, b)
    return hooks
