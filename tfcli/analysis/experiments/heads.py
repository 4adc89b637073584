"""What each head does: direct logit attribution, and detectors of well-known head types.

Direct logit attribution. The residual stream after the last block is a sum: the embeddings, and
for every block what each head adds (its context vector z_h through its rows of W_O), the output
bias, and the MLP's output. The final norm is not linear, but with its scale held at the value it
has for this residual it is; then every part goes through it and the target's unembedding column
on its own, and the parts add up to the logit (`total`). Gemma 3 norms the attention output after
W_O: that norm is frozen the same way, at its value for the block's whole output. A part with a large positive value
pushed the target up directly; the part's effect through later blocks is not counted.

Detectors (scores between 0 and 1, from the attention weights, Olsson et al. 2022):
    previous_token   mean attention from position t to t-1, over t >= 1 of the text
    first_token      mean attention from t to position 0 (an attention sink), over t >= 1
    induction        on R random tokens repeated twice: from t in the second copy to t-R+1, the
                     token after the earlier copy of the current token (what comes next last time)
    duplicate_token  the same, to t-R: the earlier copy of the current token itself
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.inspect import Recorder


@dataclass(frozen=True)
class Attribution:
    position: int
    target: int
    logit: float  # the model's logit for the target
    embedding: float
    heads: np.ndarray  # [L, H]
    mlps: np.ndarray  # [L]
    bias: float  # attention output biases and the final norm's bias
    total: float  # the sum of all the parts


def attribute(model, ids, position: int = -1, target: int | None = None, progress=None,
              run: Plain = PLAIN) -> Attribution:
    """progress(done, total), if given, is called after each block of the pass; `run`: its executor."""
    ids = np.asarray(ids)
    t_len, cfg = len(ids), model.config
    p = position + t_len if position < 0 else position
    rec = Recorder(residual=True)
    counted(rec, progress, 0, cfg.n_layer)
    z, mlp = {}, {}
    rec.add("z", lambda value, s: z.__setitem__(s.block, value[p]))  # [H, Dh]
    rec.add("mlp_out", lambda value, s: mlp.__setitem__(s.block, value[p]))  # [D]
    logits = model.forward(ids, model.new_cache(t_len), all_logits=True, hooks=rec, run=run)[p]  # [V]
    target = int(np.argmax(logits)) if target is None else int(target)
    x = rec.hidden_states()[-1][p].astype(np.float64)  # [D] the residual after the last block
    lin, const = model.frozen_final_norm(x)
    u = np.asarray(model.unembedding[:, target], dtype=np.float64)  # [D]

    def logit_of(c: np.ndarray) -> np.ndarray:  # parts [.., D] -> their logits [..]
        return lin(np.asarray(c, dtype=np.float64)) @ u

    heads = np.empty((cfg.n_layer, cfg.n_head))
    mlps = np.empty(cfg.n_layer)
    bias = 0.0 if const is None else float(np.asarray(const, dtype=np.float64) @ u)
    dh = cfg.head_dim
    for b, layer in enumerate(model.layers):
        w_o, b_o = model.output_projection(layer)
        parts = np.einsum("hd,hdk->hk", z[b].astype(np.float64),
                          np.asarray(w_o, dtype=np.float64).reshape(cfg.n_head, dh, -1))  # [H, D]
        # Gemma's norm after W_O, frozen
        post = model.frozen_attn_out(layer, parts.sum(axis=0) + (0.0 if b_o is None else b_o))
        if post is not None:
            parts = post(parts)  # [H, D]
            b_o = None if b_o is None else post(np.asarray(b_o, dtype=np.float64))  # [D]
        heads[b] = logit_of(parts)
        mlps[b] = logit_of(mlp[b])
        if b_o is not None:
            bias += float(logit_of(b_o))
    embedding = float(logit_of(rec.embedded[p]))
    total = embedding + heads.sum() + mlps.sum() + bias
    return Attribution(p, target, float(logits[target]), embedding, heads, mlps, bias, float(total))


@dataclass(frozen=True)
class Detectors:
    previous_token: np.ndarray  # [L, H]
    first_token: np.ndarray  # [L, H]
    induction: np.ndarray  # [L, H]
    duplicate_token: np.ndarray  # [L, H]
    induction_tokens: list[int]  # what was fed for the last two (BOS included, if any)
    repeat: int  # R


def counted(hooks, progress, before: int, total: int) -> None:
    """A hook after every block that calls progress(before + blocks done, total): a pass's progress,
    read at a site like any other (no flag through the blocks)."""
    if progress is not None:
        hooks.add("resid_post", lambda value, site: progress(before + site.block + 1, total))


def attention(model, ids, progress=None, before: int = 0, total: int = 0, run: Plain = PLAIN) -> list[np.ndarray]:
    """ids [T] -> every block's attention weights, [L] x [H, T, T]."""
    ids = np.asarray(ids)
    rec = Recorder(attention=True)
    counted(rec, progress, before, total)
    model.forward(ids, model.new_cache(len(ids)), hooks=rec, run=run)
    return [rec.attn[b] for b in range(model.config.n_layer)]


def repeated_tokens(tokenizer, vocab_size: int, repeat: int = 20, seed: int = 0) -> tuple[list[int], int]:
    """R random ordinary tokens twice, after the tokens the tokenizer puts before any prompt (a
    BOS): -> (ids, offset of the first copy)."""
    prefix = tokenizer.prompt("") if tokenizer is not None else []
    special = tokenizer.special_ids() if tokenizer is not None else set()
    allowed = np.array([i for i in range(vocab_size) if i not in special])
    rng = np.random.default_rng(seed)
    r = rng.choice(allowed, size=repeat, replace=len(allowed) < repeat).tolist()
    return [*prefix, *r, *r], len(prefix)


def detect(model, ids, tokenizer=None, repeat: int = 20, seed: int = 0, progress=None, run: Plain = PLAIN) -> Detectors:
    """progress(done, total), if given, is called after each block of its two passes; `run`: their executor."""
    n = model.config.n_layer
    text = attention(model, ids, progress, 0, 2 * n, run)  # [L] x [H, T, T]
    t = np.arange(1, len(ids))
    if len(ids) > 1:
        prev = np.array([a[:, t, t - 1].mean(axis=-1) for a in text])
    else:
        prev = np.zeros((model.config.n_layer, model.config.n_head))
    first = np.array([a[:, t, 0].mean(axis=-1) for a in text]) if len(ids) > 1 else np.zeros_like(prev)
    rep, off = repeated_tokens(tokenizer, model.config.vocab_size, repeat, seed)
    att = attention(model, rep, progress, n, 2 * n, run)
    second = np.arange(off + repeat, off + 2 * repeat)  # positions of the second copy
    induction = np.array([a[:, second, second - repeat + 1].mean(axis=-1) for a in att])  # [L, H]
    duplicate = np.array([a[:, second, second - repeat].mean(axis=-1) for a in att])
    return Detectors(prev, first, induction, duplicate, rep, repeat)
