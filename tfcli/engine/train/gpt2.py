"""GPT-2, trainable: learned positions, pre-LayerNorm blocks, GELU MLP, tied unembedding.

The same block as engine/families/gpt2.py, with each step's backward. Names and layout are
transformers' GPT2LMHeadModel's (Conv1D weights [in, out]: y = x @ w + b).
"""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig
from . import layers as L
from .model import Params, Trainable, add, merge_heads, split_heads

P = "transformer."


class GPT2Trainable(Trainable):
    prefix = P
    embed_name = P + "wte.weight"

    def embed(self, ids, rng):
        """Token row plus position row: [B, T] -> [N, D]."""
        wte, wpe = self.params[P + "wte.weight"], self.params[P + "wpe.weight"]
        x = (wte[ids] + wpe[: ids.shape[1]]).reshape(-1, wte.shape[1])  # [B, T, D] + [T, D] -> [N, D]
        x, keep = L.dropout(x, self.dropout, rng)
        return x, (ids, keep)

    def embed_backward(self, dx, saved, grads) -> None:
        ids, keep = saved
        dx = L.dropout_backward(dx, keep).reshape(*ids.shape, -1)  # [B, T, D]
        add(grads, P + "wte.weight", L.embedding_backward(dx, ids, self.config.vocab_size))  # [V, D]
        d_wpe = np.zeros_like(self.params[P + "wpe.weight"])  # [n_ctx, D]: positions past T get nothing
        d_wpe[: ids.shape[1]] = dx.sum(axis=0)  # every sequence of the batch used the same rows
        add(grads, P + "wpe.weight", d_wpe)

    def block(self, x, i, shape, rng):
        """x + attention(ln_1(x)), then + mlp(ln_2(...)): [N, D] -> [N, D]."""
        p, w, cfg = f"{P}h.{i}.", self.params, self.config
        h1, s_ln1 = L.layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], cfg.norm_eps)  # [N, D]
        qkv = L.linear(h1, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"])  # [N, D] @ [D, 3D] -> [N, 3D]
        q, k, v = (split_heads(a, shape, cfg.n_head) for a in np.split(qkv, 3, axis=1))  # [B, H, T, Dh] each
        a, s_att = L.attention(q, k, v, self.causal)  # [B, H, T, Dh]
        a = merge_heads(a)  # [N, D]
        o = L.linear(a, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])  # [N, D]
        o, keep1 = L.dropout(o, self.dropout, rng)  # [N, D]
        x = x + o
        h2, s_ln2 = L.layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], cfg.norm_eps)  # [N, D]
        f = L.linear(h2, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"])  # [N, D] @ [D, F] -> [N, F]
        g, s_gelu = L.gelu(f)  # [N, F]
        m = L.linear(g, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])  # [N, F] @ [F, D] -> [N, D]
        m, keep2 = L.dropout(m, self.dropout, rng)  # [N, D]
        return x + m, (shape, h1, s_ln1, s_att, a, keep1, h2, s_ln2, g, s_gelu, keep2)

    def block_backward(self, dx, i, saved, grads):
        """The block in reverse: the residual stream passes dx through and adds each branch's share."""
        p, w = f"{P}h.{i}.", self.params
        shape, h1, s_ln1, s_att, a, keep1, h2, s_ln2, g, s_gelu, keep2 = saved
        dm = L.dropout_backward(dx, keep2)  # [N, D]
        dg, dw, db = L.linear_backward(dm, g, w[p + "mlp.c_proj.weight"])  # [N, F]
        put(grads, p + "mlp.c_proj.", dw, db)
        dh2, dw, db = L.linear_backward(L.gelu_backward(dg, s_gelu), h2, w[p + "mlp.c_fc.weight"])  # [N, D]
        put(grads, p + "mlp.c_fc.", dw, db)
        d_in, dgain, dbias = L.layer_norm_backward(dh2, s_ln2)  # [N, D]
        put(grads, p + "ln_2.", dgain, dbias)
        dx = dx + d_in  # the residual path plus the MLP's path
        da, dw, db = L.linear_backward(L.dropout_backward(dx, keep1), a, w[p + "attn.c_proj.weight"])  # [N, D]
        put(grads, p + "attn.c_proj.", dw, db)
        dq, dk, dv = L.attention_backward(split_heads(da, shape, self.config.n_head), s_att)  # [B, H, T, Dh] each
        dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=1)  # [N, 3D]
        dh1, dw, db = L.linear_backward(dqkv, h1, w[p + "attn.c_attn.weight"])  # [N, D]
        put(grads, p + "attn.c_attn.", dw, db)
        d_in, dgain, dbias = L.layer_norm_backward(dh1, s_ln1)  # [N, D]
        put(grads, p + "ln_1.", dgain, dbias)
        return dx + d_in

    def final_norm(self, x):
        return L.layer_norm(x, self.params[P + "ln_f.weight"], self.params[P + "ln_f.bias"], self.config.norm_eps)

    def final_norm_backward(self, dx, saved, grads):
        d_in, dgain, dbias = L.layer_norm_backward(dx, saved)
        put(grads, P + "ln_f.", dgain, dbias)
        return d_in


def put(grads: Params, prefix: str, dw: np.ndarray, db: np.ndarray) -> None:
    grads[prefix + "weight"], grads[prefix + "bias"] = dw, db


def shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in transformers' order."""
    D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    out = {P + "wte.weight": (V, D), P + "wpe.weight": (cfg.n_ctx, D)}
    for i in range(cfg.n_layer):
        p = f"{P}h.{i}."
        out |= {
            p + "ln_1.weight": (D,), p + "ln_1.bias": (D,),
            p + "attn.c_attn.weight": (D, 3 * D), p + "attn.c_attn.bias": (3 * D,),
            p + "attn.c_proj.weight": (D, D), p + "attn.c_proj.bias": (D,),
            p + "ln_2.weight": (D,), p + "ln_2.bias": (D,),
            p + "mlp.c_fc.weight": (D, F), p + "mlp.c_fc.bias": (F,),
            p + "mlp.c_proj.weight": (F, D), p + "mlp.c_proj.bias": (D,),
        }  # fmt: skip
    out |= {P + "ln_f.weight": (D,), P + "ln_f.bias": (D,)}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (V, D)
    return out


def init_params(cfg: ModelConfig, rng: np.random.Generator) -> Params:
    """A new GPT-2 as transformers' GPT2PreTrainedModel._init_weights makes one: weights N(0, 0.02),
    the projections into the residual stream N(0, 0.02 / sqrt(2 L)) (GPT-2 paper, section 2.3: each
    block adds to the stream twice), biases 0, LayerNorm gains 1."""
    resid_std = 0.02 / np.sqrt(2 * cfg.n_layer)
    params = {}
    for name, shape in shapes(cfg).items():
        if name.endswith("bias"):
            params[name] = np.zeros(shape, np.float32)
        elif ".ln_" in name:
            params[name] = np.ones(shape, np.float32)
        else:
            std = resid_std if name.endswith("c_proj.weight") else 0.02
            params[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return params


MODEL = GPT2Trainable
