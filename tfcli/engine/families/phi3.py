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

import numpy as np

from .. import ops
from ..config import ModelConfig, positive_float, positive_int, settings_object
from ..errors import ConfigError, GGUFError, shown
from . import llama

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint

NAME = "phi3"
MODEL_TYPES = ("phi3",)
ARCHITECTURES = ("Phi3ForCausalLM",)


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise ConfigError(
            "config.json: Phi-3 with biases is not supported", "the released Phi-3 and Phi-4-mini models have none"
        )
    cfg = llama.config_from_hf(raw, family=NAME)
    params = settings_object(raw, "rope_parameters")
    value = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    factor = positive_float(value, "partial_rotary_factor")
    rotary_dim = int(cfg.head_dim * factor)
    if factor > 1 or rotary_dim < 2 or rotary_dim % 2:
        raise ConfigError(
            "config.json: partial_rotary_factor must be above 0 and at most 1, rotating an even number of each head's "
            f"{cfg.head_dim} dimensions, not {shown(value)}",
            "fix partial_rotary_factor in config.json",
        )
    window = None if raw.get("sliding_window") is None else positive_int(raw["sliding_window"], "sliding_window")
    scaling = cfg.extra.scaling
    n_ctx = cfg.n_ctx if scaling is None or scaling.kind != "longrope" else min(cfg.n_ctx, scaling.original_context)
    return replace(
        cfg,
        n_ctx=n_ctx,  # longrope: tfcli runs within the original context (see rope_scaling.longrope)
        rotary_dim=0 if rotary_dim == cfg.head_dim else rotary_dim,
        extra=llama.LlamaExtra(scaling, window if window is not None and window < n_ctx else None),
        windows=(window,) * cfg.n_layer if window is not None and window < n_ctx else (),
    )


# `tfcli params --from`: what each stored tensor is (names after the "model." prefix).
CENSUS = (
    (r"layers\.\d+\.self_attn\.qkv_proj\.weight", "qkv"),  # Q, K and V stacked, split by the heads' widths
    (r"layers\.\d+\.mlp\.gate_up_proj\.weight", "mlp"),
    *llama.CENSUS,
)


def gguf_settings(meta: llama.GGUFMetadata, config: dict[str, Any]) -> dict[str, Any]:
    """Phi-3's own entries from a llama.cpp GGUF (convert_hf_to_gguf.py, Phi3MiniModel): the rotated
    part of each head as rope.dimension_count, the window as attention.sliding_window (0: none,
    Phi-4-mini), and longrope's factors as the tensors rope_factors_short and rope_factors_long
    with rope.scaling.original_context_length and attn_factor (the attention factor)."""
    name, head_dim = meta.name, config["head_dim"]
    rotated = meta.count("rope.dimension_count", head_dim)
    if rotated > head_dim or rotated % 2:
        raise GGUFError(
            f"{name}: phi3.rope.dimension_count {rotated} must be even and at most the head size {head_dim}",
            "the file is corrupt",
        )
    if meta.get("rope.scaling.type", "none") != "none":
        raise GGUFError(
            f"{name}: RoPE scaling ({shown(meta.get('rope.scaling.type'))}) is not supported",
            "Phi-3 GGUFs carry longrope as rope_factors tensors",
        )
    window = meta.get("attention.sliding_window", 0)
    out: dict[str, Any] = {
        "partial_rotary_factor": rotated / head_dim,
        "sliding_window": meta.count("attention.sliding_window") if window else None,
    }
    rope = {"rope_type": "default", "rope_theta": config["rope_theta"], "partial_rotary_factor": rotated / head_dim}
    short, long = meta.tensor("rope_factors_short.weight"), meta.tensor("rope_factors_long.weight")
    if short is not None or long is not None:
        for what, f in (("rope_factors_short", short), ("rope_factors_long", long)):
            if f is None or f.shape != (rotated // 2,) or not np.isfinite(f).all() or f.min() <= 0:
                problem = (
                    "missing"
                    if f is None
                    else f"shape {list(f.shape)}"
                    if f.shape != (rotated // 2,)
                    else "not positive finite factors"
                )
                raise GGUFError(
                    f"{name}: {what}.weight is {problem}; longrope needs one positive factor for each of the "
                    f"{rotated // 2} rotated pairs",
                    "the file is corrupt",
                )
        original = meta.count("rope.scaling.original_context_length")
        rope |= {
            "rope_type": "longrope", "short_factor": [float(str(x)) for x in short],
            "long_factor": [float(str(x)) for x in long],
        }
        if meta.get("rope.scaling.attn_factor") is not None:
            rope["attention_factor"] = meta.number("rope.scaling.attn_factor")
        out["original_max_position_embeddings"] = original
        rope["original_max_position_embeddings"] = original
    return out | {"rope_parameters": rope}


# llama.cpp's names (gguf-py MODEL_TENSORS[PHI3]): Q, K and V fused as attn_qkv and the gate and
# up projections as ffn_up, as Phi3ForCausalLM stores them (gate first).
GGUF = llama.GGUFNames(
    arch="phi3",
    names={
        "token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight", "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
        "blk.{i}.attn_qkv.weight": "model.layers.{i}.self_attn.qkv_proj.weight",
        "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
        "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
        "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.gate_up_proj.weight",
        "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
    },
    config={"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_act": "silu", "attention_bias": False},
    # llama.cpp runs Phi-3 with NEOX RoPE (halves, as Hugging Face): rows as they are.
    permuted_qk=False,
    settings=gguf_settings,
    settings_tensors=("rope_factors_long.weight", "rope_factors_short.weight"),
)


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
                mlp=ops.MLP(
                    w_in=t.get(p + "mlp.gate_up_proj.weight", (2 * F, D)).T, act=ops.silu, gated=True,
                    w_out=t.get(p + "mlp.down_proj.weight", (D, F)).T,
                ),
            )

        embed = t.get("model.embed_tokens.weight", (V, D))
        if cfg.tie_embeddings:
            lm_head = embed
            t.ignore("lm_head.weight")
        else:
            lm_head = t.get("lm_head.weight", (V, D))
        return cls(cfg, embed, [layer(i) for i in range(cfg.n_layer)], t.get("model.norm.weight", (D,)), lm_head)


MODEL = Phi3
