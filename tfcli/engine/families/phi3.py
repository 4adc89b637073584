"""Phi-3 and Phi-4-mini (Phi3ForCausalLM): Llama's block, stored fused: one qkv_proj for the queries,
keys and values and one gate_up_proj for the SwiGLU gate and up projections; RoPE on only the first
partial_rotary_factor of each head (Phi-4-mini: 3/4 of 128 dimensions), the rest passing through;
a sliding window on every layer where sliding_window is shorter than the context (Phi-3-mini-4k);
longrope scaling (Phi-4-mini) within its original context (Abdin et al. 2024; transformers'
modeling_phi3.py). The fused matrices are what tfcli's Llama computes with anyway: they are read
as they are, transposed views.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import ops
from ..config import ModelConfig, positive_float, positive_int
from ..errors import ConfigError, shown
from . import llama

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint

NAME = "phi3"
MODEL_TYPES = ("phi3",)
ARCHITECTURES = ("Phi3ForCausalLM",)


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise ConfigError("config.json: Phi-3 with biases is not supported", "the released Phi-3 and Phi-4-mini models have none")
    cfg = llama.config_from_hf(raw, family=NAME)
    params = raw.get("rope_parameters") if isinstance(raw.get("rope_parameters"), dict) else {}
    value = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    factor = positive_float(value, "partial_rotary_factor")
    rotary_dim = int(cfg.head_dim * factor)
    if factor > 1 or rotary_dim < 2 or rotary_dim % 2:
        raise ConfigError(
            f"config.json: partial_rotary_factor must be above 0 and at most 1, rotating an even number of each head's {cfg.head_dim} dimensions, not {shown(value)}",
            "fix partial_rotary_factor in config.json",
        )
    window = None if raw.get("sliding_window") is None else positive_int(raw["sliding_window"], "sliding_window")
    scaling = cfg.extra.scaling
    n_ctx = cfg.n_ctx if scaling is None or scaling.kind != "longrope" else min(cfg.n_ctx, scaling.original_context)
    return replace(
        cfg,
        n_ctx=n_ctx,  # longrope: tfcli runs within the original context (see llama.longrope)
        rotary_dim=0 if rotary_dim == cfg.head_dim else rotary_dim,
        extra=llama.LlamaExtra(scaling, window if window is not None and window < n_ctx else None),
    )


# `tfcli params --from`: what each stored tensor is (names after the "model." prefix).
CENSUS = (
    (r"layers\.\d+\.self_attn\.qkv_proj\.weight", "qkv"),  # Q, K and V stacked, split by the heads' widths
    (r"layers\.\d+\.mlp\.gate_up_proj\.weight", "mlp"),
    *llama.CENSUS,
)

GGUF = None


class Phi3(llama.Llama):
    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> Phi3:
        """The name table: Hugging Face Phi3ForCausalLM keys; the fused qkv_proj [(H+2Hkv)*Dh, D]
        and gate_up_proj [2F, D] are, transposed, Llama's fused matrices (views, no copy)."""
        cfg, t = ckpt.config, ckpt.tensors
        D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size

        def layer(i: int) -> llama.LlamaLayer:
            p = f"model.layers.{i}."
            return llama.LlamaLayer(
                attn_norm=t.get(p + "input_layernorm.weight", (D,)),
                w_qkv=t.get(p + "self_attn.qkv_proj.weight", (cfg.d_attn + 2 * cfg.d_kv, D)).T,  # [D, (H+2Hkv)*Dh] view
                b_qkv=None,
                wo=t.get(p + "self_attn.o_proj.weight", (D, cfg.d_attn)).T,  # [H*Dh, D] view
                bo=None,
                mlp_norm=t.get(p + "post_attention_layernorm.weight", (D,)),
                mlp=ops.MLP(w_in=t.get(p + "mlp.gate_up_proj.weight", (2 * F, D)).T, act=ops.silu, gated=True, w_out=t.get(p + "mlp.down_proj.weight", (D, F)).T),
            )

        embed = t.get("model.embed_tokens.weight", (V, D))
        if cfg.tie_embeddings:
            lm_head = embed
            t.ignore("lm_head.weight")
        else:
            lm_head = t.get("lm_head.weight", (V, D))
        return cls(cfg, embed, [layer(i) for i in range(cfg.n_layer)], t.get("model.norm.weight", (D,)), lm_head)


MODEL = Phi3
