"""Bad config.json and generation_config.json: missing, malformed, impossible values, sizes the
weights contradict. Each ends in one error line (exit 1)."""

from __future__ import annotations

import pytest

from badinput import DELETE, Cases, edit_config, gen, run_case
from conftest import TINY_LLAMA

CASES = Cases()


# config.json


@CASES.case(1, "has no config.json", "a model folder holds config.json")
def config_missing(env):
    return gen(env.model_with("config.json", None))


@CASES.case(1, "config.json is not valid JSON (line 1, column", "fix the file")
def config_malformed(env):
    return gen(env.model_with("config.json", '{"model_type": "gpt2",'))


@CASES.case(1, "config.json is not valid JSON (RecursionError)", "fix the file")
def config_nested_past_the_stack(env):
    return gen(env.model_with("config.json", "[" * 100_000 + "]" * 100_000))


@CASES.case(1, "config.json is not UTF-8 text", "save config.json as UTF-8")
def config_not_utf8(env):
    return gen(env.model_with("config.json", b'{"model_type": "\xff"}'))


@CASES.case(1, "config.json does not hold a JSON object", "use the one saved with the weights")
def config_a_list(env):
    return gen(env.model_with("config.json", "[]"))


@CASES.case(1, "model_type 'bert' is not supported", "tfcli runs these model types: gemma3_text, gpt2, llama, mistral, phi3, qwen2, qwen3")
def config_unknown_model_type(env):
    return gen(edit_config(env.model(), model_type="bert", architectures=["BertModel"]))


@CASES.case(1, "config.json has no 'n_embd'", "incomplete")
def config_missing_key(env):
    return gen(edit_config(env.model(), n_embd=DELETE))


@CASES.case(1, "n_head must be a positive integer up to 16,777,216, not 0", "fix the value in config.json")
def config_zero_heads(env):
    return gen(edit_config(env.model(), n_head=0))


@CASES.case(1, "n_head must be a positive integer up to 16,777,216, not '4'", "fix the value")
def config_number_as_string(env):
    return gen(edit_config(env.model(), n_head="4"))


@CASES.case(1, "n_positions must be a positive integer up to 16,777,216, not 1000000000", "fix the value")
def config_context_of_a_billion(env):
    return gen(edit_config(env.model(), n_positions=10**9))


@CASES.case(1, "vocab_size must be a positive integer up to 16,777,216, not 1000000000", "fix the value")
def config_vocabulary_of_a_billion(env):
    return gen(edit_config(env.model(), vocab_size=10**9))


@CASES.case(1, "tensor 'transformer.wpe.weight' has shape [128, 64] but config.json implies [16777216, 64]", "use the config.json saved with these weights")
def config_context_larger_than_the_weights(env):
    return gen(edit_config(env.model(), n_positions=1 << 24))


@CASES.case(1, "tensor 'transformer.wte.weight' has shape [300, 64] but config.json implies [16777216, 64]", "config.json and the weights disagree")
def config_vocabulary_larger_than_the_weights(env):
    return gen(edit_config(env.model(), vocab_size=1 << 24))


@CASES.case(1, "tensor 'transformer.h.3.ln_1.weight' is missing from the checkpoint", "does not match")
def config_more_layers_than_the_weights(env):
    return gen(edit_config(env.model(), n_layer=1 << 24))


@CASES.case(1, "n_embd 64 is not divisible by n_head 5", "fix n_embd or n_head")
def config_heads_do_not_divide_the_width(env):
    return gen(edit_config(env.model(), n_head=5))


@CASES.case(1, "layer_norm_epsilon must be a positive number, not 1000000", "fix the value")
def config_epsilon_beyond_a_float(env):
    return gen(edit_config(env.model(), layer_norm_epsilon=10**400))


@CASES.case(1, "activation_function 'relu' is not supported", "gelu_new")
def config_unsupported_activation(env):
    return gen(edit_config(env.model(), activation_function="relu"))


@CASES.case(1, "num_attention_heads 6 is not a multiple of num_key_value_heads 4", "grouped-query attention")
def config_kv_heads_do_not_divide(env):
    return gen(edit_config(env.model(TINY_LLAMA), num_key_value_heads=4))


@CASES.case(1, "RoPE scaling 'yarn' is not supported", "only plain RoPE")
def config_rope_scaling(env):
    return gen(edit_config(env.model(TINY_LLAMA), rope_scaling={"rope_type": "yarn", "factor": 4.0}))


@CASES.case(1, "generation_config.json is not valid JSON", "fix or delete generation_config.json")
def generation_config_malformed(env):
    return gen(env.model_with("generation_config.json", "{"))


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)
