"""A card per feature: how often it fires, the contexts that fire it most (the token marked), and
the tokens its decoder direction pushes up and down. What `features top` prints, emits as JSON and
draws on its page."""

from __future__ import annotations

import numpy as np

from tfcli.engine.executor import PLAIN, Plain

from .features import Features, logit_effects, top_contexts

BEFORE, AFTER = 24, 6  # tokens of context shown around the marked one


def feature_cards(lm, f: Features, ids: list[int], n: int, contexts: int, chosen: list[int] | None = None,
                  run: Plain = PLAIN) -> dict:
    """{"tokens": vectors read, "cards": [...]} for the n features of largest mean activation over
    the text (or the `chosen` ones). `run`: the passes' executor."""
    from tfcli.analysis.features import WINDOW

    arr = np.asarray(ids, dtype=np.int64)
    t = top_contexts(lm.model, f, arr, contexts, min(WINDOW, lm.config.n_ctx), run)
    order = list(chosen) if chosen else [int(i) for i in np.argsort(-t.mean, kind="stable")[:n] if t.mean[i] > 0]
    tok = lm.tokenizer
    cards = []
    for i in order:
        up, down = logit_effects(lm.model, f, i, t.centre, float(t.best[i, 0]), 8, run)
        cards.append({
            "index": i, "frequency": float(t.freq[i]), "mean": float(t.mean[i]), "max": float(t.best[i, 0]),
            "contexts": [_context(tok, arr, int(p), float(a)) for a, p in zip(t.best[i], t.where[i]) if p >= 0],
            "up": [{"id": j, "text": tok.token_text(j), "logit": v} for j, v in up],
            "down": [{"id": j, "text": tok.token_text(j), "logit": v} for j, v in down],
        })  # fmt: skip
    return {"tokens": t.tokens, "cards": cards}


def _context(tok, ids: np.ndarray, p: int, act: float) -> dict:
    return {
        "position": p,
        "activation": act,
        "before": tok.decode([int(i) for i in ids[max(0, p - BEFORE) : p]]),
        "token": tok.decode([int(ids[p])]),
        "after": tok.decode([int(i) for i in ids[p + 1 : p + 1 + AFTER]]),
    }
