"""GPT-2: learned positions, pre-LayerNorm blocks, GELU MLP, tied unembedding.

Weights keep the Hugging Face GPT-2 names and its Conv1D orientation [in, out], so `x @ w` needs
no transpose (Radford et al. 2019; transformers' modeling_gpt2.py for the layout).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ops
from .checkpoint import Checkpoint
from .config import ModelConfig
from .kvcache import KVCache
from .model import Transformer


@dataclass(frozen=True)
class GPT2Layer:
    ln_1_g: np.ndarray  # [D]
    ln_1_b: np.ndarray  # [D]
    c_attn_w: np.ndarray  # [D, 3D]  Q, K, V side by side
    c_attn_b: np.ndarray  # [3D]
    c_proj_w: np.ndarray  # [D, D]  attention output
    c_proj_b: np.ndarray  # [D]
    ln_2_g: np.ndarray  # [D]
    ln_2_b: np.ndarray  # [D]
    c_fc_w: np.ndarray  # [D, F]  MLP up
    c_fc_b: np.ndarray  # [F]
    mlp_proj_w: np.ndarray  # [F, D]  MLP down
    mlp_proj_b: np.ndarray  # [D]


# Buffers that old GPT-2 checkpoints saved alongside the weights (the causal mask); not parameters.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")


class GPT2(Transformer):
    def __init__(self, config: ModelConfig, wte, wpe, layers: list[GPT2Layer], ln_f_g, ln_f_b, lm_head):
        self.config = config
        self.wte = wte  # [V, D] token embeddings
        self.wpe = wpe  # [n_ctx, D] learned position embeddings
        self.layers = layers
        self.ln_f_g = ln_f_g  # [D]
        self.ln_f_b = ln_f_b  # [D]
        self.lm_head_t = lm_head.T  # [D, V] view; the same memory as wte when tied

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> GPT2:
        """The name table: Hugging Face GPT-2 keys, with or without the 'transformer.' prefix."""
        cfg, t = ckpt.config, ckpt.tensors
        p = "transformer." if "transformer.wte.weight" in t else ""
        D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size

        def layer(i: int) -> GPT2Layer:
            h = f"{p}h.{i}."
            return GPT2Layer(
                ln_1_g=t.get(h + "ln_1.weight", (D,)),
                ln_1_b=t.get(h + "ln_1.bias", (D,)),
                c_attn_w=t.get(h + "attn.c_attn.weight", (D, 3 * D)),
                c_attn_b=t.get(h + "attn.c_attn.bias", (3 * D,)),
                c_proj_w=t.get(h + "attn.c_proj.weight", (D, D)),
                c_proj_b=t.get(h + "attn.c_proj.bias", (D,)),
                ln_2_g=t.get(h + "ln_2.weight", (D,)),
                ln_2_b=t.get(h + "ln_2.bias", (D,)),
                c_fc_w=t.get(h + "mlp.c_fc.weight", (D, F)),
                c_fc_b=t.get(h + "mlp.c_fc.bias", (F,)),
                mlp_proj_w=t.get(h + "mlp.c_proj.weight", (F, D)),
                mlp_proj_b=t.get(h + "mlp.c_proj.bias", (D,)),
            )

        wte = t.get(p + "wte.weight", (V, D))
        if cfg.tie_embeddings:
            lm_head = wte
            if "lm_head.weight" in t:
                t.used.add("lm_head.weight")  # a copy of wte that some savers write out; not read
        else:
            lm_head = t.get("lm_head.weight", (V, D))
        for name in t.names:
            if name.endswith(IGNORED_SUFFIXES):
                t.used.add(name)
        return cls(
            cfg,
            wte=wte,
            wpe=t.get(p + "wpe.weight", (cfg.n_ctx, D)),
            layers=[layer(i) for i in range(cfg.n_layer)],
            ln_f_g=t.get(p + "ln_f.weight", (D,)),
            ln_f_b=t.get(p + "ln_f.bias", (D,)),
            lm_head=lm_head,
        )

    def embed(self, tokens: np.ndarray, start: int) -> np.ndarray:
        positions = np.arange(start, start + len(tokens))
        return self.wte[tokens] + self.wpe[positions]  # [T, D] + [T, D]

    def block(self, x, layer: GPT2Layer, index: int, cache: KVCache, start: int, attn_probs) -> np.ndarray:
        cfg = self.config
        t_len, D = x.shape
        h = ops.layer_norm(x, layer.ln_1_g, layer.ln_1_b, cfg.norm_eps)  # [T, D]
        qkv = h @ layer.c_attn_w + layer.c_attn_b  # [T, D] @ [D, 3D] -> [T, 3D]
        q, k, v = (a.reshape(t_len, cfg.n_head, cfg.head_dim) for a in np.split(qkv, 3, axis=1))  # [T, H, Dh] each
        a = self.self_attention(q, k, v, index, cache, start, attn_probs)  # [T, D]
        x = x + (a @ layer.c_proj_w + layer.c_proj_b)  # [T, D]
        h = ops.layer_norm(x, layer.ln_2_g, layer.ln_2_b, cfg.norm_eps)  # [T, D]
        h = ops.gelu(h @ layer.c_fc_w + layer.c_fc_b)  # [T, D] @ [D, F] -> [T, F]
        return x + (h @ layer.mlp_proj_w + layer.mlp_proj_b)  # [T, F] @ [F, D] -> [T, D]

    def unembed(self, x: np.ndarray) -> np.ndarray:
        x = ops.layer_norm(x, self.ln_f_g, self.ln_f_b, self.config.norm_eps)  # [T, D]
        return x @ self.lm_head_t  # [T, D] @ [D, V] -> [T, V]
