"""Gemma 3's backward, step for step against engine/families/gemma3.py: embeddings scaled by √D,
(1 + w) RMSNorms before and after each step, per-head q/k norms and the query scale, RoPE with a
base per layer kind, sliding windows, a GeGLU MLP, soft-capped final logits."""

from __future__ import annotations

import numpy as np

from . import ops as G
from .model import Backward, Grads
from .tape import Step, Tape


class Gemma3Backward(Backward):
    def embed_backward(self, tape: Tape, dx: np.ndarray, grads: Grads) -> None:
        """x = token_embedding[tokens] · √D."""
        super().embed_backward(tape, dx * self.model.embed_scale, grads)

    def logits_backward(self, final: Step, d_logits: np.ndarray, grads: Grads) -> np.ndarray:
        """logits = cap·tanh(h @ U / cap) where the config caps them."""
        cap = self.config.extra.logit_softcap
        if cap is not None:
            capped = self.model._cap(final.product(self.model.unembedding)[1])  # [T, V]
            d_logits = G.softcap_backward(d_logits, capped, cap)  # [T, V]
        return super().logits_backward(final, d_logits, grads)

    def rms_backward(self, dy: np.ndarray, x: np.ndarray, path: str, scale: np.ndarray, grads: Grads) -> np.ndarray:
        """A (1 + w) RMSNorm: the gradient of its stored 1 + w is that of w."""
        dx, dg = G.rms_norm_backward(dy, x, scale, self.config.norm_eps)
        grads.add(path, dg)
        return dx

    def attn_norm_backward(self, x, layer, i, dy, grads):
        return self.rms_backward(dy, x, f"layers.{i}.attn_norm", layer.attn_norm, grads)

    def attention_backward(self, step: Step, layer, i: int, dout: np.ndarray, tape: Tape, grads: Grads) -> np.ndarray:
        """d out [T, D] -> d h [T, D]: back through the post-attention norm, o_proj, the attention,
        RoPE, the query scale, the q/k norms and the fused q/k/v product."""
        cfg, p, model = self.config, f"layers.{i}.", self.model
        t_len, H, Hkv = dout.shape[0], cfg.n_head, cfg.n_kv_head
        _, o = step.product(layer.wo)  # [T, D] before its norm
        do = self.rms_backward(dout, o, p + "post_attn_norm", layer.post_attn_norm, grads)  # [T, D]
        dz = self.linear_backward(step, layer.wo, layer.bo, do, grads, p + "wo", p + "bo")  # [T, H*Dh]
        dq, dk, dv = self.attend_backward(step, i, dz.reshape(t_len, H, cfg.head_dim), tape, grads)  # [T, H|Hkv, Dh]
        cos, sin = (model.rope_global if layer.window is None else model.rope_local)(tape.positions)  # [T, Dh/2] each
        dqk = G.apply_rope_backward(np.concatenate([dq, dk], axis=1), cos, sin)  # [T, H+Hkv, Dh]
        _, qkv = step.product(layer.w_qkv)
        qkv = qkv.reshape(t_len, H + 2 * Hkv, cfg.head_dim)  # [T, H+2Hkv, Dh]
        dq = self.rms_backward(dqk[:, :H] * model.q_factor, qkv[:, :H], p + "q_norm", layer.q_norm, grads)  # [T, H, Dh]
        dk = self.rms_backward(dqk[:, H:], qkv[:, H : H + Hkv], p + "k_norm", layer.k_norm, grads)  # [T, Hkv, Dh]
        dqkv = np.concatenate([dq, dk, dv], axis=1).reshape(t_len, -1)  # [T, (H+2Hkv)*Dh]
        return self.linear_backward(step, layer.w_qkv, layer.b_qkv, dqkv, grads, p + "w_qkv", p + "b_qkv")  # [T, D]

    def mlp_norm_backward(self, x, layer, i, dy, grads):
        return self.rms_backward(dy, x, f"layers.{i}.mlp_norm", layer.mlp_norm, grads)

    def mlp_backward(self, step: Step, layer, i: int, dout: np.ndarray, grads: Grads) -> np.ndarray:
        """The MLP's output was normed (post_feedforward_layernorm) before it joined the stream."""
        _, y = step.product(layer.mlp.w_out)  # [T, D]
        dy = self.rms_backward(dout, y, f"layers.{i}.post_mlp_norm", layer.post_mlp_norm, grads)
        return super().mlp_backward(step, layer, i, dy, grads)

    def final_norm_backward(self, x, dy, grads):
        return self.rms_backward(dy, x, "norm", self.model.norm, grads)

    def named(self, grads: Grads) -> dict[str, np.ndarray]:
        """transformers' Gemma3ForCausalLM names; a Linear stored [out, in]."""
        cfg, w = self.config, grads.weights
        out = {"model.embed_tokens.weight": w["token_embedding"]}
        edges = np.cumsum([0, cfg.d_attn, cfg.d_kv, cfg.d_kv])
        norms = {"attn_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
                 "mlp_norm": "pre_feedforward_layernorm", "post_mlp_norm": "post_feedforward_layernorm",
                 "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}  # fmt: skip
        for i in range(cfg.n_layer):
            p, a, l = f"model.layers.{i}.", f"model.layers.{i}.self_attn.", f"layers.{i}."
            for n, lo, hi in zip("qkv", edges[:-1], edges[1:]):
                out[a + f"{n}_proj.weight"] = w[l + "w_qkv"][:, lo:hi].T
                if l + "b_qkv" in w:
                    out[a + f"{n}_proj.bias"] = w[l + "b_qkv"][lo:hi]
            out[a + "o_proj.weight"] = w[l + "wo"].T
            if l + "bo" in w:
                out[a + "o_proj.bias"] = w[l + "bo"]
            out |= {p + f"{theirs}.weight": w[l + ours] for ours, theirs in norms.items()}
            f = cfg.d_ff
            out[p + "mlp.gate_proj.weight"] = w[l + "mlp.w_in"][:, :f].T
            out[p + "mlp.up_proj.weight"] = w[l + "mlp.w_in"][:, f:].T
            out[p + "mlp.down_proj.weight"] = w[l + "mlp.w_out"].T
        out["model.norm.weight"] = w["norm"]
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = w["unembedding"].T
        return out
