"""Qwen3 (dense): Llama's block with an RMSNorm on each head's queries and keys before RoPE, no
biases, and a head size set apart from hidden_size / heads (Qwen3-0.6B: 16 heads of 128 in a width
of 1,024) (Qwen team 2025; transformers' modeling_qwen3.py). Llama's names plus q_norm and k_norm.
"""

from __future__ import annotations

from typing import Any

from ..config import ModelConfig
from ..errors import ConfigError
from . import llama

NAME = "qwen3"
MODEL_TYPES = ("qwen3",)
ARCHITECTURES = ("Qwen3ForCausalLM",)


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    if raw.get("use_sliding_window"):
        raise ConfigError(
            "config.json: Qwen3 sliding-window attention is not supported",
            "set use_sliding_window to false (as the released models do)",
        )
    return llama.config_from_hf(raw, family=NAME, qk_norm=True)


CENSUS = llama.CENSUS

GGUF = llama.GGUFNames(
    arch="qwen3",
    names={
        **llama.GGUF.names, "blk.{i}.attn_q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",
        "blk.{i}.attn_k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
    },
    config={
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "use_sliding_window": False, "hidden_act": "silu",
        "attention_bias": False,
    },
    # convert_hf_to_gguf.py's Qwen3Model is its Qwen2Model: NEOX RoPE, rows as Hugging Face stores them.
    permuted_qk=False,
    settings=llama.plain_rope,
)

MODEL = llama.Llama
