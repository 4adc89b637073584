"""Llama: RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP (Touvron et al. 2023).

Hugging Face stores Linear weights as [out, in]; the name table turns each into an [in, out] view
(`.T`, no copy) once, at load, so that every matmul in `block` reads `x @ w` like GPT-2's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ops
from .checkpoint import Checkpoint
from .config import ModelConfig
from .errors import ConfigError
from .kvcache import KVCache
from .model import Transformer


@dataclass(frozen=True)
class LlamaLayer:
    attn_norm: np.ndarray  # [D]   input_layernorm
    wq: np.ndarray  # [D, H*Dh]
    wk: np.ndarray  # [D, Hkv*Dh]
    wv: np.ndarray  # [D, Hkv*Dh]
    wo: np.ndarray  # [H*Dh, D]
    bq: np.ndarray | None  # [H*Dh] when attention_bias
    bk: np.ndarray | None  # [Hkv*Dh]
    bv: np.ndarray | None  # [Hkv*Dh]
    bo: np.ndarray | None  # [D]
    mlp_norm: np.ndarray  # [D]   post_attention_layernorm
    w_gate: np.ndarray  # [D, F]
    w_up: np.ndarray  # [D, F]
    w_down: np.ndarray  # [F, D]


class Llama(Transformer):
    tables = ("cos", "sin")

    def __init__(self, config: ModelConfig, embed_tokens, layers: list[LlamaLayer], norm, lm_head):
        self.config = config
        self.embed_tokens = embed_tokens  # [V, D]
        self.layers = layers
        self.norm = norm  # [D]
        self.lm_head_t = lm_head.T  # [D, V]; a view of embed_tokens when tied
        # Rotation tables for every position, computed once.
        self.cos, self.sin = ops.rope_tables(config.n_ctx, config.head_dim, config.rope_theta)  # [n_ctx, Dh/2] each

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> Llama:
        """The name table: Hugging Face LlamaForCausalLM keys, each Linear transposed to [in, out]."""
        cfg, t = ckpt.config, ckpt.tensors
        D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
        q_dim, kv_dim = cfg.n_head * cfg.head_dim, cfg.n_kv_head * cfg.head_dim

        def linear(name: str, n_out: int, n_in: int) -> np.ndarray:
            return t.get(name, (n_out, n_in)).T  # [out, in] -> [in, out] view

        def bias(name: str, n: int, present: bool) -> np.ndarray | None:
            return t.get(name, (n,)) if present else None

        def layer(i: int) -> LlamaLayer:
            p = f"model.layers.{i}."
            return LlamaLayer(
                attn_norm=t.get(p + "input_layernorm.weight", (D,)),
                wq=linear(p + "self_attn.q_proj.weight", q_dim, D),
                wk=linear(p + "self_attn.k_proj.weight", kv_dim, D),
                wv=linear(p + "self_attn.v_proj.weight", kv_dim, D),
                wo=linear(p + "self_attn.o_proj.weight", D, q_dim),
                bq=bias(p + "self_attn.q_proj.bias", q_dim, cfg.attn_bias),
                bk=bias(p + "self_attn.k_proj.bias", kv_dim, cfg.attn_bias),
                bv=bias(p + "self_attn.v_proj.bias", kv_dim, cfg.attn_bias),
                bo=bias(p + "self_attn.o_proj.bias", D, cfg.attn_bias),
                mlp_norm=t.get(p + "post_attention_layernorm.weight", (D,)),
                w_gate=linear(p + "mlp.gate_proj.weight", F, D),
                w_up=linear(p + "mlp.up_proj.weight", F, D),
                w_down=linear(p + "mlp.down_proj.weight", D, F),
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
        h = ops.rms_norm(x, layer.attn_norm, cfg.norm_eps)  # [T, D]
        q = h @ layer.wq  # [T, D] @ [D, H*Dh] -> [T, H*Dh]
        k = h @ layer.wk  # [T, D] @ [D, Hkv*Dh] -> [T, Hkv*Dh]
        v = h @ layer.wv  # [T, Hkv*Dh]
        if layer.bq is not None:
            q, k, v = q + layer.bq, k + layer.bk, v + layer.bv
        cos, sin = self.cos[start : start + t_len], self.sin[start : start + t_len]  # [T, Dh/2]
        q = ops.apply_rope(q.reshape(t_len, cfg.n_head, cfg.head_dim), cos, sin)  # [T, H, Dh]
        k = ops.apply_rope(k.reshape(t_len, cfg.n_kv_head, cfg.head_dim), cos, sin)  # [T, Hkv, Dh]
        v = v.reshape(t_len, cfg.n_kv_head, cfg.head_dim)  # [T, Hkv, Dh]
        a = self.self_attention(q, k, v, index, cache, start, attn_probs) @ layer.wo  # [T, H*Dh] @ [H*Dh, D] -> [T, D]
        if layer.bo is not None:
            a = a + layer.bo
        x = x + a
        h = ops.rms_norm(x, layer.mlp_norm, cfg.norm_eps)  # [T, D]
        h = ops.silu(h @ layer.w_gate) * (h @ layer.w_up)  # [T, F]
        return x + h @ layer.w_down  # [T, F] @ [F, D] -> [T, D]

    def unembed(self, x: np.ndarray) -> np.ndarray:
        return ops.rms_norm(x, self.norm, self.config.norm_eps) @ self.lm_head_t  # [T, D] @ [D, V] -> [T, V]
