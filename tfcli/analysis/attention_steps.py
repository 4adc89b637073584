"""One head of one block taken apart, step by step, as the self-attention note derives it.

Pure NumPy, no I/O. The numbers are the model's own: a hook at site `resid_pre` keeps the block's
input x (engine/sites.py; the pass stops there, the later blocks would compute nothing shown), then
the family's own `attention` runs that block once more on it, on the textbook executor, whose
`attention` call is where q, k and v arrive exactly as the model uses them: projected, normed where
the family norms them (Qwen3, Gemma 3), rotated by RoPE, grouped by key/value head. Nothing here
knows a family's weights or layout: the family computes q, k and v; this module only follows one
head through the formula:

    x        [T, D]    the token vectors the head reads: the block's input after its norm
    q        [T, Dh]   q_t = x_t W_Q (this head's columns), after RoPE
    k, v     [T, Dh]   k_i = x_i W_K, v_i = x_i W_V (the key/value head this head reads), k after RoPE
    scores   [T, T]    q_t · k_i, every pair, the future too
    scaled   [T, T]    scores × scale, scale = 1/√Dh (ops.reference_attention)
    weights  [T, T]    softmax of each row of scaled, -inf above the diagonal first: 0 there, rows sum to 1
    context  [T, Dh]   c_t = Σ_i w_ti v_i
    output   [T, D]    c_t W_O[h]: the head's rows of the output projection; the block adds the H heads'
                       outputs (and W_O's bias) to the residual stream (Gemma 3 norms that sum first)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfcli.engine.executor import Plain
from tfcli.engine.ops import softmax
from tfcli.engine.sites import Hooks


@dataclass(frozen=True)
class AttentionSteps:
    block: int
    head: int
    kv_head: int  # the key/value head this query head reads (h // G)
    sharing: list[int]  # the query heads that read that key/value head (this one among them)
    rope: bool  # q and k are rotated by their position (else positions entered with the embeddings)
    window: int | None  # a sliding layer's window: a token sees itself and the window - 1 before it
    softcap: float | None  # scores become softcap·tanh(scaled / softcap) before the mask (Gemma 2)
    x: np.ndarray  # [T, D]
    q: np.ndarray  # [T, Dh] after RoPE
    k: np.ndarray  # [T, Dh] after RoPE
    v: np.ndarray  # [T, Dh]
    q_unrotated: np.ndarray | None  # [T, Dh] q before RoPE (None without RoPE)
    scores: np.ndarray  # [T, T]
    scale: float
    scaled: np.ndarray  # [T, T]
    allowed: np.ndarray  # [T, T] bool: where token t may look
    weights: np.ndarray  # [T, T]
    context: np.ndarray  # [T, Dh]
    output: np.ndarray  # [T, D]

    @property
    def masked(self) -> np.ndarray:
        """[T, T]: what softmax reads (masked_scores)."""
        return masked_scores(self.scaled, self.allowed, self.softcap)


def masked_scores(scaled: np.ndarray, allowed: np.ndarray, softcap: float | None) -> np.ndarray:
    """[T, T] scaled scores -> soft-capped if the model caps them, -inf where the mask forbids."""
    capped = scaled if not softcap else np.float32(softcap) * np.tanh(scaled / np.float32(softcap))
    return np.where(allowed, capped, np.float32(-np.inf)).astype(np.float32)


class _Stop(Exception):
    """Raised by the hook at the block's input once it has kept it."""


def block_input(model, ids: list[int], block: int) -> np.ndarray:
    """The residual stream entering `block` for the tokens ids, run from an empty cache: [T, D]."""
    kept: list[np.ndarray] = []

    def keep(x: np.ndarray, site) -> None:
        kept.append(x.copy())  # the pass's own array: copied before the pass is abandoned
        raise _Stop

    try:
        model.forward(np.asarray(ids), model.new_cache(len(ids)), hooks=Hooks().add("resid_pre", keep, block))
    except _Stop:
        pass
    return kept[0]


class _Seen(Plain):
    """The textbook executor, keeping what its attention is given (one block, one call):
    q [Hkv, G, T, Dh], keys [Hkv, Dh, S] (the cache's transposed view), values [Hkv, S, Dh]."""

    def attention(self, q, k, v, start, weights, window=None, softcap=None):
        self.q, self.k, self.v = q.copy(), k.transpose(0, 2, 1).copy(), v.copy()
        self.window, self.softcap = window, softcap
        return super().attention(q, k, v, start, weights, window, softcap)


def _run_block_attention(model, block: int, x: np.ndarray, positions: np.ndarray) -> _Seen:
    """The family's attention of `block` on x [T, D] at `positions` [T], from an empty cache."""
    from tfcli.engine.model import LayerCall

    layer = model.layers[block]
    seen = _Seen()
    model.attention(model.attn_norm(x, layer), layer, LayerCall(block, model.new_cache(len(x)), positions, seen))
    return seen


def attention_steps(model, ids: list[int], block: int, head: int) -> AttentionSteps:
    """Head `head` of block `block` over the tokens ids, step by step (module docstring)."""
    cfg = model.config
    t_len, dh = len(ids), cfg.head_dim
    g = cfg.q_per_kv
    kv, j = divmod(head, g)  # query head h reads key/value head h // G (transformers' repeat_kv)
    x_in = block_input(model, ids, block)  # [T, D]
    layer = model.layers[block]
    seen = _run_block_attention(model, block, x_in, np.arange(t_len))
    q, k, v = seen.q[kv, j], seen.k[kv], seen.v[kv]  # [T, Dh] each
    q_unrotated = None
    if cfg.positions == "rope":  # at position 0 RoPE turns nothing: the same pass there gives q before its rotation
        q_unrotated = _run_block_attention(model, block, x_in, np.zeros(t_len, dtype=np.int64)).q[kv, j]  # [T, Dh]
    scores = q @ k.T  # [T, Dh] @ [Dh, T] -> [T, T]
    scaled = (scores / np.sqrt(dh)).astype(np.float32)  # [T, T], as ops.reference_attention divides
    t = np.arange(t_len)
    allowed = t[None, :] <= t[:, None]  # [T, T]: itself and the past
    if seen.window:
        allowed &= t[:, None] - t[None, :] < seen.window
    weights = softmax(masked_scores(scaled, allowed, seen.softcap))  # [T, T], rows sum to 1, 0 where masked
    context = weights @ v  # [T, T] @ [T, Dh] -> [T, Dh]
    w_o, _ = model.output_projection(layer)  # [H*Dh, D] (perhaps quantized: a product, never a slice)
    alone = np.zeros((t_len, cfg.d_attn), dtype=np.float32)  # [T, H*Dh]: every other head's context 0
    alone[:, head * dh : (head + 1) * dh] = context
    output = Plain().linear(alone, w_o)  # [T, H*Dh] @ [H*Dh, D] -> [T, D]
    return AttentionSteps(
        block, head, kv, list(range(kv * g, (kv + 1) * g)), q_unrotated is not None, seen.window, seen.softcap,
        x=model.attn_norm(x_in, layer), q=q, k=k, v=v, q_unrotated=q_unrotated, scores=scores,
        scale=float(1 / np.sqrt(dh)),
        scaled=scaled, allowed=allowed, weights=weights, context=context, output=output,
    )  # fmt: skip
