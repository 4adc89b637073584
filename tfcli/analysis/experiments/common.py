"""What every experiment needs: a recorded clean pass, the blocks after a site, and the answer's logit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfcli.engine.errors import UsageError
from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.inspect import Recorder


@dataclass(frozen=True)
class Run:
    """One recorded pass over a text: the residual stream before every block and after the last,
    and the logits at the last position."""

    ids: np.ndarray  # [T]
    resid: list[np.ndarray]  # [L+1] x [T, D]: index 0 the embeddings, i the output of block i-1
    logits: np.ndarray  # [V] at the last position


def record(model, ids, run: Plain = PLAIN) -> Run:
    """ids [T] through the model once, recording the residual stream at every index. `run`: the
    executor of the experiment's passes (engine/executor.py)."""
    ids = np.asarray(ids)
    rec = Recorder(residual=True)
    logits = model.forward(ids, model.new_cache(len(ids)), hooks=rec, run=run)[-1]  # [V]
    return Run(ids, rec.hidden_states(), logits)


ROWS = 512  # rows of one pass of variants: [512, F] activations, and products that BLAS runs at full speed


def rows_per_pass(model, run: Plain = PLAIN) -> int:
    """ROWS, or fewer: the most rows whose pass the executor computes as it does a few rows (its
    numerics). The fast executor's products of a few rows of a quantized model quantize the
    activations to 8 bits, unlike longer passes: the variants then compute as the recorded runs
    they are compared with, and a variant that changes nothing changes no bit (as fast at these
    sizes: benchmarks/README.md)."""
    few = run.numerics(model, 1)
    return next(r for r in range(ROWS, 0, -1) if r == 1 or run.numerics(model, r) == few)


def run_variants(model, first: int, n: int, t_len: int, make, hooks=None, run: Plain = PLAIN) -> np.ndarray:
    """n variants of one text's pass, from block `first` on, several at once: `make(group)` gives
    the residual streams entering block `first` for the variants in `group` (a range) [b, T, D];
    `hooks(group)` the hooks of their pass (each hook sees the b variants' rows one after another,
    [b*T, ...]). -> the residual stream at the last position after the last block, [n, D].

    Variants of one text would each read every weight of every block; run together as one
    [b*T, D] matrix (engine/kvcache.py Sequences), they read each weight once."""
    from tfcli.engine.kvcache import Sequences

    per = max(1, rows_per_pass(model, run) // t_len)
    out = []
    for a in range(0, n, per):
        group = range(a, min(a + per, n))
        x = make(group)  # [b, T, D]
        d = x.shape[-1]
        seqs = Sequences(len(group), t_len)
        rows, their_hooks = len(group) * t_len, None if hooks is None else hooks(group)
        sized = run.plan(model, seqs, rows, their_hooks).run  # the executor forward() would take: the same numbers
        y = model.blocks_from(first, x.reshape(-1, d), seqs, seqs.positions(rows), their_hooks, sized)  # [b*T, D]
        out.append(y.reshape(len(group), t_len, d)[:, -1])  # [b, D]
    return np.concatenate(out)  # [n, D]


def logits_of(model, last: np.ndarray, ids: list[int] | None = None, run: Plain = PLAIN) -> np.ndarray:
    """Residual streams after the last block [n, D] -> their logits [n, V], or only the columns `ids` [n, k]."""
    normed = model.final_norm(last)  # [n, D]
    if ids is None or model.quantized():  # a quantized one's as its passes compute them (rows_per_pass)
        logits = model.unembed(normed, run)  # [n, V]
        return logits if ids is None else logits[:, ids]
    return normed @ model.unembedding[:, ids]  # [n, D] @ [D, k] -> [n, k]


def check_block(model, block: int, what: str = "block") -> int:
    n = model.config.n_layer
    b = block + n if block < 0 else block
    if not 0 <= b < n:
        raise UsageError(f"{what} {block} is out of range: the model has blocks 0 to {n - 1}")
    return b
