"""Bad tokenizer.json files and chat templates. Each ends in one error line (exit 1)."""

from __future__ import annotations

import json

import pytest

from badinput import Cases, Env, assert_error, assert_one_line, gen, run_case, run_tfcli, subprocess_env
from conftest import TINY_LLAMA

CASES = Cases()


# tokenizer.json


@CASES.case(1, "tokenizer.json is missing", "needs tokenizer.json")
def tokenizer_missing(env):
    return gen(env.model_with("tokenizer.json", None))


@CASES.case(1, "is not a valid tokenizer.json", "re-save or re-convert the tokenizer")
def tokenizer_malformed(env):
    return gen(env.model_with("tokenizer.json", '{"model": {"type": "BPE"'))


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


def _pre_tokenizer(env, pattern: str):
    m = env.model()
    tok = json.loads((m / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    (m / "tokenizer.json").write_text(json.dumps(tok))
    return m


CATASTROPHIC = "(a+)+$"  # backtracks exponentially: the regex engine gives up, and the library panics


@CASES.case(1, "the tokenizer of model failed: Onig: Regex search error", "re-save or re-convert the tokenizer")
def tokenizer_regex_that_gives_up(env):
    return gen(_pre_tokenizer(env, CATASTROPHIC), prompt="a" * 40 + "b")


@CASES.case(1, "the tokenizer of model failed", "check tokenizer.json")
def tokenizer_regex_that_gives_up_in_tokenize(env):
    return ["tokenize", "-m", _pre_tokenizer(env, CATASTROPHIC), "a" * 40 + "!"]


@CASES.case(1, "is not a valid tokenizer.json (Oniguruma error: too big number for repeat range", "re-save")
def tokenizer_regex_too_big(env):
    return gen(_pre_tokenizer(env, "a{99999999}"))


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


def test_a_tokenizer_panic_shows_no_backtrace(tmp_path, monkeypatch):
    """The library's panic handler writes a Rust backtrace straight to file descriptor 2 (with
    RUST_BACKTRACE set); the user sees one line."""
    m = _pre_tokenizer(Env(tmp_path, monkeypatch), CATASTROPHIC)
    r = run_tfcli(tmp_path, *gen(m, prompt="a" * 40 + "b"), env=subprocess_env(tmp_path, RUST_BACKTRACE="1"))
    assert_one_line(r.stderr, r.returncode, 1, b"Regex search error")
    assert b"panicked" not in r.stderr and b"stack backtrace" not in r.stderr


def _move_id(env, piece: str, new_id: int):
    m = env.model()
    tok = json.loads((m / "tokenizer.json").read_text())
    tok["model"]["vocab"][piece] = new_id  # the same number of pieces, one of them past the model's rows
    (m / "tokenizer.json").write_text(json.dumps(tok))
    return m


def test_a_tokenizer_with_ids_past_the_model_is_reported_at_load(cli, tmp_path, monkeypatch):
    """300 pieces, as many as the model's rows, but one of them has id 5,000: the tokenizer can
    produce an id the model lacks. Reported when the model loads, not first when a prompt meets it."""
    m = _move_id(Env(tmp_path, monkeypatch), "z", 5000)
    r = cli(*gen(m, "-n", "2", "-q", prompt="Hello"))
    assert r.exit_code == 0, r.stderr
    assert r.stderr == "warning: tokenizer.json has 5001 tokens but the model only 300; ids past it are refused\n", r.stderr
    r = cli(*gen(m, "-n", "2", prompt="zzz"))
    assert_error(r, 1, "token id 5000 is outside the model's vocabulary of 300")


def test_a_llama_tokenizer_with_ids_past_the_model_is_reported_at_load(cli, tmp_path, monkeypatch):
    from conftest import TINY_LLAMA

    env = Env(tmp_path, monkeypatch)
    m = env.model(TINY_LLAMA)
    tok = json.loads((m / "tokenizer.json").read_text())
    piece = max(tok["model"]["vocab"], key=tok["model"]["vocab"].get)
    tok["model"]["vocab"][piece] = 1 << 20
    (m / "tokenizer.json").write_text(json.dumps(tok))
    r = cli(*gen(m, "-n", "2", "-q"))
    assert r.exit_code == 0 and f"tokenizer.json has {(1 << 20) + 1} tokens but the model only" in r.stderr, r.stderr
