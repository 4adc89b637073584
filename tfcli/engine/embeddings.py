"""A text's embedding: the model's last hidden state after the final norm, pooled over its tokens.

This is what sentence-transformers and the OpenAI-style /v1/embeddings endpoints of local servers
(llama.cpp's --embeddings, vLLM's pooling models) return for a decoder model: transformers'
`hidden_states[-1]` (the residual stream leaving the last block, after the final norm), pooled
(the mean over the tokens by default; the last token for models whose sentence-transformers
pooling config says so, as decoder-based embedding models do), then scaled to length 1 so that a
dot product is a cosine.

The pass records the residual stream at one site (resid_post of the last block, engine/sites.py)
and applies the model's own `final_norm` to it; no flag enters the forward pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .errors import PromptError, UsageError
from .executor import PLAIN, Plain
from .model import Transformer
from .sites import Hooks, Site

CHUNK = 512  # tokens per forward pass: a long input's temporaries stay bounded
POOLINGS = ("mean", "last", "first")


def pooling_of(folder: Path) -> str:
    """The pooling a model folder asks for: sentence-transformers' 1_Pooling/config.json
    (pooling_mode_lasttoken -> "last", pooling_mode_cls_token -> "first"), else "mean"."""
    path = Path(folder) / "1_Pooling" / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "mean"
    if not isinstance(cfg, dict):
        return "mean"
    if cfg.get("pooling_mode_lasttoken") is True:
        return "last"
    if cfg.get("pooling_mode_cls_token") is True:
        return "first"
    return "mean"


def last_hidden(model: Transformer, ids: list[int], run: Plain = PLAIN) -> np.ndarray:
    """final_norm(residual stream after the last block) for every token: [T, D], transformers'
    hidden_states[-1][0]. Run CHUNK tokens per pass through one cache, on the executor `run`."""
    if not ids:
        raise PromptError("the input is empty (it encodes to no tokens)", "give some text")
    n_ctx = model.config.n_ctx
    if len(ids) > n_ctx:
        raise PromptError(
            f"the input is {len(ids):,} tokens; the model's context holds {n_ctx:,}", "shorten it, or embed it in parts"
        )
    last = model.config.n_layer - 1
    kept: list[np.ndarray] = []

    def keep(value: np.ndarray, site: Site) -> None:
        kept.append(value.copy())  # [t, D]; the pass's own array, copied before the next chunk

    hooks = Hooks().add("resid_post", keep, last)
    cache = model.new_cache(len(ids))
    tokens = np.asarray(ids)
    for a in range(0, len(ids), CHUNK):
        model.forward(tokens[a : a + CHUNK], cache, hooks=hooks, run=run)
    return model.final_norm(np.concatenate(kept))  # [T, D]


def pool(states: np.ndarray, pooling: str = "mean") -> np.ndarray:
    """[T, D] -> [D]: the mean over the tokens, or the last or first token's row."""
    if pooling == "mean":
        return states.astype(np.float64).mean(axis=0).astype(np.float32)  # float64 sum: T rows add no rounding
    if pooling == "last":
        return states[-1]
    if pooling == "first":
        return states[0]
    raise UsageError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}")


def normalized(v: np.ndarray, dimensions: int | None = None) -> np.ndarray:
    """[D] -> [d]: the first `dimensions` values (all by default), scaled to length 1 (OpenAI's
    `dimensions` shortens the vector, then normalizes it again). A zero vector stays zero."""
    if dimensions is not None:
        if not 1 <= dimensions <= v.shape[-1]:
            raise UsageError(f"dimensions must be between 1 and {v.shape[-1]}, not {dimensions}")
        v = v[:dimensions]
    norm = float(np.linalg.norm(v.astype(np.float64)))
    return (v / norm).astype(np.float32) if norm > 0 else v.astype(np.float32)


def embedding(
    model: Transformer, ids: list[int], pooling: str = "mean", dimensions: int | None = None, run: Plain = PLAIN
) -> np.ndarray:
    """A token sequence's embedding: [d], length 1 (d = dimensions, or the model width D; `run`: the executor)."""
    if pooling not in POOLINGS:
        raise UsageError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}")
    return normalized(pool(last_hidden(model, ids, run), pooling), dimensions)
