"""--lang zh on params and attn, the two views of the issue's list that tests/test_lang_zh.py does not
run: Chinese only (the one rule of cli/lang.py), so no phrase of three English words is left once
the names a learner meets in English too are taken out (GELU, LayerNorm, 3Blue1Brown's Value↓, the
GPT-3 tally's formulas) and the token text. attn --steps also leaves no lone English word."""

from __future__ import annotations

import re

import pytest

from test_chinese import english_sentences

NOTE = "今天天气很好"
# Names kept in English under zh, as cli/lang.py says (methods, people, units, formulas' symbols).
NAMES = ("GELU", "SwiGLU", "MLP", "LayerNorm", "RMSNorm", "RoPE", "3Blue1Brown", "Kaplan", "FLOPs", "GFLOP", "TFLOP",
         "Value↓", "Value↑", "concat", "softmax", "GPT-3", "GPT-2", "SmolLM2", "Qwen3", "Gemma 3", "tfcli", "MODEL",
         "TEXT")  # fmt: skip


def phrases(text: str, tokens: tuple[str, ...] = ()) -> list[str]:
    for word in (*NAMES, *tokens):
        text = re.sub(rf"(?<![\w-]){re.escape(word)}(?![\w-])", " ", text)
    return english_sentences(text)


@pytest.mark.parametrize(
    "args, tokens",
    [
        (["params"], ()),
        (["params", "--preset", "gpt2-small"], ()),
        (["params", "-m", "tang"], ()),
        (["params", "--preset", "smollm2-135m"], ()),
        (["attn", "--steps", NOTE, "-m", "tang"], ()),
        (["attn", "--steps", "To be, or not to be", "-m", "shakespeare"], ("To be, or not to be",)),
        (["attn", NOTE, "-m", "tang"], ()),
        (["attn", "--show-mask", NOTE], ()),
        (["attn", "--explain"], ()),
        (["attn", "--demo"], ("the cat sat on the mat",)),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else "",
)
def test_no_english_phrase_under_zh(cli, monkeypatch, args, tokens):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli(*args, "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    tokens = (*tokens, *(w for t in tokens for w in re.findall(r"\w+", t)))
    said = "\n".join(line for line in r.stderr.splitlines() if "tok/s" not in line)
    assert phrases(r.stdout, tokens) == [] and phrases(said, tokens) == [], (phrases(r.stdout, tokens), r.stdout)


@pytest.mark.parametrize("preset", ["gpt3", "gpt2-small"])
def test_params_names_its_source_in_chinese(cli, preset):
    r = cli("params", "--preset", preset, "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    header = r.stdout.splitlines()[0]
    assert "paper" not in header and "Table" not in header and "论文" in header, header


def test_attn_steps_in_chinese_leaves_no_english_word(cli, monkeypatch):
    """Beyond phrases: no English word of four letters or more but the names and symbols (q, k, v,
    W_Q, RoPE, softmax, -inf) a Chinese note on self-attention writes in Latin letters too."""
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("attn", "--steps", NOTE, "-m", "tang", "--block", "0", "--head", "0", "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    words = set(re.findall(r"(?<![\w'])[A-Za-z]{4,}(?![\w'])", r.stdout)) - {"softmax", "RoPE", "tang", "concat"}
    assert words == set(), words


def test_data_errors_in_chinese(cli, monkeypatch, tmp_path):
    """tfcli data's two errors a learner meets (a corpus not pulled yet, a misspelt name) in Chinese under zh."""
    monkeypatch.setenv("TFCLI_HOME", str(tmp_path))
    r = cli("data", "path", "tang", "--lang", "zh")
    assert r.exit_code != 0 and "语料 tang 还不在缓存中" in r.stderr and "tfcli data pull tang" in r.stderr, r.stderr
    r = cli("data", "path", "shakespear", "--lang", "zh")
    assert r.exit_code != 0 and "没有叫 'shakespear' 的语料" in r.stderr and "shakespeare" in r.stderr, r.stderr
    assert english_sentences(r.stderr) == [], r.stderr
