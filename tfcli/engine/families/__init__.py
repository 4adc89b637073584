"""The model families tfcli runs, one module each, and the one registry of them.

A family module owns everything that differs between families:

    NAME, MODEL_TYPES, ARCHITECTURES   which config.json it runs (model_type, else architectures)
    config_from_hf(raw) -> ModelConfig its config.json keys, traits (norm, MLP, positions, biases)
    MODEL                              the Transformer subclass: name table (from_checkpoint), the
                                       attention and MLP steps of its block, embed, final norm
    CENSUS                             (regex, category) for each tensor name a checkpoint holds,
                                       for `tfcli params --from`
    GGUF                               llama.cpp's names for it and its GGUF settings (None: no GGUF conversion)

Adding a family is one module plus one line in FAMILIES below.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from ..config import ModelConfig
from ..errors import ConfigError, shown
from . import gemma3, gpt2, llama, phi3, qwen2, qwen3

FAMILIES: dict[str, ModuleType] = {m.NAME: m for m in (gpt2, llama, qwen2, qwen3, gemma3, phi3)}


def family(name: str) -> ModuleType:
    return FAMILIES[name]


def family_of(raw: dict[str, Any]) -> ModuleType:
    """The family that runs a config.json: by its model_type, or failing that its architectures."""
    model_type = raw.get("model_type")
    for fam in FAMILIES.values():
        if isinstance(model_type, str) and model_type in fam.MODEL_TYPES:
            return fam
    architectures = raw.get("architectures")
    for arch in architectures if isinstance(architectures, list) else []:
        for fam in FAMILIES.values():
            if isinstance(arch, str) and arch in fam.ARCHITECTURES:
                return fam
    known = ", ".join(sorted(t for fam in FAMILIES.values() for t in fam.MODEL_TYPES))
    raise ConfigError(
        f"config.json: model_type {shown(model_type)} is not supported", f"tfcli runs these model types: {known}"
    )


def config_from_hf(raw: Any) -> ModelConfig:
    """A ModelConfig from the dict of a Hugging Face config.json; ConfigError on anything impossible."""
    if not isinstance(raw, dict):
        raise ConfigError(
            "config.json does not hold a JSON object",
            "a config.json is one {...} object of settings; use the one saved with the weights",
        )
    return family_of(raw).config_from_hf(raw)


def read_config_json(path: Path) -> dict[str, Any]:
    """The JSON object of a config.json file, with one-line errors for every way it can be broken.
    Only a regular file of at most CONFIG_BYTES is read (a named pipe or /dev/urandom is refused)."""
    from ..files import CONFIG_BYTES, read_small_text

    path = Path(path)
    if not os.path.lexists(path):
        raise ConfigError(f"{path} is missing", "a model folder needs config.json next to its weights")
    text = read_small_text(path, CONFIG_BYTES, ConfigError)
    fix = "fix the file, or use the config.json saved with the weights"
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", fix) from None
    except (ValueError, RecursionError) as e:  # an integer of > 4300 digits; nesting deeper than Python's stack
        raise ConfigError(f"{path} is not valid JSON ({type(e).__name__})", fix) from None


def load_config(path: Path) -> ModelConfig:
    """Read and validate a config.json file."""
    return config_from_hf(read_config_json(Path(path)))
