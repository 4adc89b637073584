"""ModelConfig: the few numbers that fix a transformer's shapes, read from a Hugging Face config.json.

One frozen dataclass serves both families the engine runs. The field names use the axes of
STYLE.md (L layers, D width, H/Hkv heads, Dh head size, F MLP width, V vocabulary) and each
comment says where the value comes from in each family's config.json.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, shown

FAMILIES = ("gpt2", "llama")

# Which family runs a config.json: its model_type, or failing that its architectures entry.
_MODEL_TYPES = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama"}
_ARCHITECTURES = {
    "GPT2LMHeadModel": "gpt2",
    "GPT2Model": "gpt2",
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
}


@dataclass(frozen=True)
class ModelConfig:
    family: str  # "gpt2": LayerNorm, learned positions, GELU MLP; "llama": RMSNorm, RoPE, SwiGLU
    vocab_size: int  # V
    n_ctx: int  # longest sequence the model was trained for (GPT-2 n_positions; Llama max_position_embeddings)
    n_layer: int  # L
    d_model: int  # D
    n_head: int  # H query heads
    n_kv_head: int  # Hkv key/value heads; < H is grouped-query attention (GPT-2: always H)
    head_dim: int  # Dh; GPT-2 and most Llamas use D / H, some Llamas set it apart
    d_ff: int  # F: GPT-2 n_inner (default 4 D); Llama intermediate_size
    norm_eps: float  # GPT-2 layer_norm_epsilon (1e-5); Llama rms_norm_eps
    tie_embeddings: bool  # unembedding reuses the token embedding matrix (GPT-2 always; Llama if tied)
    rope_theta: float = 10000.0  # RoPE base (Llama only)
    attn_bias: bool = True  # biases on Q/K/V/O projections (GPT-2 yes; Llama attention_bias)
    mlp_bias: bool = True  # biases on MLP projections (GPT-2 yes; Llama mlp_bias)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @property
    def q_per_kv(self) -> int:
        """How many query heads share one key/value head (1 for plain multi-head attention)."""
        return self.n_head // self.n_kv_head

    def kv_cache_bytes(self, n_positions: int) -> int:
        """float32 K and V for every layer: 2 x L x Hkv x positions x Dh x 4 bytes."""
        return 2 * self.n_layer * self.n_kv_head * n_positions * self.head_dim * 4

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> ModelConfig:
        """Build from the dict of a Hugging Face config.json; raises ConfigError on anything impossible."""
        if not isinstance(raw, dict):
            raise ConfigError("config.json does not hold a JSON object", "a config.json is one {...} object of settings; use the one saved with the weights")
        family = _family_of(raw)
        reader = _Reader(raw)
        if family == "gpt2":
            d_model = reader.int("n_embd")
            n_head = reader.int("n_head")
            n_inner = raw.get("n_inner")
            if raw.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
                raise ConfigError(
                    f"config.json: activation_function {shown(raw.get('activation_function'))} is not supported",
                    "GPT-2 models use gelu_new (the tanh form of GELU)",
                )
            if raw.get("scale_attn_by_inverse_layer_idx") or raw.get("scale_attn_weights") is False:
                raise ConfigError(
                    "config.json: non-standard GPT-2 attention scaling is not supported",
                    "tfcli runs GPT-2 with scale_attn_weights true and scale_attn_by_inverse_layer_idx false",
                )
            cfg = cls(
                family="gpt2",
                vocab_size=reader.int("vocab_size"),
                n_ctx=reader.int("n_positions", "n_ctx"),
                n_layer=reader.int("n_layer"),
                d_model=d_model,
                n_head=n_head,
                n_kv_head=n_head,
                head_dim=d_model // n_head if d_model % n_head == 0 else -1,
                d_ff=4 * d_model if n_inner is None else reader.int("n_inner"),
                norm_eps=reader.float("layer_norm_epsilon", default=1e-5),
                tie_embeddings=bool(raw.get("tie_word_embeddings", True)),
                bos_token_id=reader.opt_int("bos_token_id"),
                eos_token_ids=reader.int_tuple("eos_token_id"),
            )
            if d_model % n_head:
                raise ConfigError(
                    f"config.json: n_embd {d_model} is not divisible by n_head {n_head}",
                    "fix n_embd or n_head so that each head gets n_embd / n_head dimensions",
                )
        else:
            d_model = reader.int("hidden_size")
            n_head = reader.int("num_attention_heads")
            n_kv_head = reader.int("num_key_value_heads", default=n_head)
            if raw.get("hidden_act", "silu") != "silu":
                raise ConfigError(f"config.json: hidden_act {shown(raw.get('hidden_act'))} is not supported", "Llama models use silu")
            scaling = raw.get("rope_scaling")
            rope_params = raw.get("rope_parameters") if isinstance(raw.get("rope_parameters"), dict) else {}
            rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type")) if isinstance(scaling, dict) else None
            rope_type = rope_type or rope_params.get("rope_type", "default")
            if rope_type != "default":
                raise ConfigError(f"config.json: RoPE scaling {shown(rope_type)} is not supported", "only plain RoPE is implemented")
            # transformers 5 moved rope_theta under rope_parameters; older files keep it at the top level.
            theta = rope_params.get("rope_theta", raw.get("rope_theta", 10000.0))
            head_dim_raw = raw.get("head_dim")
            cfg = cls(
                family="llama",
                vocab_size=reader.int("vocab_size"),
                n_ctx=reader.int("max_position_embeddings"),
                n_layer=reader.int("num_hidden_layers"),
                d_model=d_model,
                n_head=n_head,
                n_kv_head=n_kv_head,
                head_dim=reader.int("head_dim") if head_dim_raw is not None else (d_model // n_head if d_model % n_head == 0 else -1),
                d_ff=reader.int("intermediate_size"),
                norm_eps=reader.float("rms_norm_eps", default=1e-6),
                tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
                rope_theta=_positive_float(theta, "rope_theta"),
                attn_bias=bool(raw.get("attention_bias", False)),
                mlp_bias=bool(raw.get("mlp_bias", False)),
                bos_token_id=reader.opt_int("bos_token_id"),
                eos_token_ids=reader.int_tuple("eos_token_id"),
            )
            if cfg.head_dim == -1:
                raise ConfigError(
                    f"config.json: hidden_size {d_model} is not divisible by num_attention_heads {n_head}",
                    "set head_dim explicitly or fix the head count",
                )
            if n_head % n_kv_head:
                raise ConfigError(
                    f"config.json: num_attention_heads {n_head} is not a multiple of num_key_value_heads {n_kv_head}",
                    "grouped-query attention needs each key/value head shared by the same number of query heads",
                )
            if cfg.head_dim % 2:
                raise ConfigError(
                    f"config.json: head_dim {cfg.head_dim} is odd; rotary embeddings need an even head size",
                    "fix head_dim (or hidden_size / num_attention_heads) in config.json",
                )
        return cfg


def load_config(path: Path) -> ModelConfig:
    """Read and validate a config.json file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing", "a model folder needs config.json next to its weights") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text (byte {e.start:,})", "save config.json as UTF-8 JSON") from None
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}", "check that it is a readable file") from None
    fix = "fix the file, or use the config.json saved with the weights"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", fix) from None
    except (ValueError, RecursionError) as e:  # an integer of > 4300 digits; nesting deeper than Python's stack
        raise ConfigError(f"{path} is not valid JSON ({type(e).__name__})", fix) from None
    return ModelConfig.from_hf(raw)


def _family_of(raw: dict[str, Any]) -> str:
    model_type = raw.get("model_type")
    if isinstance(model_type, str) and model_type in _MODEL_TYPES:
        return _MODEL_TYPES[model_type]
    architectures = raw.get("architectures")
    for arch in architectures if isinstance(architectures, list) else []:
        if isinstance(arch, str) and arch in _ARCHITECTURES:
            return _ARCHITECTURES[arch]
    known = ", ".join(sorted(_MODEL_TYPES))
    raise ConfigError(
        f"config.json: model_type {shown(model_type)} is not supported",
        f"tfcli runs these model types: {known}",
    )


# Far beyond any real model, small enough that products of two of them cannot overflow int64.
_MAX_DIM = 1 << 24


class _Reader:
    """Typed, bounded access to config.json values, with one-line errors naming the key."""

    def __init__(self, raw: dict[str, Any]):
        self.raw = raw

    def int(self, *keys: str, default: int | None = None) -> int:
        for key in keys:
            if key in self.raw and self.raw[key] is not None:
                return _positive_int(self.raw[key], key)
        if default is not None:
            return default
        raise ConfigError(f"config.json has no {keys[0]!r}", "the model folder's config.json is incomplete; use the one saved with the weights")

    def opt_int(self, key: str) -> int | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, list):  # some configs list several; the first is the one used to start
            value = value[0] if value else None
            if value is None:
                return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"config.json: {key} must be a non-negative integer, not {shown(value)}", "fix the value in config.json")
        return value

    def int_tuple(self, key: str) -> tuple[int, ...]:
        value = self.raw.get(key)
        values = value if isinstance(value, list) else ([] if value is None else [value])
        for v in values:
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"config.json: {key} must be a non-negative integer or a list of them, not {shown(value)}", "fix the value in config.json")
        return tuple(values)

    def float(self, key: str, default: float) -> float:
        return _positive_float(self.raw.get(key, default), key)


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value > _MAX_DIM:
        raise ConfigError(
            f"config.json: {key} must be a positive integer up to {_MAX_DIM:,}, not {shown(value)}",
            "fix the value in config.json",
        )
    return value


def _positive_float(value: Any, key: str) -> float:
    # float() first: an integer too large for a float (10**400) is as wrong as infinity.
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e308 else math.nan
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(f"config.json: {key} must be a positive number, not {shown(value)}", "fix the value in config.json")
    return number

