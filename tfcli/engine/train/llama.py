"""Llama and Qwen2, trainable: RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP.

The same block as engine/families/llama.py, with each step's backward. Names and layout are
transformers' LlamaForCausalLM's: a Linear stores [out, in], so y = x @ w.T, and the gradient of
the stored matrix is the transpose of the [in, out] one (dw.T). Qwen2 is this model with biases
on q, k and v (config.qkv_bias); some Llamas have one on o too (attention_bias: config.o_bias).
"""

from __future__ import annotations


from .. import ops
from . import layers as L
from .model import Trainable, add, merge_heads, split_heads

P = "model."


class LlamaTrainable(Trainable):
    prefix = P
    embed_name = P + "embed_tokens.weight"

    def __init__(self, config, params, causal=True, dropout=0.0):
        super().__init__(config, params, causal, dropout)
        freqs = ops.rope_frequencies(config.head_dim, config.rope_theta)
        self.cos, self.sin = ops.rope_tables(config.n_ctx, freqs)  # [n_ctx, Dh/2] each

    def embed(self, ids, rng):
        """A row per token; positions enter through RoPE in every attention. [B, T] -> [N, D]"""
        table = self.params[self.embed_name]  # [V, D]
        x, keep = L.dropout(table[ids].reshape(-1, table.shape[1]), self.dropout, rng)  # [N, D]
        return x, (ids, keep)

    def embed_backward(self, dx, saved, grads) -> None:
        ids, keep = saved
        dx = L.dropout_backward(dx, keep)  # [N, D]
        add(grads, self.embed_name, L.embedding_backward(dx, ids, self.config.vocab_size))  # [V, D]

    def proj(self, x, name, bias: bool):
        """A Linear of the block: x [N, in] @ w[out, in].T (+ b) -> [N, out]."""
        w = self.params[name + ".weight"]
        return L.linear(x, w.T, self.params[name + ".bias"] if bias else None)

    def proj_backward(self, dy, x, name, bias: bool, grads):
        dx, dw, db = L.linear_backward(dy, x, self.params[name + ".weight"].T)  # dw [in, out]
        grads[name + ".weight"] = dw.T  # [out, in], as stored
        if bias:
            grads[name + ".bias"] = db
        return dx

    def block(self, x, i, shape, rng):
        """x + attention(rms(x)), then + swiglu_mlp(rms(...)): [N, D] -> [N, D]."""
        p, cfg = f"{P}layers.{i}.", self.config
        a_, m_ = p + "self_attn.", p + "mlp."
        t_len = shape[1]
        cos, sin = self.cos[:t_len], self.sin[:t_len]  # [T, Dh/2]
        h1, s_rms1 = L.rms_norm(x, self.params[p + "input_layernorm.weight"], cfg.norm_eps)  # [N, D]
        q = split_heads(self.proj(h1, a_ + "q_proj", cfg.qkv_bias), shape, cfg.n_head)  # [N, D] -> [B, H, T, Dh]
        k = split_heads(self.proj(h1, a_ + "k_proj", cfg.qkv_bias), shape, cfg.n_kv_head)  # [N, D] -> [B, Hkv, T, Dh]
        v = split_heads(self.proj(h1, a_ + "v_proj", cfg.qkv_bias), shape, cfg.n_kv_head)  # [B, Hkv, T, Dh]
        a, s_att = L.attention(L.rope(q, cos, sin), L.rope(k, cos, sin), v, self.causal)  # [B, H, T, Dh]
        a = merge_heads(a)  # [N, H*Dh]
        o = self.proj(a, a_ + "o_proj", cfg.o_bias)  # [N, H*Dh] @ [H*Dh, D] -> [N, D]
        o, keep1 = L.dropout(o, self.dropout, rng)  # [N, D]
        x = x + o
        h2, s_rms2 = L.rms_norm(x, self.params[p + "post_attention_layernorm.weight"], cfg.norm_eps)  # [N, D]
        gate, up = self.proj(h2, m_ + "gate_proj", False), self.proj(h2, m_ + "up_proj", False)  # [N, F] each
        g, s_glu = L.swiglu(gate, up)  # [N, F]
        m, keep2 = L.dropout(self.proj(g, m_ + "down_proj", False), self.dropout, rng)  # [N, F] @ [F, D] -> [N, D]
        return x + m, (shape, h1, s_rms1, s_att, a, keep1, h2, s_rms2, g, s_glu, keep2)

    def block_backward(self, dx, i, saved, grads):
        """The block in reverse; RoPE's backward turns the q and k gradients back by their angles."""
        p, cfg = f"{P}layers.{i}.", self.config
        a_, m_ = p + "self_attn.", p + "mlp."
        shape, h1, s_rms1, s_att, a, keep1, h2, s_rms2, g, s_glu, keep2 = saved
        cos, sin = self.cos[: shape[1]], self.sin[: shape[1]]
        dg = self.proj_backward(L.dropout_backward(dx, keep2), g, m_ + "down_proj", False, grads)  # [N, F]
        d_gate, d_up = L.swiglu_backward(dg, s_glu)  # [N, F] each
        dh2 = self.proj_backward(d_gate, h2, m_ + "gate_proj", False, grads)  # [N, D]
        dh2 = dh2 + self.proj_backward(d_up, h2, m_ + "up_proj", False, grads)  # [N, D]
        d_in, grads[p + "post_attention_layernorm.weight"] = L.rms_norm_backward(dh2, s_rms2)  # [N, D], [D]
        dx = dx + d_in
        da = self.proj_backward(L.dropout_backward(dx, keep1), a, a_ + "o_proj", cfg.o_bias, grads)  # [N, H*Dh]
        dq, dk, dv = L.attention_backward(split_heads(da, shape, cfg.n_head), s_att)  # [B, H|Hkv, T, Dh]
        dq, dk = L.rope_backward(dq, cos, sin), L.rope_backward(dk, cos, sin)
        dh1 = (
            self.proj_backward(merge_heads(dq), h1, a_ + "q_proj", cfg.qkv_bias, grads)
            + self.proj_backward(merge_heads(dk), h1, a_ + "k_proj", cfg.qkv_bias, grads)
            + self.proj_backward(merge_heads(dv), h1, a_ + "v_proj", cfg.qkv_bias, grads)
        )  # [N, D]: h1 fed all three projections
        d_in, grads[p + "input_layernorm.weight"] = L.rms_norm_backward(dh1, s_rms1)  # [N, D], [D]
        return dx + d_in

    def final_norm(self, x):
        return L.rms_norm(x, self.params[P + "norm.weight"], self.config.norm_eps)

    def final_norm_backward(self, dx, saved, grads):
        d_in, grads[P + "norm.weight"] = L.rms_norm_backward(dx, saved)
        return d_in


def shapes(cfg) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape (Linear weights [out, in]), in transformers' order."""
    D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    out = {P + "embed_tokens.weight": (V, D)}
    for i in range(cfg.n_layer):
        p, a = f"{P}layers.{i}.", f"{P}layers.{i}.self_attn."
        out[p + "input_layernorm.weight"] = (D,)
        for n, rows in (("q", cfg.d_attn), ("k", cfg.d_kv), ("v", cfg.d_kv)):
            out[a + f"{n}_proj.weight"] = (rows, D)
            if cfg.qkv_bias:
                out[a + f"{n}_proj.bias"] = (rows,)
        out[a + "o_proj.weight"] = (D, cfg.d_attn)
        if cfg.o_bias:
            out[a + "o_proj.bias"] = (D,)
        out[p + "post_attention_layernorm.weight"] = (D,)
        out |= {p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                p + "mlp.down_proj.weight": (D, F)}  # fmt: skip
    out[P + "norm.weight"] = (D,)
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (V, D)
    return out


MODEL = LlamaTrainable
