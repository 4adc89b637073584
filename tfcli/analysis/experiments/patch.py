"""Activation patching: which activations of a clean run carry the difference to a corrupt one.

Two texts of the same length differ in a word ("The Eiffel Tower is in the city of" against
"The Colosseum ..."). The clean run says `answer`, the corrupt one `wrong`; ld = logit[answer] -
logit[wrong] at the last position. Put ONE activation of the clean run into the corrupt run and
measure how much of the difference comes back:

    cell = (ld_patched - ld_corrupt) / (ld_clean - ld_corrupt)      1: this spot carries all of it

The sites (TransformerLens's names in brackets): the residual stream at index i and position p
[resid_pre]; each head's context vector z before W_O at every position [z]; each MLP's output at
block b and position p [mlp_out].

Cheap by construction: a change at residual index i (the input of block i) leaves blocks 0..i-1
alone, so a patched pass starts at block i with the recorded corrupt stream; and the variants that
start at the same block (one per position, or one per head) go through the blocks together, as one
matrix of rows (common.run_variants), so that each weight is read once for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfcli.engine.errors import UsageError
from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.inspect import Recorder
from tfcli.engine.sites import Hooks

from .common import Run, logits_of, run_variants


@dataclass(frozen=True)
class Patching:
    site: str  # "resid", "heads" or "mlp"
    clean: Run
    corrupt: Run
    answer: int
    wrong: int
    clean_ld: float
    corrupt_ld: float
    grid: np.ndarray  # resid: [L+1, T]; mlp: [L, T]; heads: [L, H]


SITES = ("resid", "heads", "mlp")


def logit_diff(logits: np.ndarray, answer: int, wrong: int) -> float:
    return float(logits[answer]) - float(logits[wrong])


def patch(model, clean_ids, corrupt_ids, site: str = "resid", answer: int | None = None,
          wrong: int | None = None, progress=None,
          run: Plain = PLAIN) -> Patching:
    """progress(done, total), if given, is called after each residual index (resid) or block (heads,
    mlp); `run`: the executor of the passes (engine/executor.py)."""
    if site not in SITES:
        raise UsageError(f"unknown site {site!r}; patching sites are {', '.join(SITES)}")
    if len(clean_ids) != len(corrupt_ids):
        raise UsageError(f"the clean text has {len(clean_ids)} tokens and the corrupt one {len(corrupt_ids)}; "
                         "patching needs the same number")
    clean, corrupt = _recorded(model, clean_ids, site, run), _recorded(model, corrupt_ids, site, run)
    answer = int(np.argmax(clean[0].logits)) if answer is None else answer
    wrong = int(np.argmax(corrupt[0].logits)) if wrong is None else wrong
    if answer == wrong:
        raise UsageError("the clean and the corrupt text predict the same token, so there is no difference to trace",
                         "give --answer and --wrong")
    ld_clean, ld_corrupt = logit_diff(clean[0].logits, answer, wrong), logit_diff(corrupt[0].logits, answer, wrong)
    patched = {"resid": _resid, "mlp": _mlp, "heads": _heads}[site](model, clean, corrupt, answer, wrong,
                                                                    progress or _silent, run)
    denom = ld_clean - ld_corrupt
    grid = (patched - ld_corrupt) / denom if denom != 0 else np.full_like(patched, np.nan)
    return Patching(site, clean[0], corrupt[0], answer, wrong, ld_clean, ld_corrupt, grid)


def _recorded(model, ids, site: str, run: Plain) -> tuple[Run, dict[int, np.ndarray]]:
    """The run and the site's activations by block (mlp_out [T, D] or z [T, H, Dh])."""
    ids = np.asarray(ids)
    kept: dict[int, np.ndarray] = {}
    rec = Recorder(residual=True)  # a recorder is hooks: one more keeps the site's activations
    if site in ("mlp", "heads"):
        rec.add("mlp_out" if site == "mlp" else "z", lambda value, s: kept.__setitem__(s.block, value))
    logits = model.forward(ids, model.new_cache(len(ids)), hooks=rec, run=run)[-1]  # [V]
    return Run(ids, rec.hidden_states(), logits), kept


def _silent(done: int, total: int) -> None:
    pass


def _resid(model, clean, corrupt, answer, wrong, progress, run: Plain) -> np.ndarray:
    """[L+1, T]: the logit difference with the clean residual at (index i, position p). For each
    index, the T variants (one per position) run together from block i."""
    base, t_len = corrupt[0], len(corrupt[0].ids)
    out = np.empty((len(base.resid), t_len))
    for i in range(len(base.resid)):

        def make(group, i=i):
            x = np.repeat(base.resid[i][None], len(group), axis=0)  # [b, T, D] the corrupt stream entering block i
            for j, p in enumerate(group):
                x[j, p] = clean[0].resid[i][p]  # variant p: the clean stream at position p
            return x

        out[i] = _diffs(model, run_variants(model, i, t_len, t_len, make, run=run), answer, wrong, run)
        progress(i + 1, len(base.resid))
    return out


def _diffs(model, last: np.ndarray, answer: int, wrong: int, run: Plain) -> np.ndarray:
    z = logits_of(model, last, [answer, wrong], run).astype(np.float64)  # [n, 2]
    return z[:, 0] - z[:, 1]


def _mlp(model, clean, corrupt, answer, wrong, progress, run: Plain) -> np.ndarray:
    """[L, T]: the logit difference with the clean MLP output of block b at position p."""
    base, t_len = corrupt[0], len(corrupt[0].ids)
    out = np.empty((model.config.n_layer, t_len))
    for b in range(model.config.n_layer):
        make = lambda group, b=b: np.repeat(base.resid[b][None], len(group), axis=0)  # noqa: E731  [b, T, D]
        put = lambda group, b=b: Hooks().add("mlp_out", _put_rows(clean[1][b], group, t_len), b)  # noqa: E731
        out[b] = _diffs(model, run_variants(model, b, t_len, t_len, make, put, run), answer, wrong, run)
        progress(b + 1, model.config.n_layer)
    return out


def _put_rows(clean_out: np.ndarray, group: range, t_len: int):
    def put(value: np.ndarray, site) -> np.ndarray:
        value = value.reshape(len(group), t_len, -1).copy()  # [b, T, D]
        for j, p in enumerate(group):
            value[j, p] = clean_out[p]  # variant p: the clean MLP output at position p
        return value.reshape(len(group) * t_len, -1)

    return put


def _heads(model, clean, corrupt, answer, wrong, progress, run: Plain) -> np.ndarray:
    """[L, H]: the logit difference with the clean context vector of head h of block b, at every position."""
    base, t_len = corrupt[0], len(corrupt[0].ids)
    cfg = model.config
    out = np.empty((cfg.n_layer, cfg.n_head))
    for b in range(cfg.n_layer):
        make = lambda group, b=b: np.repeat(base.resid[b][None], len(group), axis=0)  # noqa: E731  [b, T, D]
        put = lambda group, b=b: Hooks().add("z", _put_heads(clean[1][b], group, t_len), b)  # noqa: E731
        out[b] = _diffs(model, run_variants(model, b, cfg.n_head, t_len, make, put, run), answer, wrong, run)
        progress(b + 1, cfg.n_layer)
    return out


def _put_heads(clean_z: np.ndarray, group: range, t_len: int):
    def put(value: np.ndarray, site) -> np.ndarray:
        value = value.reshape(len(group), t_len, *value.shape[1:]).copy()  # [b, T, H, Dh]
        for j, h in enumerate(group):
            value[j, :, h] = clean_z[:, h]  # variant h: head h's clean context vectors
        return value.reshape(len(group) * t_len, *value.shape[2:])

    return put
