"""Bad input, through the real CLI: every case ends in one line on stderr that names the problem and
the fix, with exit code 1 (a file or model the user can fix) or 2 (a bad flag, value or prompt);
no traceback, nothing on stdout, no large allocation. Then: memory refused up front, names that are
names, output hygiene (no colour codes off a terminal, --json alone on stdout), Ctrl-C."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import TINY_GPT2, TINY_LLAMA

ROOT = Path(__file__).resolve().parent.parent
DELETE = object()  # a config value that is removed


# --- building bad model folders ---------------------------------------------------------------------


@dataclass
class Env:
    tmp: Path
    monkeypatch: pytest.MonkeyPatch

    def model(self, src: Path = TINY_GPT2) -> Path:
        """A copy of a tiny checkpoint to damage."""
        dst = self.tmp / "model"
        shutil.copytree(src, dst)
        return dst

    def chat_model(self) -> Path:
        """The tiny Llama with a chat template."""
        m = self.model(TINY_LLAMA)
        (m / "chat_template.jinja").write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<assistant>")
        return m

    def gguf(self, **kw) -> Path:
        from test_gguf import write_gguf

        return write_gguf(self.tmp / "tiny.gguf", **kw)


def edit_config(m: Path, **changes) -> Path:
    cfg = json.loads((m / "config.json").read_text())
    for k, v in changes.items():
        if v is DELETE:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (m / "config.json").write_text(json.dumps(cfg))
    return m


def read_safetensors(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def safetensors_bytes(header: dict | bytes, body: bytes = b"", n: int | None = None) -> bytes:
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return (len(head) if n is None else n).to_bytes(8, "little") + head + body


def edit_header(m: Path, change) -> Path:
    """change(header) mutates the header dict of m/model.safetensors; the data stays as it was."""
    header, body = read_safetensors(m / "model.safetensors")
    change(header)
    (m / "model.safetensors").write_bytes(safetensors_bytes(header, body))
    return m


def gen(m, *extra, prompt="Hi") -> list:
    return ["generate", "-m", m, prompt, *extra]


# --- the table ----------------------------------------------------------------------------------------

CASES = []


def case(code: int, *needles: str):
    """Register a bad input: the function builds it and returns the command line; the error line
    must contain every needle (the problem, then the fix)."""

    def register(make):
        CASES.append(pytest.param(make, code, needles, id=make.__name__))
        return make

    return register


# model.safetensors


@case(1, "no model.safetensors in", "the folder needs model.safetensors")
def safetensors_missing(env):
    m = env.model()
    (m / "model.safetensors").unlink()
    return gen(m)


@case(1, "model.safetensors is empty", "did not finish")
def safetensors_empty(env):
    m = env.model()
    (m / "model.safetensors").write_bytes(b"")
    return gen(m)


@case(1, "model.safetensors is truncated (5 bytes)", "fetch or save the file again")
def safetensors_shorter_than_its_length_field(env):
    m = env.model()
    (m / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00")
    return gen(m)


@case(1, "lies outside the file", "truncated or corrupt")
def safetensors_truncated_in_the_data(env):
    m = env.model()
    data = (m / "model.safetensors").read_bytes()
    (m / "model.safetensors").write_bytes(data[: len(data) * 2 // 3])
    return gen(m)


@case(1, "header length 1,000,000,000,000 is larger than the file", "fetch or save the file again")
def safetensors_header_length_past_the_end(env):
    m = env.model()
    (m / "model.safetensors").write_bytes(safetensors_bytes(b"{}", n=10**12))
    return gen(m)


@case(1, "header of 200,000,000 bytes is larger than the 100 MB", "corrupt")
def safetensors_header_over_100_mb(env):
    m = env.model()
    with open(m / "model.safetensors", "wb") as f:  # a sparse file: large, but costs no disk
        f.write((200_000_000).to_bytes(8, "little"))
        f.truncate(200_000_100)
    return gen(m)


@case(1, "the header is not valid JSON (JSONDecodeError)", "fetch or save it again")
def safetensors_header_malformed_json(env):
    m = env.model()
    (m / "model.safetensors").write_bytes(safetensors_bytes(b'{"a": [1, 2', b"\0" * 16))
    return gen(m)


@case(1, "the header is not valid JSON (UnicodeDecodeError)", "corrupt")
def safetensors_header_not_utf8(env):
    m = env.model()
    (m / "model.safetensors").write_bytes(safetensors_bytes(b'{"\xff": 1}'))
    return gen(m)


@case(1, "the header is not a JSON object", "corrupt")
def safetensors_header_a_list(env):
    m = env.model()
    (m / "model.safetensors").write_bytes(safetensors_bytes(b"[1, 2, 3]"))
    return gen(m)


@case(1, "tensors 'transformer.h.0.ln_1.bias' and 'transformer.h.0.ln_1.weight' overlap", "corrupt")
def safetensors_overlapping_offsets(env):
    def overlap(h):
        h["transformer.h.0.ln_1.bias"]["data_offsets"] = h["transformer.h.0.ln_1.weight"]["data_offsets"]  # both [64] float32

    return gen(edit_header(env.model(), overlap))


@case(1, "tensor 'transformer.wte.weight' lies outside the file", "truncated or corrupt")
def safetensors_offsets_past_the_end(env):
    def past(h):
        begin, end = h["transformer.wte.weight"]["data_offsets"]
        h["transformer.wte.weight"]["data_offsets"] = [begin + 10**9, end + 10**9]

    return gen(edit_header(env.model(), past))


@case(1, "tensor 'transformer.ln_f.bias' lies outside the file", "truncated or corrupt")
def safetensors_negative_offset(env):
    def negative(h):
        h["transformer.ln_f.bias"]["data_offsets"] = [-256, 0]

    return gen(edit_header(env.model(), negative))


@case(1, "tensor 'transformer.ln_f.bias' has invalid data_offsets", "corrupt")
def safetensors_offsets_not_integers(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(data_offsets=["0", 256])))


@case(1, "tensor 'transformer.ln_f.bias' has unknown dtype 'Q4'", "supported dtypes: F64, F32")
def safetensors_unknown_dtype(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(dtype="Q4")))


@case(1, "tensor 'transformer.ln_f.bias' has unknown dtype [1, 2]", "supported dtypes")
def safetensors_dtype_not_a_string(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(dtype=[1, 2])))


@case(1, "tensor 'transformer.ln_f.bias' has dtype I32; weights must be F32, F16 or BF16", "re-save")
def safetensors_integer_weights(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(dtype="I32")))


@case(1, "tensor 'transformer.ln_f.bias' of shape (65,) and dtype F32 needs 260 bytes but has 256", "corrupt")
def safetensors_size_disagrees_with_shape(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(shape=[65])))


@case(1, "has an invalid shape [-1, 64]", "corrupt")
def safetensors_negative_dimension(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(shape=[-1, 64])))


@case(1, "shape (1000000, 1000000) and dtype F32 needs more than the", "corrupt")
def safetensors_claims_a_10_to_12_element_tensor(env):
    """Refused from the header alone: nothing of that size is allocated or even computed."""
    m = env.model()
    header = {"big": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 4]}}
    (m / "model.safetensors").write_bytes(safetensors_bytes(header, b"\0" * 4))
    return gen(m)


@case(1, "tensor 'transformer.h.2.mlp.c_proj.bias' is missing from the checkpoint", "re-save or re-convert")
def safetensors_missing_tensor(env):
    return gen(edit_header(env.model(), lambda h: h.pop("transformer.h.2.mlp.c_proj.bias")))


@case(1, "holds several .safetensors files", "rename the one to use to model.safetensors")
def safetensors_two_files_no_index(env):
    m = env.model()
    (m / "model.safetensors").rename(m / "a.safetensors")
    shutil.copy(m / "a.safetensors", m / "b.safetensors")
    return gen(m)


@case(1, "model.safetensors.index.json is malformed", "weight_map")
def shard_index_malformed(env):
    m = env.model()
    (m / "model.safetensors").rename(m / "model-00001-of-00001.safetensors")
    (m / "model.safetensors.index.json").write_text('{"weight_map": [')
    return gen(m)


@case(1, "shard 'model-00002-of-00002.safetensors' listed in model.safetensors.index.json is missing", "fetch the model again")
def shard_missing(env):
    m = env.model()
    (m / "model.safetensors").rename(m / "model-00001-of-00002.safetensors")
    weights = {"transformer.wte.weight": "model-00001-of-00002.safetensors", "transformer.wpe.weight": "model-00002-of-00002.safetensors"}
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weights}))
    return gen(m)


@case(1, "lists the shard '../tiny-gpt2/model.safetensors', which is not a file name", "files in the model folder")
def shard_path_outside_the_folder(env):
    m = env.model()
    (m / "model.safetensors").unlink()
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"transformer.wte.weight": "../tiny-gpt2/model.safetensors"}}))
    return gen(m)


# config.json


@case(1, "has no config.json", "a model folder holds config.json")
def config_missing(env):
    m = env.model()
    (m / "config.json").unlink()
    return gen(m)


@case(1, "config.json is not valid JSON (line 1, column", "fix the file")
def config_malformed(env):
    m = env.model()
    (m / "config.json").write_text('{"model_type": "gpt2",')
    return gen(m)


@case(1, "config.json is not valid JSON (RecursionError)", "fix the file")
def config_nested_past_the_stack(env):
    m = env.model()
    (m / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    return gen(m)


@case(1, "config.json is not UTF-8 text", "save config.json as UTF-8")
def config_not_utf8(env):
    m = env.model()
    (m / "config.json").write_bytes(b'{"model_type": "\xff"}')
    return gen(m)


@case(1, "config.json does not hold a JSON object", "use the one saved with the weights")
def config_a_list(env):
    m = env.model()
    (m / "config.json").write_text("[]")
    return gen(m)


@case(1, "model_type 'bert' is not supported", "tfcli runs these model types: gpt2, llama, mistral")
def config_unknown_model_type(env):
    return gen(edit_config(env.model(), model_type="bert", architectures=["BertModel"]))


@case(1, "config.json has no 'n_embd'", "incomplete")
def config_missing_key(env):
    return gen(edit_config(env.model(), n_embd=DELETE))


@case(1, "n_head must be a positive integer up to 16,777,216, not 0", "fix the value in config.json")
def config_zero_heads(env):
    return gen(edit_config(env.model(), n_head=0))


@case(1, "n_head must be a positive integer up to 16,777,216, not '4'", "fix the value")
def config_number_as_string(env):
    return gen(edit_config(env.model(), n_head="4"))


@case(1, "n_positions must be a positive integer up to 16,777,216, not 1000000000", "fix the value")
def config_context_of_a_billion(env):
    return gen(edit_config(env.model(), n_positions=10**9))


@case(1, "vocab_size must be a positive integer up to 16,777,216, not 1000000000", "fix the value")
def config_vocabulary_of_a_billion(env):
    return gen(edit_config(env.model(), vocab_size=10**9))


@case(1, "tensor 'transformer.wpe.weight' has shape [128, 64] but config.json implies [16777216, 64]", "use the config.json saved with these weights")
def config_context_larger_than_the_weights(env):
    return gen(edit_config(env.model(), n_positions=1 << 24))


@case(1, "tensor 'transformer.wte.weight' has shape [300, 64] but config.json implies [16777216, 64]", "config.json and the weights disagree")
def config_vocabulary_larger_than_the_weights(env):
    return gen(edit_config(env.model(), vocab_size=1 << 24))


@case(1, "tensor 'transformer.h.3.ln_1.weight' is missing from the checkpoint", "does not match")
def config_more_layers_than_the_weights(env):
    return gen(edit_config(env.model(), n_layer=1 << 24))


@case(1, "n_embd 64 is not divisible by n_head 5", "fix n_embd or n_head")
def config_heads_do_not_divide_the_width(env):
    return gen(edit_config(env.model(), n_head=5))


@case(1, "layer_norm_epsilon must be a positive number, not 1000000", "fix the value")
def config_epsilon_beyond_a_float(env):
    return gen(edit_config(env.model(), layer_norm_epsilon=10**400))


@case(1, "activation_function 'relu' is not supported", "gelu_new")
def config_unsupported_activation(env):
    return gen(edit_config(env.model(), activation_function="relu"))


@case(1, "num_attention_heads 6 is not a multiple of num_key_value_heads 4", "grouped-query attention")
def config_kv_heads_do_not_divide(env):
    return gen(edit_config(env.model(TINY_LLAMA), num_key_value_heads=4))


@case(1, "RoPE scaling 'yarn' is not supported", "only plain RoPE")
def config_rope_scaling(env):
    return gen(edit_config(env.model(TINY_LLAMA), rope_scaling={"rope_type": "yarn", "factor": 4.0}))


@case(1, "generation_config.json is not valid JSON", "fix or delete generation_config.json")
def generation_config_malformed(env):
    m = env.model()
    (m / "generation_config.json").write_text("{")
    return gen(m)


# tokenizer.json


@case(1, "tokenizer.json is missing", "needs tokenizer.json")
def tokenizer_missing(env):
    m = env.model()
    (m / "tokenizer.json").unlink()
    return gen(m)


@case(1, "is not a valid tokenizer.json", "re-save or re-convert the tokenizer")
def tokenizer_malformed(env):
    m = env.model()
    (m / "tokenizer.json").write_text('{"model": {"type": "BPE"')
    return gen(m)


@case(1, "is not a valid tokenizer.json", "re-save")
def tokenizer_for_tokenize(env):
    m = env.model()
    (m / "tokenizer.json").write_text("[]")
    return ["tokenize", "-m", m, "Hello"]


@case(1, "token id 300 is outside the model's vocabulary of 300", "tokenizer.json does not belong to this model")
def token_ids_outside_the_vocabulary(env):
    m = env.model()
    tok = json.loads((m / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 300, "content": "<big>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False})
    (m / "tokenizer.json").write_text(json.dumps(tok))
    return gen(m, prompt="a <big>")


@case(1, "chat template failed: TypeError", "check chat_template")
def chat_template_that_raises(env):
    m = env.model(TINY_LLAMA)
    (m / "chat_template.jinja").write_text("{{ messages + 1 }}")
    return gen(m, "--chat")


# GGUF


@case(1, "tiny.gguf is truncated", "fetch the file again")
def gguf_truncated(env):
    path = env.gguf()
    path.write_bytes(path.read_bytes()[:5000])
    return ["convert", path, env.tmp / "out"]


@case(1, "is not a GGUF file (it starts with b'PK\\x03\\x04', not b'GGUF')", "llama.cpp's .gguf files")
def gguf_wrong_magic(env):
    path = env.tmp / "tiny.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    return ["convert", path, env.tmp / "out"]


@case(1, "GGUF version 1 is not supported", "current llama.cpp")
def gguf_version_1(env):
    path = env.gguf()
    data = bytearray(path.read_bytes())
    data[4:8] = (1).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return ["convert", path, env.tmp / "out"]


@case(1, "the header claims 1,000,000,000 metadata entries", "truncated or corrupt")
def gguf_claims_a_billion_metadata_entries(env):
    path = env.gguf()
    data = bytearray(path.read_bytes())
    data[16:24] = (10**9).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    return ["convert", path, env.tmp / "out"]


@case(1, "tiny.gguf is truncated (it ends inside its header)", "fetch the file again")
def gguf_claims_a_terabyte_string(env):
    path = env.gguf()
    data = bytearray(path.read_bytes())
    data[24:32] = (10**12).to_bytes(8, "little")  # the length of the first metadata key
    path.write_bytes(bytes(data))
    return ["convert", path, env.tmp / "out"]


@case(1, "'blk.0.extra.weight' is IQ2_XXS, which tfcli cannot dequantize", "supported types: F32, F16, BF16, Q4_0")
def gguf_unsupported_quantization(env):
    from gguf import GGMLQuantizationType as Q

    def add_iq2(w):
        w.add_tensor("blk.0.extra.weight", np.zeros((1, 66), np.uint8), raw_dtype=Q.IQ2_XXS)

    return ["convert", env.gguf(tweak=add_iq2), env.tmp / "out"]


@case(1, "architecture 'qwen2' is not supported", "tfcli converts: llama")
def gguf_other_architecture(env):
    return ["convert", env.gguf(arch="qwen2"), env.tmp / "out"]


@case(1, "tiny.gguf is a file, not a model folder", "convert it first: tfcli convert")
def gguf_given_as_a_model(env):
    return gen(env.gguf())


@case(1, "does not exist", "check the path of the .gguf file")
def gguf_missing(env):
    return ["convert", env.tmp / "nope.gguf", env.tmp / "out"]


# prompts


@case(2, "the prompt is empty", "give some text")
def prompt_empty(env):
    return gen(TINY_GPT2, prompt="")


@case(2, "the prompt is 2000 tokens but tiny-gpt2's context is 128", "use --truncate to keep its last tokens")
def prompt_longer_than_the_context(env):
    return gen(TINY_GPT2, prompt="word " * 400)


@case(2, "the prompt is not valid UTF-8 (byte 0xff at character 2)", "set the terminal to UTF-8")
def prompt_invalid_utf8(env):
    return gen(TINY_GPT2, prompt="ab\udcff")


@case(2, "the text is not valid UTF-8 (byte 0xfe at character 0)", "set the terminal to UTF-8")
def tokenize_invalid_utf8(env):
    return ["tokenize", "-m", TINY_GPT2, "\udcfe"]


@case(2, "the text is not valid UTF-8 (byte 0xc3 at character 3)", "set the terminal to UTF-8")
def attn_invalid_utf8(env):
    return ["attn", "-m", TINY_GPT2, "caf\udcc3"]


@case(2, "the text is empty", "give some text to tokenize")
def tokenize_empty(env):
    return ["tokenize", "-m", TINY_GPT2, ""]


@case(2, "--max-tokens 1000 does not fit: the context holds 128 tokens and the prompt uses 2", "use --max-tokens 127 or fewer, or --slide")
def max_tokens_beyond_the_context(env):
    return gen(TINY_GPT2, "-n", "1000")


@case(2, "does not fit", "or fewer")
def max_tokens_of_a_googol(env):
    return gen(TINY_GPT2, "-n", str(10**100))


# every numeric option out of range (and one that is not a number)

_OPTIONS = [
    ("generate", ["--temperature", "-1"], "--temperature must be 0 or more"),
    ("generate", ["--temperature", "nan"], "--temperature must be 0 or more"),
    ("generate", ["--temperature", "inf"], "--temperature must be 0 or more"),
    ("generate", ["--temperature", "warm"], "Invalid value for '--temperature'"),
    ("generate", ["--top-k", "-3"], "--top-k must be 0 (off) or a positive count"),
    ("generate", ["--top-p", "0"], "--top-p must be in (0, 1]"),
    ("generate", ["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    ("generate", ["--min-p", "1"], "--min-p must be in [0, 1)"),
    ("generate", ["--min-p", "-0.1"], "--min-p must be in [0, 1)"),
    ("generate", ["--repetition-penalty", "0"], "--repetition-penalty must be a positive number"),
    ("generate", ["--repeat-last-n", "-1"], "--repeat-last-n must be 0 or more"),
    ("generate", ["--seed", "-1"], "--seed must be between 0 and 2^63-1"),
    ("generate", ["--seed", str(2**64)], "--seed must be between 0 and 2^63-1"),
    ("generate", ["--max-tokens", "0"], "--max-tokens must be at least 1"),
    ("generate", ["--show-probs", "-1"], "--show-probs must be 0 or more"),
    ("chat", ["--max-tokens", "0"], "--max-tokens must be at least 1"),
    ("chat", ["--temperature", "-0.5"], "--temperature must be 0 or more"),
    ("attn", ["--layer", "3"], "--layer 3 is not a layer of tiny-gpt2: it has 3 layers, 0 to 2"),
    ("attn", ["--layer", "-1"], "--layer -1 is not a layer"),
    ("attn", ["--head", "4"], "--head 4 is not a head of tiny-gpt2"),
    ("attn", ["--pattern", "sliding:0"], "the width must be at least 1"),
    ("bench", ["--runs", "0"], "--new-tokens and --runs must be at least 1"),
    ("bench", ["--new-tokens", "0"], "--new-tokens and --runs must be at least 1"),
    ("bench", ["--prompts", "0,16"], "--prompts needs positive token counts"),
    ("bench", ["--prompts", "a,b"], "--prompts takes comma-separated token counts"),
    ("bench", ["--prompts", "4096"], "the model's context is 128 tokens"),
    ("params", ["--layers", "0"], "layers must be a positive whole number, not 0"),
    ("params", ["--heads", "-1"], "heads must be a positive whole number"),
    ("params", ["--context", "0"], "context must be a positive whole number"),
    ("params", ["--vocab", "0"], "vocab must be a positive whole number"),
    ("params", ["--d-model", "-64"], "d_model must be a positive whole number"),
]


def _option_case(command: str, args: list[str], needle: str):
    def make(env):
        model = [] if command == "params" else ["-m", env.chat_model() if command == "chat" else TINY_GPT2]
        text = ["Hello"] if command in ("generate", "attn") else []
        return [command, *model, *text, *args]

    make.__name__ = f"{command} {' '.join(args)}"
    return case(2, needle)(make)


for _command, _args, _needle in _OPTIONS:
    _option_case(_command, _args, _needle)


# model names


@case(1, "unknown model 'smolm2'", "did you mean 'smollm2'?")
def name_misspelt(env):
    return gen("smolm2")


@case(1, "unknown model 'tiny'", "to use the folder tiny, write -m ./tiny")
def name_of_a_folder_in_the_current_directory(env):
    shutil.copytree(TINY_GPT2, env.tmp / "tiny")
    env.monkeypatch.chdir(env.tmp)
    return gen("tiny")


@case(1, "no such folder: ./nope", "check the path")
def path_that_does_not_exist(env):
    env.monkeypatch.chdir(env.tmp)
    return gen("./nope")


@case(1, "no such folder: ~nobody-here/model (no home folder for ~nobody-here)", "check the path")
def path_in_the_home_of_an_unknown_user(env):
    return gen("~nobody-here/model")


@case(1, "unknown model 'a b;c'", "known models:")
def name_with_spaces_and_punctuation(env):
    return gen("a b;c")


def test_the_table_is_large():
    assert len(CASES) >= 30


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    args = make(Env(tmp_path, monkeypatch))
    assert_error(cli(*args), code, *needles)


def assert_error(r, code: int, *needles: str) -> None:
    """Exit code, nothing on stdout, and one `error:` line on stderr (after any `warning:` lines)."""
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), r.stderr
    assert all(line.startswith("warning: ") for line in lines[:-1]), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    if code == 1:
        assert lines[-1].endswith(")"), lines[-1]  # the fix, in parentheses (a bad value says its range)


# --- warnings: the command goes on ----------------------------------------------------------------------


def test_an_unexpected_tensor_is_a_warning(cli, tmp_path):
    m = Env(tmp_path, None).model()
    weights = load_file(m / "model.safetensors")
    weights["extra.weight"] = np.zeros((2, 2), np.float32)
    save_file(weights, m / "model.safetensors")
    r = cli(*gen(m, "-n", "3", "--seed", "0"))
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith("warning: 1 tensor(s) in the checkpoint are not used by a gpt2 model: extra.weight\n")
    assert r.stdout.strip()


def test_truncate_keeps_the_last_tokens_with_a_warning(cli):
    words = [f"w{i} " for i in range(300)]
    r = cli(*gen(TINY_GPT2, "--truncate", "-n", "4", "-t", "0", prompt="".join(words)))
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith("warning: the prompt is ") and "keeping its last 125 so that 4 new tokens fit the context of 128" in r.stderr


# --- memory: refused up front, with the size it would need ---------------------------------------------


def _low_memory(monkeypatch, nbytes: int) -> None:
    from tfcli.engine import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: nbytes)


def test_kv_cache_larger_than_memory_is_refused_with_its_size(cli, tmp_path, monkeypatch):
    m = edit_config(Env(tmp_path, monkeypatch).model(TINY_LLAMA), max_position_embeddings=262_144)
    _low_memory(monkeypatch, 100_000_000)
    r = cli(*gen(m, "-n", "262000"))
    # 2 (K, V) x 3 layers x 2 kv heads x 262,001 positions x 16 dims x 4 bytes = 201 MB
    assert_error(r, 1, "a KV cache of 262,001 positions would need 201.2 MB but only 100.0 MB of memory is available", "fewer --max-tokens")


def test_an_absurd_context_costs_only_the_positions_used(cli, tmp_path, monkeypatch):
    """A Llama's context is only a limit (its positions come from RoPE, not from weights): a config
    claiming 16M positions runs a short generation in little memory, because the RoPE tables and the
    KV cache are built for the positions used; asking for more than the machine holds is refused
    up front with the size it would need."""
    m = edit_config(Env(tmp_path, monkeypatch).model(TINY_LLAMA), max_position_embeddings=1 << 24)
    tracemalloc.start()
    try:
        r = cli(*gen(m, "-n", "20", "--seed", "0"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 0, r.stderr
    assert peak < 50_000_000
    _low_memory(monkeypatch, 2_000_000_000)
    assert_error(cli(*gen(m, "-n", str(1 << 23))), 1, "would need", "GB")


@pytest.mark.parametrize(
    "changes",
    [{"n_positions": 1 << 24}, {"vocab_size": 1 << 24}, {"n_layer": 1 << 24}, {"n_inner": 1 << 24}, {"n_embd": 1 << 22, "n_head": 1}],
    ids=lambda c: "-".join(c),
)
def test_absurd_sizes_fail_before_any_large_allocation(cli, tmp_path, monkeypatch, changes):
    m = edit_config(Env(tmp_path, monkeypatch).model(), **changes)
    tracemalloc.start()
    try:
        r = cli(*gen(m))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 1 and r.stderr.startswith("error: "), r.stderr
    assert peak < 50_000_000, f"{peak / 1e6:.0f} MB allocated before the error"


# --- names are names ------------------------------------------------------------------------------------


def test_a_name_never_resolves_outside_weights_or_the_cache(cli, tmp_path, monkeypatch):
    """A model folder next to the cache, in the current directory or one level up is not found by
    its bare name; given as a path, it is used."""
    from tfcli.store import registry
    from tfcli.engine.errors import ModelNotFoundError

    home = tmp_path / "tfcli-home"  # the cli fixture's TFCLI_HOME; the cache is home/models
    for where in (home / "decoy", tmp_path / "work" / "decoy", tmp_path / "decoy2"):
        shutil.copytree(TINY_GPT2, where)
    monkeypatch.chdir(tmp_path / "work")
    for name in ("decoy", "decoy2", "models", "tfcli-home", "work"):
        r = cli(*gen(name))
        assert_error(r, 1, f"unknown model {name!r}")
    assert cli(*gen("./decoy", "-n", "2", "-q")).exit_code == 0
    assert cli(*gen("../decoy2", "-n", "2", "-q")).exit_code == 0
    monkeypatch.setenv("TFCLI_HOME", str(home))
    (registry.cache_dir()).mkdir(parents=True, exist_ok=True)
    shutil.copytree(TINY_GPT2, registry.cache_dir() / "mine")
    assert registry.resolve("mine") == registry.cache_dir() / "mine"
    with pytest.raises(ModelNotFoundError):
        registry.resolve("decoy")


def test_resolve_of_any_name_stays_inside_the_roots(tmp_path, monkeypatch):
    """Property: whatever string is given, resolve() either refuses it, treats it as the path the
    user typed (it contains a slash or starts with '.' or '~'), or returns a folder directly inside
    weights/ or the cache."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tfcli.store import registry
    from tfcli.engine.errors import TfcliError

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "home"))
    registry.cache_dir().mkdir(parents=True)
    shutil.copytree(TINY_GPT2, registry.cache_dir() / "cached")
    shutil.copytree(TINY_GPT2, tmp_path / "outside")
    monkeypatch.chdir(tmp_path)
    roots = {registry.shipped_dir().resolve(), registry.cache_dir().resolve()}
    names = st.one_of(
        st.text(max_size=80),
        st.sampled_from(["cached", "outside", "home", "models", "..", ".", "~", "~0", "~nobody-here/x", "cached/..", "..\\outside", "cached\x00", "CACHED"]),
        st.builds(lambda a, b: a + b, st.sampled_from(["", ".", "..", "cached", "outside"]), st.text(max_size=8)),
    )

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(names)
    def check(name):
        try:
            path = registry.resolve(name)
        except TfcliError:
            return
        if not registry.looks_like_path(name):
            assert path.parent.resolve() in roots, (name, path)

    check()


# --- output hygiene ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["params", "--preset", "gpt2", "--json"],
        ["params", "--list-presets", "--json"],
        ["params", "--from", TINY_LLAMA, "--json"],
        ["tokenize", "-m", TINY_GPT2, "Hello, world", "--json"],
        ["attn", "--demo", "--json"],
        ["attn", "--show-mask", "the cat sat", "--pattern", "sliding:2", "--json"],
        ["attn", "-m", TINY_GPT2, "To be, or not", "--head", "all", "--json"],
        ["models", "--json"],
        ["bench", "-m", TINY_GPT2, "--prompts", "4", "--new-tokens", "4", "--runs", "1", "--json"],
    ],
    ids=lambda a: "-".join(str(x) for x in a[:2]),
)
def test_json_output_is_only_json(cli, monkeypatch, args):
    from tfcli.engine import bench

    monkeypatch.setattr(bench, "measure_read_bandwidth", lambda: 1e10)  # the 1 GB bandwidth probe is not the point here
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    json.loads(r.stdout)  # the whole of stdout, and nothing else


def test_json_with_a_warning_keeps_the_warning_off_stdout(cli, tmp_path):
    m = Env(tmp_path, None).model()
    weights = load_file(m / "model.safetensors")
    weights["extra.weight"] = np.zeros((2,), np.float32)
    save_file(weights, m / "model.safetensors")
    r = cli("attn", "-m", m, "Hello", "--json")
    assert r.exit_code == 0 and r.stderr.startswith("warning: ")
    json.loads(r.stdout)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS")}
    return env | {"TFCLI_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)} | extra


def _tfcli(*args) -> list[str]:
    return [sys.executable, "-m", "tfcli", *(os.fsencode(a) if isinstance(a, (str, Path)) else a for a in args)]


# Commands whose output Rich colours on a terminal: a table, --show-probs bars on stderr, a heatmap, an error line.
_COLOURFUL = [
    ["params", "--preset", "gpt2"],
    ["generate", "-m", str(TINY_GPT2), "Hello", "-n", "3", "--seed", "0", "--show-probs", "2"],
    ["attn", "-m", str(TINY_GPT2), "To be", "--head", "all"],
    ["generate", "-m", "nope", "Hello"],
]
# Runs several commands in one Python process (the real entry point and error boundary), with the
# process's own stdout and stderr, whatever they are.
_RUN_ALL = """
import sys
from tfcli.cli import app
for args in ARGS:
    try:
        app(args, prog_name="tfcli")
    except SystemExit:
        pass
"""


def _run_all(commands: list[list[str]]) -> list[str]:
    return [sys.executable, "-c", _RUN_ALL.replace("ARGS", repr(commands))]


def test_no_colour_codes_when_output_is_not_a_terminal(tmp_path):
    """Pipes and no NO_COLOR: Rich sees no terminal and writes plain text."""
    r = subprocess.run(_run_all(_COLOURFUL), capture_output=True, env=_env(tmp_path, TERM="xterm-256color"), cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"model (T=1)" in r.stderr and b"error: unknown model 'nope'" in r.stderr and b"Embedding" in r.stdout
    assert b"\x1b" not in r.stdout + r.stderr


def _run_in_a_terminal(cmd: list[str], env: dict[str, str]) -> bytes:
    """Run cmd with stdout and stderr on a pseudo-terminal; everything it wrote."""
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other end closed
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    p.wait(timeout=10)
    os.close(master)
    return out


@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
def test_no_colour_codes_on_a_terminal_with_NO_COLOR(tmp_path, no_color):
    commands = [_COLOURFUL[0], _COLOURFUL[3]]
    env = _env(tmp_path, TERM="xterm-256color", COLUMNS="120") | ({"NO_COLOR": "1"} if no_color else {})
    out = _run_in_a_terminal(_run_all(commands), env)
    assert b"Embedding" in out and b"unknown model 'nope'" in out
    # NO_COLOR (no-color.org) turns colour off; bold and dim, which are not colour, may stay.
    assert bool(_colour_codes(out)) is not no_color  # without NO_COLOR the check can fail: Rich does colour


def _colour_codes(out: bytes) -> list[bytes]:
    """SGR escape sequences that set a colour: 30-37, 38;..., 40-47, 48;..., 90-97, 100-107."""
    found = []
    for params in re.findall(rb"\x1b\[([0-9;]*)m", out):
        codes = [int(c) for c in params.split(b";") if c]
        if any(30 <= c <= 49 or 90 <= c <= 107 for c in codes):
            found.append(params)
    return found


@pytest.mark.parametrize(
    "args",
    [["params", "--preset", "gpt3"], ["tokenize", "-m", TINY_GPT2, "Hello", "--json"], ["generate", "-m", TINY_GPT2, "Hello", "-n", "20"]],
    ids=["rich-table", "json", "generated-text"],
)
def test_a_reader_that_went_away_ends_quietly(tmp_path, args):
    """`tfcli ... | head`: the pipe's reader is gone before the first write. Exit 0, nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run(_tfcli(*args), stdout=write_end, stderr=subprocess.PIPE, env=_env(tmp_path), cwd=ROOT, timeout=60)
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr) == (0, b"")


def test_a_terminal_that_cannot_show_the_text_gets_replacements(tmp_path):
    """An ASCII-only stdout (a Latin-1 locale does the same with Chinese): '?' instead of a traceback."""
    env = _env(tmp_path, PYTHONIOENCODING="ascii")
    r = subprocess.run(_tfcli("tokenize", "-m", TINY_GPT2, "café 今天"), capture_output=True, env=env, cwd=ROOT, timeout=60)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    assert b"?" in r.stdout


@pytest.mark.parametrize(
    "args, what",
    [
        (["generate", "-m", TINY_GPT2, b"ab\xff\xfe", "-n", "3"], b"the prompt is not valid UTF-8 (byte 0xff at character 2)"),
        (["tokenize", "-m", TINY_GPT2, b"\xc3("], b"the text is not valid UTF-8 (byte 0xc3 at character 0)"),
        (["attn", "-m", TINY_GPT2, b"x\x80"], b"the text is not valid UTF-8 (byte 0x80 at character 1)"),
    ],
    ids=["generate", "tokenize", "attn"],
)
def test_invalid_utf8_from_the_shell(tmp_path, args, what):
    """Bytes that are not UTF-8 in argv, as a shell passes them (Python sees lone surrogates)."""
    r = subprocess.run(_tfcli(*args), capture_output=True, env=_env(tmp_path, LC_ALL="C.UTF-8"), cwd=ROOT, timeout=60)
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.startswith(b"error: " + what) and r.stderr.count(b"\n") == 1, r.stderr


def test_invalid_utf8_on_stdin(cli):
    r = cli("generate", "-m", TINY_GPT2, "-", input=b"ab\xffcd")
    assert_error(r, 2, "stdin is not valid UTF-8 (byte 0xff at offset 2)", "convert the text to UTF-8")


@pytest.mark.parametrize(
    "stdin_errors, what",
    [("", b"the message is not valid UTF-8 (byte 0xe9 at character 3)"), ("utf-8:strict", b"the message is not valid UTF-8 (byte 0xe9)")],
    ids=["surrogateescape", "strict"],
)
def test_chat_refuses_a_line_that_is_not_utf8(tmp_path, stdin_errors, what):
    """Python's stdin hands over bytes that are not UTF-8 as lone surrogates (C and UTF-8 locales)
    or raises (a strict stdin, as PYTHONIOENCODING may set): one line either way."""
    m = Env(tmp_path, None).model(TINY_LLAMA)
    (m / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}\n{% endfor %}")
    env = _env(tmp_path, PYTHONIOENCODING=stdin_errors) if stdin_errors else _env(tmp_path)
    r = subprocess.run(_tfcli("chat", "-m", m, "-n", "3"), input=b"caf\xe9\n", capture_output=True, env=env, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    assert r.stderr.startswith(b"error: " + what) and r.stderr.count(b"\n") == 1, r.stderr


def test_interactive_chat_skips_a_line_that_is_not_utf8(tmp_path):
    """At a terminal, a line that is not UTF-8 (a typing slip) gets a warning and the conversation
    goes on; piped, it ends the chat with one error line (above)."""
    m = Env(tmp_path, None).model(TINY_LLAMA)
    (m / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}\n{% endfor %}")
    leader, follower = pty.openpty()
    p = subprocess.Popen(_tfcli("chat", "-m", m, "-n", "3", "-t", "0"), stdin=follower, stdout=follower, stderr=follower, env=_env(tmp_path), cwd=ROOT)
    os.close(follower)
    seen = b""

    def read_until(*markers: bytes, times: int = 1) -> None:
        nonlocal seen
        deadline = time.monotonic() + 60
        while not any(seen.count(marker) >= times for marker in markers):
            assert time.monotonic() < deadline, seen
            if select.select([leader], [], [], 0.5)[0]:
                seen += os.read(leader, 4096)

    try:
        read_until(b"> ")
        os.write(leader, b"caf\xe9\n")
        # Without a line editor tfcli sees the byte and warns; GNU readline (chat's line editing at
        # a terminal) drops a byte that is not UTF-8 itself, and "caf" is sent.
        read_until(b"type it again", b"new prompt tokens")
        replies = seen.count(b"new prompt tokens")
        os.write(leader, b"Hello\n")
        read_until(b"new prompt tokens", times=replies + 1)
        os.write(leader, b"/exit\n")
        assert p.wait(timeout=30) == 0
    finally:
        p.kill()
        os.close(leader)
    assert (b"the message is not valid UTF-8" in seen or seen.count(b"new prompt tokens") == 2) and b"Traceback" not in seen


@pytest.fixture(scope="module")
def long_context_gpt2(tmp_path_factory) -> Path:
    """The tiny GPT-2 with 4,096 learned positions (random), so that a generation can run for seconds."""
    m = tmp_path_factory.mktemp("long") / "long-gpt2"
    shutil.copytree(TINY_GPT2, m)
    weights = load_file(m / "model.safetensors")
    weights["transformer.wpe.weight"] = np.random.default_rng(0).normal(0, 0.02, (4096, 64)).astype(np.float32)
    save_file(weights, m / "model.safetensors")
    return edit_config(m, n_positions=4096)


def test_ctrl_c_exits_130_keeping_the_text_and_the_statistics(tmp_path, long_context_gpt2):
    """A real SIGINT, sent once text has started to arrive on stdout."""
    p = subprocess.Popen(
        _tfcli("generate", "-m", long_context_gpt2, "Once upon a time", "-n", "4000", "--seed", "1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path), cwd=ROOT,
    )  # fmt: skip
    try:
        ready, _, _ = select.select([p.stdout], [], [], 60)
        assert ready, "no output within 60 s"
        first = os.read(p.stdout.fileno(), 4096)
        time.sleep(0.1)  # a few more tokens; the whole generation takes seconds
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    out, err = (first + rest).decode(), err.decode()
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert len(out.strip()) > 0 and out.endswith("\n")  # the partial text, ended by a newline
    stats = err.strip().splitlines()[-1]
    assert "stopped: interrupted" in stats and " new · " in stats, err
    new = int(stats.split(" new")[0].split("·")[-1].strip())
    assert 0 < new < 4000
