"""RoPE stretched to a longer context than a model was trained on, as config.json and GGUF files
describe it: Llama 3's scaling, linear scaling and Phi-3's longrope. llama.py (and gemma3.py,
phi3.py through it) reads a config's settings here and turns them into each rotated pair's angle
per position; ops.rope_frequencies is the plain RoPE they stretch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ops
from ..config import ConfigReader, positive_float, positive_int, settings_object
from ..errors import ConfigError, shown


@dataclass(frozen=True)
class RopeScaling:
    """How a model stretches RoPE's frequencies to reach a longer context than it was trained on."""

    kind: str  # "llama3" (Llama 3.1+), "linear" (every frequency divided by factor) or "longrope" (Phi-3, Phi-4-mini)
    factor: float  # how much longer the context is (>= 1)
    low_freq_factor: float = 1.0  # llama3: wavelengths longer than original / low_freq_factor are divided by factor,
    high_freq_factor: float = 4.0  # those shorter than original / high_freq_factor are kept, the ones between blended
    original_context: int = 8192  # original_max_position_embeddings, the context it was trained on
    short_factor: tuple[float, ...] = ()  # longrope: each frequency's divisor within the original context [R/2]
    attention_factor: float = 1.0  # longrope: cos and sin are multiplied by it


def rope_settings(raw: dict[str, Any], params: dict[str, Any], family: str) -> tuple[float, RopeScaling | None]:
    """The RoPE base and scaling of a config.json: transformers 5 keeps both in `params`
    (rope_parameters), older files have rope_theta at the top level and a rope_scaling object."""
    theta = positive_float(params.get("rope_theta", raw.get("rope_theta", 10000.0)), "rope_theta")
    old = settings_object(raw, "rope_scaling")
    given = params if params.get("rope_type", "default") != "default" else old
    kind = given.get("rope_type", given.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind not in ("llama3", "linear", "longrope"):
        raise ConfigError(
            f"config.json: RoPE scaling {shown(kind)} is not supported",
            "only plain RoPE and the llama3, linear and longrope scalings are implemented",
        )
    if kind == "longrope":
        return theta, longrope(raw, given)
    factor = positive_float(given.get("factor"), "rope_scaling factor")
    if factor < 1:
        raise ConfigError(
            f"config.json: rope_scaling factor must be at least 1, not {shown(given.get('factor'))}",
            "a scaling factor stretches the context; fix it in config.json",
        )
    if kind == "linear":
        return theta, RopeScaling(kind, factor)
    low = positive_float(given.get("low_freq_factor"), "rope_scaling low_freq_factor")
    high = positive_float(given.get("high_freq_factor"), "rope_scaling high_freq_factor")
    if high <= low:
        raise ConfigError(
            f"config.json: rope_scaling high_freq_factor {shown(given.get('high_freq_factor'))} must be above "
            f"low_freq_factor {shown(given.get('low_freq_factor'))}",
            "fix the values in config.json",
        )
    original = positive_int(
        given.get("original_max_position_embeddings"), "rope_scaling original_max_position_embeddings"
    )
    return theta, RopeScaling(kind, factor, low, high, original)


def longrope(raw: dict[str, Any], given: dict[str, Any]) -> RopeScaling:
    """Phi-3's longrope (transformers' _compute_longrope_parameters) within the original context:
    the short factors, and cos and sin scaled by √(1 + ln(factor) / ln(original)). Beyond that
    context transformers switches to the long factors for the whole sequence; tfcli stops there."""
    original = positive_int(
        given.get("original_max_position_embeddings", raw.get("original_max_position_embeddings")),
        "original_max_position_embeddings",
    )
    short = given.get("short_factor")
    if not isinstance(short, list) or not short:
        raise ConfigError(
            f"config.json: rope_scaling short_factor must be a list of numbers, not {shown(short)}",
            "fix the value in config.json",
        )
    factors = tuple(positive_float(f, "rope_scaling short_factor") for f in short)
    factor = given.get("factor") or ConfigReader(raw).int("max_position_embeddings") / original
    factor = positive_float(factor, "rope_scaling factor")
    attention = given.get("attention_factor")
    if attention is None:
        attention = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0
    return RopeScaling(
        "longrope", factor, original_context=original, short_factor=factors,
        attention_factor=positive_float(attention, "rope_scaling attention_factor"),
    )


def rope_frequencies(rotary_dim: int, theta: float, scaling: RopeScaling | None) -> np.ndarray:
    """The angle per position of each rotated pair [R/2], stretched as `scaling` says.

    Llama 3 (Meta's llama-models `apply_scaling`; transformers' _compute_llama3_parameters): the
    slow rotations, whose wavelength exceeds what the original context could show, are slowed down
    by `factor`; the fast ones, which already turned many times, stay; those between are blended.
    """
    inv_freq = ops.rope_frequencies(rotary_dim, theta)  # [R/2]
    if scaling is None:
        return inv_freq
    if scaling.kind == "linear":
        return inv_freq / scaling.factor  # [R/2]
    if scaling.kind == "longrope":
        if len(scaling.short_factor) != len(inv_freq):
            raise ConfigError(
                f"config.json: rope_scaling short_factor has {len(scaling.short_factor)} entries for {len(inv_freq)} "
                "rotated pairs",
                "fix the value in config.json",
            )
        return inv_freq / np.array(scaling.short_factor)  # [R/2]
    wavelength = 2 * np.pi / inv_freq  # [R/2] positions per turn
    # [R/2]
    smooth = (scaling.original_context / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq  # [R/2]
    long = scaling.original_context / scaling.low_freq_factor
    short = scaling.original_context / scaling.high_freq_factor
    # [R/2]
    return np.where(wavelength > long, inv_freq / scaling.factor, np.where(wavelength < short, inv_freq, blended))
