"""GPT-2's backward, step for step against engine/families/gpt2.py: learned positions, LayerNorm,
Q, K, V from one product, a GELU MLP with biases."""

from __future__ import annotations

import numpy as np

from . import ops as G
from .model import Backward, Grads
from .tape import Step, Tape


class GPT2Backward(Backward):
    def embed_backward(self, tape: Tape, dx: np.ndarray, grads: Grads) -> None:
        """x = wte[tokens] + wpe[positions]: d x [T, D] goes to both rows read."""
        super().embed_backward(tape, dx, grads)  # wte
        if grads.wants("wpe"):
            grads.add("wpe", G.rows_backward(dx, tape.positions, self.model.wpe.shape[0]))  # [n_ctx, D]

    def attn_norm_backward(self, x, layer, i, dy, grads):
        dx, dg, db = G.layer_norm_backward(dy, x, layer.ln_1_g, self.config.norm_eps)  # [T, D], [D], [D]
        grads.add(f"layers.{i}.ln_1_g", dg)
        grads.add(f"layers.{i}.ln_1_b", db)
        return dx

    def attention_backward(self, step: Step, layer, i: int, dout: np.ndarray, tape: Tape, grads: Grads) -> np.ndarray:
        """d out [T, D] -> d h [T, D] through c_proj, the attention, the split and c_attn."""
        cfg, p = self.config, f"layers.{i}."
        t_len = dout.shape[0]
        dz = self.linear_backward(step, layer.c_proj_w, layer.c_proj_b, dout, grads, p + "c_proj_w", p + "c_proj_b")  # [T, H*Dh]
        dq, dk, dv = self.attend_backward(step, i, dz.reshape(t_len, cfg.n_head, cfg.head_dim), tape, grads)  # [T, H, Dh] each
        dqkv = np.concatenate([a.reshape(t_len, cfg.d_model) for a in (dq, dk, dv)], axis=1)  # [T, 3D]
        return self.linear_backward(step, layer.c_attn_w, layer.c_attn_b, dqkv, grads, p + "c_attn_w", p + "c_attn_b")  # [T, D]

    def mlp_norm_backward(self, x, layer, i, dy, grads):
        dx, dg, db = G.layer_norm_backward(dy, x, layer.ln_2_g, self.config.norm_eps)
        grads.add(f"layers.{i}.ln_2_g", dg)
        grads.add(f"layers.{i}.ln_2_b", db)
        return dx

    def final_norm_backward(self, x, dy, grads):
        dx, dg, db = G.layer_norm_backward(dy, x, self.model.ln_f_g, self.config.norm_eps)
        grads.add("ln_f_g", dg)
        grads.add("ln_f_b", db)
        return dx

    def named(self, grads: Grads) -> dict[str, np.ndarray]:
        """transformers' GPT2LMHeadModel names; its Conv1D weights are [in, out] as tfcli's."""
        w, out = grads.weights, {}
        out["transformer.wte.weight"] = w["token_embedding"]
        out["transformer.wpe.weight"] = w["wpe"]
        fields = {"ln_1_g": "ln_1.weight", "ln_1_b": "ln_1.bias", "c_attn_w": "attn.c_attn.weight", "c_attn_b": "attn.c_attn.bias",
                  "c_proj_w": "attn.c_proj.weight", "c_proj_b": "attn.c_proj.bias", "ln_2_g": "ln_2.weight", "ln_2_b": "ln_2.bias",
                  "mlp.w_in": "mlp.c_fc.weight", "mlp.b_in": "mlp.c_fc.bias", "mlp.w_out": "mlp.c_proj.weight", "mlp.b_out": "mlp.c_proj.bias"}  # fmt: skip
        for i in range(self.config.n_layer):
            for ours, theirs in fields.items():
                out[f"transformer.h.{i}.{theirs}"] = w[f"layers.{i}.{ours}"]
        out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = w["ln_f_g"], w["ln_f_b"]
        if not self.config.tie_embeddings:
            out["lm_head.weight"] = w["unembedding"].T  # [V, D]
        return out
