"""Bad values of the config keys the newer families read (Llama 3's RoPE scaling, Gemma 3's windows
and layer types, Phi-3's partial rotation): each ends in one error line (exit 1). The tiny Llama's
folder with its config.json changed: the config is refused before any weight is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from badinput import Cases, edit_config, gen, run_case
from conftest import TINY_LLAMA, one_line_error

SHAKESPEARE = Path(__file__).parent.parent / "weights" / "shakespeare"
CASES = Cases()

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


@CASES.case(1, "rope_scaling factor must be at least 1, not 0.5", "fix it in config.json")
def llama3_factor_below_one(env):
    return gen(edit_config(env.model(TINY_LLAMA), rope_parameters={**LLAMA3, "factor": 0.5, "rope_theta": 10000.0}))


@CASES.case(1, "rope_scaling factor must be at least 1, not 0.25", "fix it in config.json")
def llama3_factor_below_one_old_key(env):
    return gen(edit_config(env.model(TINY_LLAMA), rope_scaling={**LLAMA3, "factor": 0.25}))


@CASES.case(1, "rope_scaling high_freq_factor 1.0 must be above low_freq_factor 1.0", "fix the values")
def llama3_equal_freq_factors(env):
    return gen(edit_config(env.model(TINY_LLAMA), rope_scaling={**LLAMA3, "high_freq_factor": 1.0}))


@CASES.case(1, "rope_scaling original_max_position_embeddings must be a positive integer", "fix the value")
def llama3_no_original_context(env):
    return gen(edit_config(env.model(TINY_LLAMA), rope_scaling={k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"}))


@CASES.case(1, "RoPE scaling 'dynamic' is not supported", "only plain RoPE")
def other_scaling_by_name(env):
    return gen(edit_config(env.model(TINY_LLAMA), rope_parameters={"rope_type": "dynamic", "factor": 2.0}))


def gemma(env, **changes):
    """The tiny Llama's folder claiming to be a 3-layer Gemma 3 (refused before its weights are read)."""
    base = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "hidden_activation": "gelu_pytorch_tanh", "head_dim": 16}
    return gen(edit_config(env.model(TINY_LLAMA), **(base | changes)))


@CASES.case(1, "sliding_window must be a positive integer up to 16,777,216, not 0", "fix the value in config.json")
def gemma_window_of_zero(env):
    return gemma(env, sliding_window=0)


@CASES.case(1, "layer_types must list one type for each of the 3 layers, not 2 entries", "fix layer_types")
def gemma_layer_types_too_short(env):
    return gemma(env, sliding_window=4, layer_types=["sliding_attention", "full_attention"])


@CASES.case(1, "layer type 'chunked_attention' is not supported", "sliding_attention or full_attention")
def gemma_unknown_layer_type(env):
    return gemma(env, sliding_window=4, layer_types=["sliding_attention", "chunked_attention", "full_attention"])


@CASES.case(1, "hidden_activation 'relu' is not supported", "gelu_pytorch_tanh")
def gemma_other_activation(env):
    return gemma(env, hidden_activation="relu")


def phi3(env, **changes):
    return gen(edit_config(env.model(TINY_LLAMA), **({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"]} | changes)))


@CASES.case(1, "partial_rotary_factor must be a positive number, not 0", "fix the value in config.json")
def phi3_rotating_nothing(env):
    return phi3(env, partial_rotary_factor=0)


@CASES.case(1, "partial_rotary_factor must be above 0 and at most 1, rotating an even number of each head's 16 dimensions, not 1.5", "fix partial_rotary_factor")
def phi3_rotating_more_than_the_head(env):
    return phi3(env, partial_rotary_factor=1.5)


@CASES.case(1, "not 0.01", "fix partial_rotary_factor")
def phi3_rotating_less_than_a_pair(env):
    return phi3(env, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.01})


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_family_config_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"rope_scaling": [1, 2]}, "rope_scaling must be an object, not [1, 2]"),
        ({"rope_scaling": "llama3"}, "rope_scaling must be an object"),
        ({"rope_parameters": "default"}, "rope_parameters must be an object, not 'default'"),
    ],
)
def test_a_llama_rope_field_of_the_wrong_type_is_refused_by_name(cli, tmp_path, change, needle):
    folder = tmp_path / "m"
    shutil.copytree(TINY_LLAMA, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **change}))
    one_line_error(cli("generate", "-m", folder, "Hi", "-n", "1"), 1, needle)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"rope_parameters": "default"}, "rope_parameters must be an object, not 'default'"),
        ({"rope_parameters": {"full_attention": 5}}, "rope_parameters.full_attention must be an object"),
        ({"rope_scaling": [1, 2]}, "rope_scaling must be an object"),
    ],
)
def test_a_gemma3_rope_field_of_the_wrong_type_is_refused_by_name(change, needle):
    from tfcli.engine.errors import ConfigError
    from tfcli.engine.families import config_from_hf

    raw = {"model_type": "gemma3_text", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
           "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 64, "max_position_embeddings": 64, "sliding_window": 8}  # fmt: skip
    config_from_hf(raw)  # the base config loads
    with pytest.raises(ConfigError, match="must be an object") as e:
        config_from_hf({**raw, **change})
    assert needle in str(e.value)
