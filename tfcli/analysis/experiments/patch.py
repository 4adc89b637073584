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
alone, so a patched pass starts at block i with the recorded corrupt stream; and a change at
position p leaves positions 0..p-1 alone, so the pass runs positions p..T-1 only, on the corrupt
run's cache. Positions are visited from the last to the first: a pass at p rewrites positions p
and later only, never the earlier ones a later pass (at p' < p) reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfcli.engine.errors import UsageError
from tfcli.engine.inspect import Recorder
from tfcli.engine.sites import Hooks

from .common import Run, last_logits, record


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


def patch(model, clean_ids, corrupt_ids, site: str = "resid", answer: int | None = None, wrong: int | None = None) -> Patching:
    if site not in SITES:
        raise UsageError(f"unknown site {site!r}; patching sites are {', '.join(SITES)}")
    if len(clean_ids) != len(corrupt_ids):
        raise UsageError(f"the clean text has {len(clean_ids)} tokens and the corrupt one {len(corrupt_ids)}; patching needs the same number")
    clean, corrupt = _recorded(model, clean_ids, site), _recorded(model, corrupt_ids, site)
    answer = int(np.argmax(clean[0].logits)) if answer is None else answer
    wrong = int(np.argmax(corrupt[0].logits)) if wrong is None else wrong
    if answer == wrong:
        raise UsageError("the clean and the corrupt text predict the same token, so there is no difference to trace", "give --answer and --wrong")
    ld_clean, ld_corrupt = logit_diff(clean[0].logits, answer, wrong), logit_diff(corrupt[0].logits, answer, wrong)
    patched = {"resid": _resid, "mlp": _mlp, "heads": _heads}[site](model, clean, corrupt, answer, wrong)
    denom = ld_clean - ld_corrupt
    grid = (patched - ld_corrupt) / denom if denom != 0 else np.full_like(patched, np.nan)
    return Patching(site, clean[0], corrupt[0], answer, wrong, ld_clean, ld_corrupt, grid)


def _recorded(model, ids, site: str) -> tuple[Run, dict[int, np.ndarray], object]:
    """The run, the site's activations by block (mlp_out [T, D] or z [T, H, Dh]), and the cache."""
    ids = np.asarray(ids)
    kept: dict[int, np.ndarray] = {}
    rec = Recorder(residual=True)  # a recorder is hooks: one more keeps the site's activations
    if site in ("mlp", "heads"):
        rec.add("mlp_out" if site == "mlp" else "z", lambda value, s: kept.__setitem__(s.block, value))
    cache = model.new_cache(len(ids))
    logits = model.forward(ids, cache, hooks=rec)[-1]  # [V]
    return Run(ids, rec.hidden_states(), logits), kept, cache


def _resid(model, clean, corrupt, answer, wrong) -> np.ndarray:
    """[L+1, T]: the logit difference with the clean residual at (index i, position p)."""
    run, _, cache = corrupt
    n_index, t_len = len(run.resid), len(run.ids)
    out = np.empty((n_index, t_len))
    for p in reversed(range(t_len)):
        positions = np.arange(p, t_len)
        for i in range(n_index):
            x = run.resid[i][p:].copy()  # [T-p, D] the corrupt stream entering block i
            x[0] = clean[0].resid[i][p]
            x = model.blocks_from(i, x, cache, positions)  # [T-p, D]
            out[i, p] = logit_diff(last_logits(model, x), answer, wrong)
    return out


def _mlp(model, clean, corrupt, answer, wrong) -> np.ndarray:
    """[L, T]: the logit difference with the clean MLP output of block b at position p."""
    run, _, cache = corrupt
    n_layer, t_len = model.config.n_layer, len(run.ids)
    out = np.empty((n_layer, t_len))
    for p in reversed(range(t_len)):
        positions = np.arange(p, t_len)
        for b in range(n_layer):
            hooks = Hooks().add("mlp_out", _put_row(clean[1][b][p]), b)
            x = model.blocks_from(b, run.resid[b][p:], cache, positions, hooks)  # [T-p, D]
            out[b, p] = logit_diff(last_logits(model, x), answer, wrong)
    return out


def _put_row(row: np.ndarray):
    def put(value: np.ndarray, site) -> np.ndarray:
        value = value.copy()
        value[0] = row  # the first row of the pass is position p
        return value

    return put


def _heads(model, clean, corrupt, answer, wrong) -> np.ndarray:
    """[L, H]: the logit difference with the clean context vector of head h of block b, at every position."""
    run, _, _ = corrupt
    cfg, t_len = model.config, len(run.ids)
    out = np.empty((cfg.n_layer, cfg.n_head))
    cache = model.new_cache(t_len)  # every pass rewrites all positions from its block on
    positions = np.arange(t_len)
    for b in range(cfg.n_layer):
        for h in range(cfg.n_head):
            hooks = Hooks().add("z", _put_head(clean[1][b][:, h], h), b)
            x = model.blocks_from(b, run.resid[b], cache, positions, hooks)  # [T, D]
            out[b, h] = logit_diff(last_logits(model, x), answer, wrong)
    return out


def _put_head(z_head: np.ndarray, h: int):
    def put(value: np.ndarray, site) -> np.ndarray:
        value = value.copy()  # [T, H, Dh]
        value[:, h] = z_head
        return value

    return put
