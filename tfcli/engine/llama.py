"""Llama: RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP (Touvron et al. 2023).

Hugging Face stores Linear weights as [out, in]. The name table turns each into [in, out] once,
at load, so that every matmul in `block` reads `x @ w` like GPT-2's. The three attention input
projections are fused into one [D, (H+2Hkv)*Dh] matrix and the SwiGLU gate and up projections into
one [D, 2F] (as GPT-2's c_attn fuses Q, K, V): a decode step then makes 4 matrix products per layer
instead of 7, and q and k leave the fused product side by side, so one RoPE call rotates both.
The fused matrices are copies, read from the file straight into their row blocks; the others stay
zero-copy views of the mapped file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ops
from .checkpoint import Checkpoint
from .config import ModelConfig
from .errors import ConfigError
from .kvcache import KVCache
from .memory import check_allocation
from .model import Transformer


@dataclass(frozen=True)
class LlamaLayer:
    attn_norm: np.ndarray  # [D]   input_layernorm
    w_qkv: np.ndarray  # [D, (H+2Hkv)*Dh]  q_proj, k_proj, v_proj side by side
    b_qkv: np.ndarray | None  # [(H+2Hkv)*Dh] when attention_bias
    wo: np.ndarray  # [H*Dh, D]  o_proj (view)
    bo: np.ndarray | None  # [D]
    mlp_norm: np.ndarray  # [D]   post_attention_layernorm
    w_gate_up: np.ndarray  # [D, 2F]  gate_proj, up_proj side by side
    w_down: np.ndarray  # [F, D]  down_proj (view)


class Llama(Transformer):
    tables = ("rotations",)

    def __init__(self, config: ModelConfig, embed_tokens, layers: list[LlamaLayer], norm, lm_head):
        self.config = config
        self.embed_tokens = embed_tokens  # [V, D]
        self.layers = layers
        self.norm = norm  # [D]
        self.lm_head_t = lm_head.T  # [D, V]; a view of embed_tokens when tied
        # Rotation tables (cos, sin), computed once for the positions used so far (a context can be
        # millions of positions long; a generation rarely is) and grown by doubling.
        empty = np.empty((0, config.head_dim // 2), dtype=np.float32)
        self.rotations = (empty, empty)  # [P, Dh/2] each

    def rope(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin for positions start..end-1, each [end - start, Dh/2]."""
        cos, sin = self.rotations  # read once: the parts of a prompt pass call this from several threads
        if end > len(cos):
            n = min(self.config.n_ctx, max(end, 2 * len(cos), 256))
            check_allocation(12 * n * self.config.head_dim, f"RoPE tables for {n:,} positions")
            cos, sin = self.rotations = ops.rope_tables(n, self.config.head_dim, self.config.rope_theta)
        return cos[start:end], sin[start:end]

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> Llama:
        """The name table: Hugging Face LlamaForCausalLM keys, each Linear transposed to [in, out]."""
        cfg, t = ckpt.config, ckpt.tensors
        D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
        q_dim, kv_dim = cfg.n_head * cfg.head_dim, cfg.n_kv_head * cfg.head_dim

        def fused(names_rows: list[tuple[str, int]], n_in: int) -> np.ndarray:
            """Stack [out_i, in] weights row-wise, read from the file straight into their rows
            (no transpose, no page of the mapping touched), and view the result as [in, sum(out_i)]."""
            w = np.empty((sum(rows for _, rows in names_rows), n_in), dtype=np.float32)  # [sum out_i, in]
            start = 0
            for name, rows in names_rows:
                t.read_into(name, (rows, n_in), w[start : start + rows])
                start += rows
            return w.T  # [in, sum out_i] view

        def layer(i: int) -> LlamaLayer:
            p = f"model.layers.{i}."
            a = p + "self_attn."
            qkv = [(a + "q_proj.weight", q_dim), (a + "k_proj.weight", kv_dim), (a + "v_proj.weight", kv_dim)]
            return LlamaLayer(
                attn_norm=t.get(p + "input_layernorm.weight", (D,)),
                w_qkv=fused(qkv, D),
                b_qkv=np.concatenate([t.get(a + f"{n}_proj.bias", (k,)) for n, k in zip("qkv", (q_dim, kv_dim, kv_dim))])
                if cfg.attn_bias
                else None,
                wo=t.get(a + "o_proj.weight", (D, q_dim)).T,  # [out, in] -> [in, out] view
                bo=t.get(a + "o_proj.bias", (D,)) if cfg.attn_bias else None,
                mlp_norm=t.get(p + "post_attention_layernorm.weight", (D,)),
                w_gate_up=fused([(p + "mlp.gate_proj.weight", F), (p + "mlp.up_proj.weight", F)], D),
                w_down=t.get(p + "mlp.down_proj.weight", (D, F)).T,
            )

        if cfg.mlp_bias:
            raise ConfigError("config.json: mlp_bias is not supported for Llama models")
        embed = t.get("model.embed_tokens.weight", (V, D))
        if cfg.tie_embeddings:
            lm_head = embed
            if "lm_head.weight" in t:
                t.used.add("lm_head.weight")
        else:
            lm_head = t.get("lm_head.weight", (V, D))
        # Non-persistent buffers some converters save; not parameters.
        for name in t.names:
            if name.endswith("rotary_emb.inv_freq"):
                t.used.add(name)
        return cls(cfg, embed, [layer(i) for i in range(cfg.n_layer)], t.get("model.norm.weight", (D,)), lm_head)

    def embed(self, tokens: np.ndarray, start: int) -> np.ndarray:
        return self.embed_tokens[tokens]  # [T, D]; positions enter through RoPE, not here

    def block(self, x, layer: LlamaLayer, index: int, cache: KVCache, start: int, attn_probs) -> np.ndarray:
        cfg = self.config
        t_len = x.shape[0]
        H, Hkv, F = cfg.n_head, cfg.n_kv_head, cfg.d_ff
        h = ops.rms_norm(x, layer.attn_norm, cfg.norm_eps)  # [T, D]
        qkv = ops.linear(h, layer.w_qkv)  # [T, D] @ [D, (H+2Hkv)*Dh] -> [T, (H+2Hkv)*Dh]
        if layer.b_qkv is not None:
            qkv += layer.b_qkv
        qkv = qkv.reshape(t_len, H + 2 * Hkv, cfg.head_dim)  # [T, H+2Hkv, Dh]
        cos, sin = self.rope(start, start + t_len)  # [T, Dh/2] each
        qk = ops.apply_rope(qkv[:, : H + Hkv], cos, sin)  # [T, H+Hkv, Dh]: queries and keys rotate together
        a = self.self_attention(qk[:, :H], qk[:, H:], qkv[:, H + Hkv :], index, cache, start, attn_probs)  # [T, H*Dh]
        a = ops.linear(a, layer.wo)  # [T, H*Dh] @ [H*Dh, D] -> [T, D]
        if layer.bo is not None:
            a += layer.bo
        x = x + a
        h = ops.rms_norm(x, layer.mlp_norm, cfg.norm_eps)  # [T, D]
        gu = ops.linear(h, layer.w_gate_up)  # [T, D] @ [D, 2F] -> [T, 2F]
        h = ops.silu(gu[:, :F]) * gu[:, F:]  # [T, F]
        return x + ops.linear(h, layer.w_down)  # [T, F] @ [F, D] -> [T, D]

    def unembed(self, x: np.ndarray) -> np.ndarray:
        return ops.rms_norm(x, self.norm, self.config.norm_eps) @ self.lm_head_t  # [T, D] @ [D, V] -> [T, V]
