"""Attribution patching: activation patching to first order, from one backward pass.

Activation patching (patch.py) runs the corrupt text again for every cell, with one activation
taken from the clean run. Attribution patching (Nanda 2023; Syed et al. 2023, "AtP") guesses every
cell at once: the metric M = logit(answer) - logit(wrong) at the last position is a function of
each activation a; near the corrupt run's value,

    M(a_clean) - M(a_corrupt) ≈ dM/da (at the corrupt run) · (a_clean - a_corrupt)

so one forward pass and one backward pass of the corrupt text (engine/grad/), and the clean run's
activations, give every cell; each is divided by M(clean) - M(corrupt), as patch.py divides. Where
the model is close to linear between the two runs the guess equals the real patch; where a
softmax or a norm saturates (often at the last position, or in the attention pattern) it breaks,
and the correlation of the two grids says how far to trust it.

    resid   [L+1, T]  residual index i (0: the embeddings, i: the output of block i-1) at position p
    heads   [L, H]    each head's context vector z at every position, summed over them
    mlp     [L, T]    each block's MLP output at position p

Saliency (gradient × input) is the same product for one text, at the embeddings, against zero:
how much each token's vector moves the metric to first order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfcli.engine import grad
from tfcli.engine.errors import UsageError
from tfcli.engine.inspect import Recorder

from .patch import SITES


@dataclass(frozen=True)
class Attribution:
    site: str  # "resid", "heads" or "mlp"
    clean_ids: np.ndarray  # [T]
    corrupt_ids: np.ndarray  # [T]
    answer: int
    wrong: int
    clean_ld: float  # M at the clean run
    corrupt_ld: float  # M at the corrupt run
    grid: np.ndarray  # resid [L+1, T]; heads [L, H]; mlp [L, T]: the first-order share of M(clean) - M(corrupt)


@dataclass(frozen=True)
class Saliency:
    ids: np.ndarray  # [T]
    answer: int
    wrong: int | None  # None: the metric is logit(answer) alone
    metric: float
    values: np.ndarray  # [T] gradient · embedding of each token


def _recorder(site: str) -> tuple[Recorder, dict[int, np.ndarray]]:
    """A recorder of the residual stream, plus the site's activations by block (z [T, H, Dh] or mlp_out [T, D])."""
    rec, kept = Recorder(residual=True), {}
    if site in ("heads", "mlp"):
        rec.add("z" if site == "heads" else "mlp_out", lambda value, s: kept.__setitem__(s.block, value))
    return rec, kept


def activations(rec: Recorder, kept: dict[int, np.ndarray], site: str) -> list[np.ndarray]:
    """The site's activations as the grid's rows: resid [L+1] x [T, D]; heads [L] x [T, H, Dh]; mlp [L] x [T, D]."""
    return rec.hidden_states() if site == "resid" else [kept[b] for b in sorted(kept)]


def site_gradients(grads: grad.Grads, site: str, n_layer: int) -> list[np.ndarray]:
    """The metric's gradient at the same rows (grad.Grads.sites)."""
    if site == "resid":
        return [grads.site("embed", -1)] + [grads.site("resid_post", b) for b in range(n_layer)]
    return [grads.site("z" if site == "heads" else "mlp_out", b) for b in range(n_layer)]


def attribute(model, clean_ids, corrupt_ids, site: str = "resid", answer: int | None = None,
              wrong: int | None = None) -> Attribution:
    """The attribution-patching grid of the clean text against the corrupt one (the same number of
    tokens); answer and wrong default as patch.py's do: the clean and the corrupt run's top token."""
    if site not in SITES:
        raise UsageError(f"unknown site {site!r}; attribution sites are {', '.join(SITES)}")
    clean_ids, corrupt_ids = np.asarray(clean_ids), np.asarray(corrupt_ids)
    if len(clean_ids) != len(corrupt_ids):
        raise UsageError(f"the clean text has {len(clean_ids)} tokens and the corrupt one {len(corrupt_ids)}; "
                         "attribution needs the same number")
    clean_rec, clean_kept = _recorder(site)
    clean_logits, _ = grad.record(model, clean_ids, clean_rec)  # [T, V]
    corrupt_rec, corrupt_kept = _recorder(site)
    corrupt_logits, tape = grad.record(model, corrupt_ids, corrupt_rec)  # [T, V]
    answer = int(np.argmax(clean_logits[-1])) if answer is None else answer
    wrong = int(np.argmax(corrupt_logits[-1])) if wrong is None else wrong
    if answer == wrong:
        raise UsageError("the clean and the corrupt text predict the same token, so there is no difference to trace",
                         "give --answer and --wrong")
    d = np.zeros_like(corrupt_logits)  # [T, V]: dM/d logits
    d[-1, answer], d[-1, wrong] = 1.0, -1.0
    grads = grad.backward(model, tape, d)
    ld_clean = float(clean_logits[-1, answer]) - float(clean_logits[-1, wrong])
    ld_corrupt = float(corrupt_logits[-1, answer]) - float(corrupt_logits[-1, wrong])
    rows = []
    for g, a, b in zip(site_gradients(grads, site, model.config.n_layer), activations(clean_rec, clean_kept, site),
                       activations(corrupt_rec, corrupt_kept, site)):
        change = g.astype(np.float64) * (a.astype(np.float64) - b)  # [T, D] or [T, H, Dh]
        rows.append(change.sum(axis=(0, 2)) if site == "heads" else change.sum(axis=-1))  # [H] or [T]
    denom = ld_clean - ld_corrupt
    grid = np.array(rows) / denom if denom != 0 else np.full((len(rows), len(rows[0])), np.nan)
    return Attribution(site, clean_ids, corrupt_ids, answer, wrong, ld_clean, ld_corrupt, grid)


def saliency(model, ids, answer: int | None = None, wrong: int | None = None) -> Saliency:
    """Gradient × input of each token for M = logit(answer) (- logit(wrong) if given) at the last
    position: the embedding's gradient times the embedding, summed over its D numbers [T]."""
    ids = np.asarray(ids)
    rec = Recorder(residual=True)
    logits, tape = grad.record(model, ids, rec)  # [T, V]
    answer = int(np.argmax(logits[-1])) if answer is None else answer
    if wrong == answer:
        raise UsageError("--answer and --wrong are the same token", "give two different tokens")
    d = np.zeros_like(logits)  # [T, V]
    d[-1, answer] = 1.0
    metric = float(logits[-1, answer])
    if wrong is not None:
        d[-1, wrong] = -1.0
        metric -= float(logits[-1, wrong])
    g = grad.backward(model, tape, d).site("embed", -1)  # [T, D]
    values = (g.astype(np.float64) * rec.embedded).sum(axis=-1)  # [T]
    return Saliency(ids, answer, wrong, metric, values)


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r of two grids over the cells finite in both (NaN when fewer than two, or one is constant)."""
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2 or np.std(a[ok]) == 0 or np.std(b[ok]) == 0:
        return float("nan")
    return float(np.corrcoef(a[ok], b[ok])[0, 1])
