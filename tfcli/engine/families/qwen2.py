"""Qwen2 (Qwen2, Qwen2.5): Llama's block with biases on the Q, K and V projections (none on O or
the MLP), RoPE base 1,000,000, tied embeddings in the small sizes (Yang et al. 2024; transformers'
modeling_qwen2.py). The weights have Llama's names, so the model is Llama's; only the config differs.
"""

from __future__ import annotations

from typing import Any

from ..config import ModelConfig
from ..errors import ConfigError
from . import llama

NAME = "qwen2"
MODEL_TYPES = ("qwen2",)
ARCHITECTURES = ("Qwen2ForCausalLM",)


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    if raw.get("use_sliding_window"):
        raise ConfigError(
            "config.json: Qwen2 sliding-window attention is not supported",
            "set use_sliding_window to false (as the released models do)",
        )
    return llama.config_from_hf(raw, family=NAME, qkv_bias=True, o_bias=False)


CENSUS = llama.CENSUS

GGUF = llama.GGUFNames(
    arch="qwen2",
    names={
        **llama.GGUF.names, "blk.{i}.attn_q.bias": "model.layers.{i}.self_attn.q_proj.bias",
        "blk.{i}.attn_k.bias": "model.layers.{i}.self_attn.k_proj.bias",
        "blk.{i}.attn_v.bias": "model.layers.{i}.self_attn.v_proj.bias",
    },
    config={
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "use_sliding_window": False, "hidden_act": "silu",
    },
    # llama.cpp runs Qwen2 with NEOX-style RoPE (halves, as Hugging Face), so its converter leaves the rows alone.
    permuted_qk=False,
    settings=llama.plain_rope,
)

MODEL = llama.Llama
