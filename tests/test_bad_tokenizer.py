"""Bad tokenizer.json files and chat templates. Each ends in one error line (exit 1)."""

from __future__ import annotations

import json

import pytest

from badinput import Cases, gen, run_case
from conftest import TINY_LLAMA

CASES = Cases()


# tokenizer.json


@CASES.case(1, "tokenizer.json is missing", "needs tokenizer.json")
def tokenizer_missing(env):
    m = env.model()
    (m / "tokenizer.json").unlink()
    return gen(m)


@CASES.case(1, "is not a valid tokenizer.json", "re-save or re-convert the tokenizer")
def tokenizer_malformed(env):
    m = env.model()
    (m / "tokenizer.json").write_text('{"model": {"type": "BPE"')
    return gen(m)


@CASES.case(1, "is not a valid tokenizer.json", "re-save")
def tokenizer_for_tokenize(env):
    m = env.model()
    (m / "tokenizer.json").write_text("[]")
    return ["tokenize", "-m", m, "Hello"]


@CASES.case(1, "token id 300 is outside the model's vocabulary of 300", "tokenizer.json does not belong to this model")
def token_ids_outside_the_vocabulary(env):
    m = env.model()
    tok = json.loads((m / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 300, "content": "<big>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False})
    (m / "tokenizer.json").write_text(json.dumps(tok))
    return gen(m, prompt="a <big>")


@CASES.case(1, "chat template failed: TypeError", "check chat_template")
def chat_template_that_raises(env):
    m = env.model(TINY_LLAMA)
    (m / "chat_template.jinja").write_text("{{ messages + 1 }}")
    return gen(m, "--chat")


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)
