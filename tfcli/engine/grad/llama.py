"""Llama's backward (and so Qwen2's, Qwen3's and Phi-3's, whose blocks are Llama's), step for step
against engine/families/llama.py: RMSNorm, Q, K and V from one product, Qwen3's per-head norms,
RoPE (whole or partial heads, longrope's scale), grouped-query attention over an optional sliding
window, a SwiGLU MLP."""

from __future__ import annotations

import numpy as np

from . import ops as G
from .model import Backward, Grads
from .tape import Step, Tape


class LlamaBackward(Backward):
    def attn_norm_backward(self, x, layer, i, dy, grads):
        dx, dg = G.rms_norm_backward(dy, x, layer.attn_norm, self.config.norm_eps)  # [T, D], [D]
        grads.add(f"layers.{i}.attn_norm", dg)
        return dx

    def attention_backward(self, step: Step, layer, i: int, dout: np.ndarray, tape: Tape, grads: Grads) -> np.ndarray:
        """d out [T, D] -> d h [T, D]: back through o_proj, the attention, RoPE, the q/k norms (Qwen3)
        and the fused q/k/v product."""
        cfg, p = self.config, f"layers.{i}."
        t_len, H, Hkv = dout.shape[0], cfg.n_head, cfg.n_kv_head
        dz = self.linear_backward(step, layer.wo, layer.bo, dout, grads, p + "wo", p + "bo")  # [T, H*Dh]
        dq, dk, dv = self.attend_backward(step, i, dz.reshape(t_len, H, cfg.head_dim), tape, grads)  # [T, H|Hkv, Dh]
        cos, sin = self.model.rope(tape.positions)  # [T, R/2] each
        dqk = G.apply_rope_backward(np.concatenate([dq, dk], axis=1), cos, sin)  # [T, H+Hkv, Dh], before the rotation
        if layer.q_norm is not None:  # Qwen3: each head's queries and keys were normed before they rotated
            _, qkv = step.product(layer.w_qkv)
            qkv = qkv.reshape(t_len, H + 2 * Hkv, cfg.head_dim)  # [T, H+2Hkv, Dh]
            dq, dgq = G.rms_norm_backward(dqk[:, :H], qkv[:, :H], layer.q_norm, cfg.norm_eps)  # [T, H, Dh], [Dh]
            k = qkv[:, H : H + Hkv]  # [T, Hkv, Dh]
            dk, dgk = G.rms_norm_backward(dqk[:, H:], k, layer.k_norm, cfg.norm_eps)  # [T, Hkv, Dh], [Dh]
            grads.add(p + "q_norm", dgq)
            grads.add(p + "k_norm", dgk)
            dqk = np.concatenate([dq, dk], axis=1)  # [T, H+Hkv, Dh]
        dqkv = np.concatenate([dqk, dv], axis=1).reshape(t_len, -1)  # [T, (H+2Hkv)*Dh]
        return self.linear_backward(step, layer.w_qkv, layer.b_qkv, dqkv, grads, p + "w_qkv", p + "b_qkv")  # [T, D]

    def mlp_norm_backward(self, x, layer, i, dy, grads):
        dx, dg = G.rms_norm_backward(dy, x, layer.mlp_norm, self.config.norm_eps)
        grads.add(f"layers.{i}.mlp_norm", dg)
        return dx

    def final_norm_backward(self, x, dy, grads):
        dx, dg = G.rms_norm_backward(dy, x, self.model.norm, self.config.norm_eps)
        grads.add("norm", dg)
        return dx

    def named(self, grads: Grads) -> dict[str, np.ndarray]:
        """transformers' LlamaForCausalLM names (Qwen2's, Qwen3's); a Linear stored [out, in]."""
        w, out = grads.weights, {"model.embed_tokens.weight": grads.weights["token_embedding"]}
        for i in range(self.config.n_layer):
            p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
            out[p + "input_layernorm.weight"] = w[f"layers.{i}.attn_norm"]
            out |= self.attention_names(w, i, a)
            out[a + "o_proj.weight"] = w[f"layers.{i}.wo"].T
            if f"layers.{i}.bo" in w:
                out[a + "o_proj.bias"] = w[f"layers.{i}.bo"]
            for n in ("q_norm", "k_norm"):
                if f"layers.{i}.{n}" in w:
                    out[a + f"{n}.weight"] = w[f"layers.{i}.{n}"]
            out[p + "post_attention_layernorm.weight"] = w[f"layers.{i}.mlp_norm"]
            out |= self.mlp_names(w, i, p + "mlp.")
        out["model.norm.weight"] = w["norm"]
        if not self.config.tie_embeddings:
            out["lm_head.weight"] = w["unembedding"].T  # [V, D]
        return out

    def attention_names(self, w: dict, i: int, a: str) -> dict[str, np.ndarray]:
        """q_proj, k_proj, v_proj [out, in] from the fused [D, (H+2Hkv)*Dh], and their biases."""
        cfg, out = self.config, {}
        edges = np.cumsum([0, cfg.d_attn, cfg.d_kv, cfg.d_kv])
        for n, lo, hi in zip("qkv", edges[:-1], edges[1:]):
            out[a + f"{n}_proj.weight"] = w[f"layers.{i}.w_qkv"][:, lo:hi].T
            if f"layers.{i}.b_qkv" in w:
                out[a + f"{n}_proj.bias"] = w[f"layers.{i}.b_qkv"][lo:hi]
        return out

    def mlp_names(self, w: dict, i: int, m: str) -> dict[str, np.ndarray]:
        f = self.config.d_ff
        w_in = w[f"layers.{i}.mlp.w_in"]  # [D, 2F]: gate, then up
        return {m + "gate_proj.weight": w_in[:, :f].T, m + "up_proj.weight": w_in[:, f:].T,
                m + "down_proj.weight": w[f"layers.{i}.mlp.w_out"].T}  # fmt: skip
