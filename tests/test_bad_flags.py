"""Every numeric option out of range (and one that is not a number): one error line, exit 2."""

from __future__ import annotations

import pytest

import badinput
from badinput import Cases, run_case
from conftest import TINY_GPT2

CASES = Cases()

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
    ("generate", ["--seed", "-2"], "--seed must be between 0 and 2^63-1"),
    ("generate", ["--seed", str(2**64)], "--seed must be between 0 and 2^63-1"),
    ("generate", ["--max-tokens", "0"], "--max-tokens must be at least 1"),
    ("generate", ["--show-probs", "-1"], "--show-probs must be 0 or more"),
    ("chat", ["--max-tokens", "0"], "--max-tokens must be at least 1"),
    ("chat", ["--temperature", "-0.5"], "--temperature must be 0 or more"),
    ("attn", ["--block", "3"], "--block 3 is not a block of tiny-gpt2: it has 3 blocks, 0 to 2"),
    ("attn", ["--block", "-4"], "--block -4 is not a block"),
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
    ("generate", ["--threads", str(10**20)], "--threads must be at most 4,096, not 100,000,000,000,000,000,000"),
    ("generate", ["--threads", "0"], "--threads must be at least 1, not 0"),
    ("chat", ["--threads", str(2**64)], "--threads must be at most 4,096"),
    ("bench", ["--threads", str(2**31)], "--threads must be at most 4,096"),
]


def _option_case(command: str, args: list[str], needle: str):
    def make(env):
        model = [] if command == "params" else ["-m", env.chat_model() if command == "chat" else TINY_GPT2]
        text = ["Hello"] if command in ("generate", "attn") else []
        return [command, *model, *text, *args]

    make.__name__ = f"{command} {' '.join(args)}"
    return CASES.case(2, needle)(make)


for _command, _args, _needle in _OPTIONS:
    _option_case(_command, _args, _needle)


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


def test_the_table_is_large():
    """Every table of bad inputs, over all the test_bad_*.py files."""
    import test_bad_config, test_bad_gguf, test_bad_names, test_bad_prompts, test_bad_safetensors, test_bad_tokenizer  # noqa: F401, E401

    assert len(badinput.ALL_CASES) >= 30
