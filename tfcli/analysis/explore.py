"""What the `tfcli explore` page shows, computed from one recorded forward pass: no files, no printing.

One pass over the text records every head's attention and the residual stream after every layer
(engine/inspect.py). From it come the four views of the page:

    attention   [L, H, T, T] weights, stored as the lower triangle only (the future is exactly 0),
                quantised to uint16 (steps of 1/65535)
    logit lens  for the embeddings and each layer, unembed(final_norm(h)) -> softmax over the whole
                vocabulary; the top LENS_TOP tokens per cell with their probabilities (uint16)
    next token  the model's real logits at every position; the NEXT_TOP largest, kept exactly as
                float32, so that the page can apply temperature / top-k / top-p / min-p to them with
                the rules of engine/sampling.py; plus the log-sum-exp over the whole vocabulary, so
                the page can say how much of the model's probability the stored candidates hold
    the model   its shapes and two parameter totals

The size of a page grows as L x H x T^2 (the attention); `token_limit` says how many tokens a model
may have so that a page stays a few megabytes, and texts past it are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TOKENS = 128  # past this, a head view of lines between two columns stops being readable anyway
CELL_BUDGET = 2_500_000  # stored attention weights (x 2 bytes, x 4/3 for base64): a page of ~7 MB at most
LENS_TOP = 5  # tokens per logit-lens cell (the one shown, the others on hover)
NEXT_TOP = 50  # candidates stored per position for the next-token view
QUANT = 65535  # probabilities and weights are stored as round(p * QUANT) in a uint16


def token_limit(cfg) -> int:
    """The longest text (in tokens) a page is made for: MAX_TOKENS, the context, and the attention budget."""
    heads = cfg.n_layer * cfg.n_head
    t = MAX_TOKENS
    while t > 1 and heads * t * (t + 1) // 2 > CELL_BUDGET:
        t -= 1
    return min(t, cfg.n_ctx)


@dataclass(frozen=True)
class Exploration:
    """Everything one pass over `ids` gives the page, as float arrays (quantise with `packed`)."""

    ids: list[int]  # [T] the tokens of the text
    attn: np.ndarray  # [L, H, T, T] float32, zero above the diagonal
    lens_ids: np.ndarray  # [L+1, T, LENS_TOP] int64, row 0 = the embeddings, row l+1 = after layer l
    lens_p: np.ndarray  # [L+1, T, LENS_TOP] float32, their probabilities (whole-vocabulary softmax)
    next_ids: np.ndarray  # [T, N] int64, the N most likely next tokens at each position, most likely first
    next_logits: np.ndarray  # [T, N] float32, their logits (exact)
    next_lse: np.ndarray  # [T] float32, log(sum(exp(logits))) over the whole vocabulary


def explore(model, ids: list[int], lens_top: int = LENS_TOP, next_top: int = NEXT_TOP, hooks=None,
            run=None) -> Exploration:
    """Run `ids` once through `model` (a tfcli Transformer) from an empty cache and keep what the page
    needs. `hooks`: an experiment's (steering), which change the pass before the recorder sees it;
    `run`: the executor of its products (None: the textbook, engine/executor.py)."""
    from tfcli.engine.executor import PLAIN
    from tfcli.engine.inspect import Recorder

    run = run or PLAIN
    cfg = model.config
    tokens = np.asarray(ids)
    rec = Recorder(attention=True, residual=True)
    logits = model.forward(tokens, model.new_cache(len(ids)), all_logits=True,
                           hooks=hooks.merge(rec) if hooks else rec, run=run)  # [T, V]
    attn = np.stack([rec.attn[i] for i in range(cfg.n_layer)]).astype(np.float32)  # [L, H, T, T]

    stream = [rec.embedded] + [rec.post[i] for i in range(cfg.n_layer)]  # [L+1] x [T, D]
    lens_ids, lens_p = [], []
    for h in stream:
        lens_logits = model.unembed(model.final_norm(h), run)  # [T, D] @ [D, V] -> [T, V]
        top, p = _top(lens_logits, lens_top)  # [T, K], [T, K] probabilities
        lens_ids.append(top)
        lens_p.append(p)
    top = _top_ids(logits, next_top)  # [T, N]
    lse = _logsumexp(logits)  # [T]
    return Exploration(
        ids=[int(i) for i in ids],
        attn=attn,
        lens_ids=np.stack(lens_ids),  # [L+1, T, K]
        lens_p=np.stack(lens_p).astype(np.float32),  # [L+1, T, K]
        next_ids=top,
        next_logits=np.take_along_axis(logits, top, axis=1).astype(np.float32),  # [T, N]
        next_lse=lse.astype(np.float32),
    )


def _top_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """[T, V] -> [T, k] the indices of the k largest per row, largest first (ties: lower id first)."""
    k = min(k, logits.shape[1])
    part = np.argpartition(-logits, k - 1, axis=1)[:, :k]  # [T, k], unordered
    vals = np.take_along_axis(logits, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)  # by value descending, then id
    return np.take_along_axis(part, order, axis=1)


def _logsumexp(logits: np.ndarray) -> np.ndarray:
    """[T, V] -> [T], in float64 so that the page's probabilities e^(x - lse) are accurate."""
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)  # [T, 1]
    return (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]


def _top(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """[T, V] logits -> ([T, k] ids, [T, k] their whole-vocabulary probabilities), most likely first."""
    top = _top_ids(logits, k)
    p = np.exp(np.take_along_axis(logits, top, axis=1).astype(np.float64) - _logsumexp(logits)[:, None])  # [T, k]
    return top, p


def quantise(p: np.ndarray) -> np.ndarray:
    """Values in [0, 1] -> uint16 steps of 1/QUANT (the page divides by QUANT)."""
    return np.round(np.clip(p, 0.0, 1.0) * QUANT).astype("<u2")


def lower_triangle(w: np.ndarray) -> np.ndarray:
    """[..., T, T] -> [..., T(T+1)/2]: row q keeps its q+1 weights on tokens 0..q, rows one after another
    (row q starts at q(q+1)/2); everything above the diagonal is masked to exactly 0 and not stored."""
    t = w.shape[-1]
    rows, cols = np.tril_indices(t)  # row-major: (0,0), (1,0), (1,1), (2,0), ...
    return w[..., rows, cols]


def packed(ex: Exploration) -> dict[str, np.ndarray]:
    """The arrays the page stores, in their stored types (little-endian, for JavaScript's typed arrays)."""
    return {
        "attn": quantise(lower_triangle(ex.attn)),  # [L, H, T(T+1)/2] uint16
        "lens_ids": ex.lens_ids.astype("<u4"),  # [L+1, T, K]
        "lens_p": quantise(ex.lens_p),  # [L+1, T, K] uint16
        "next_ids": ex.next_ids.astype("<u4"),  # [T, N]
        "next_logits": ex.next_logits.astype("<f4"),  # [T, N] exact
        "next_lse": ex.next_lse.astype("<f4"),  # [T]
    }


def shapes(cfg) -> dict[str, object]:
    """The model's shape, named as in the page's table."""
    return {
        "family": cfg.family,
        "layers": cfg.n_layer,
        "d_model": cfg.d_model,
        "heads": cfg.n_head,
        "kv_heads": cfg.n_kv_head,
        "head_dim": cfg.head_dim,
        "d_ff": cfg.d_ff,
        "vocab": cfg.vocab_size,
        "context": cfg.n_ctx,
        "norm": cfg.norm,
        "mlp": cfg.mlp,
        "positions": cfg.positions,
        "tied": bool(cfg.tie_embeddings),
    }


def kv_groups(cfg) -> list[list[int]]:
    """For each key/value head, the query heads that read it: query head h reads h // (H / Hkv), as in model.py."""
    g = cfg.q_per_kv
    return [list(range(k * g, (k + 1) * g)) for k in range(cfg.n_kv_head)]


def parameter_totals(cfg) -> dict[str, int]:
    """The exact count (every stored tensor, a tied unembedding once) and the 3Blue1Brown tally
    (weight matrices only, embedding and unembedding both): `tfcli params`' own two totals."""
    from tfcli.analysis.params.tally import exact, tally_3b1b

    return {"exact": exact(cfg).total, "tally": tally_3b1b(cfg).total}
