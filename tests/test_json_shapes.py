"""One shape for one thing across every --json: a model's shape, a token, the model's name, rounded floats.

Each command's JSON is read here side by side. The shapes are those of tfcli/cli/json.py: a model's
shape is the object of `model_shape(ModelConfig)`, a token carries "id" and "text" (and "bytes"
where it matters), every document names its model under "model". Checks marked `xfail(strict=True)`
describe a command whose JSON has not been moved to those shapes yet: when it is, the test passes,
strict xfail turns that into a failure, and the mark must go.
"""

from __future__ import annotations

import json

import pytest

from tfcli.engine.families import load_config
from tfcli.store.registry import shipped_dir

MODEL = "tang"
TEXT = "床前明月光"


def _doc(cli, *args) -> dict:
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def expected_shape() -> dict:
    from tfcli.cli.json import model_shape

    return model_shape(load_config(shipped_dir() / MODEL / "config.json"))


def _floats(value):
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _floats(v)
    elif isinstance(value, list):
        for v in value:
            yield from _floats(v)


def _noisy(doc) -> list[float]:
    """Floats printed with more digits than they mean: float32 noise such as 0.20000000298023224
    (a float32 needs at most 9 significant digits; a figure worked out in Python is printed with 4)."""
    from decimal import Decimal

    return [f for f in _floats(doc) if len(Decimal(repr(f)).normalize().as_tuple().digits) > 9]


def test_model_shape_helper_is_the_params_shape():
    shape = expected_shape()
    assert shape["layers"] == 4 and shape["d_model"] == 256 and shape["heads"] == 8 and shape["vocab"] == 9275
    assert shape["d_attn"] == shape["heads"] * shape["head_dim"] and shape["d_kv"] == shape["kv_heads"] * shape["head_dim"]


def test_show_and_params_print_the_same_shape(cli):
    shape = expected_shape()
    assert _doc(cli, "show", MODEL)["shape"] == shape
    assert _doc(cli, "params", "--from", shipped_dir() / MODEL)["shape"] == shape


def test_models_prints_the_same_shape(cli):
    row = next(r for r in _doc(cli, "models")["models"] if r["name"] == MODEL)
    assert row["shape"] == expected_shape()


def test_attn_prints_the_same_shape(cli):
    assert _doc(cli, "attn", "-m", MODEL, TEXT)["shape"] == expected_shape()


def test_show_and_bench_name_the_model(cli):
    assert _doc(cli, "show", MODEL)["model"] == MODEL
    assert _doc(cli, "bench", "-m", MODEL, "--runs", "1", "--prompts", "4", "-n", "2")["model"] == MODEL
    assert _doc(cli, "attn", "-m", MODEL, TEXT)["model"] == MODEL


def test_tokenize_names_the_model(cli):
    assert _doc(cli, "tokenize", "-m", MODEL, TEXT)["model"] == MODEL


def test_params_names_the_model(cli):
    assert _doc(cli, "params", "--from", shipped_dir() / MODEL)["model"] == MODEL


def test_a_token_is_the_same_object_in_tokenize_and_the_json_helper(cli):
    from tfcli.cli.json import token
    from tfcli.engine.tokenizer import Tokenizer

    tok = Tokenizer(shipped_dir() / MODEL / "tokenizer.json")
    rows = _doc(cli, "tokenize", "-m", MODEL, TEXT)["tokens"]
    assert [{k: r[k] for k in ("id", "text", "bytes")} for r in rows] == [token(tok, r["id"], with_bytes=True) for r in rows]


def test_attn_tokens_are_tokenize_tokens(cli):
    attn = _doc(cli, "attn", "-m", MODEL, TEXT)["tokens"]
    tokens = _doc(cli, "tokenize", "-m", MODEL, TEXT)["tokens"]
    assert [{"id": t["id"], "text": t["text"]} for t in attn] == [{"id": t["id"], "text": t["text"]} for t in tokens]


def test_show_mask_tokens_are_attn_tokens(cli):
    """attn --show-mask -m MODEL --json: the same token objects as attn -m MODEL --json."""
    mask = _doc(cli, "attn", "--show-mask", "-m", MODEL, TEXT)["tokens"]
    attn = _doc(cli, "attn", "-m", MODEL, TEXT)["tokens"]
    assert mask == attn


def test_the_json_helper_rounds_floats():
    from tfcli.cli.json import dumps

    import numpy as np

    doc = json.loads(dumps({"p": 0.20000000298023224, "xs": [1 / 3, 2.0, float("nan")], "n": 7, "ok": True}))
    assert doc == {"p": 0.2, "xs": [0.3333, 2.0, None], "n": 7, "ok": True}
    assert _noisy(doc) == []
    w = np.full((3, 6), 1 / 6, dtype=np.float32)  # [3, 6] attention rows
    back = np.array(json.loads(dumps({"w": w}))["w"])
    assert back[0, 0] == 0.16666667 and (back.astype(np.float32) == w).all()  # exactly the float32 values
    assert json.loads(dumps({"p": np.float32(0.2)}))["p"] == 0.2


def test_show_and_bench_floats_are_rounded(cli):
    assert _noisy(_doc(cli, "bench", "-m", MODEL, "--runs", "1", "--prompts", "4", "-n", "2")) == []
    assert _noisy(_doc(cli, "show", MODEL)) == []


def test_attn_floats_are_rounded(cli):
    assert _noisy(_doc(cli, "attn", "-m", MODEL, TEXT)) == []


def test_params_floats_are_rounded(cli):
    assert _noisy(_doc(cli, "params", "--preset", "gpt2")) == []


def _generate_json(cli):
    r = cli("generate", "-m", MODEL, TEXT, "-s", "0", "-n", "8", "--json", "-q")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_generate_json_has_the_text_the_tokens_and_the_stats(cli):
    doc = _generate_json(cli)
    assert doc["model"] == MODEL and doc["prompt"] == TEXT
    assert doc["text"] == "".join(t["text"] for t in doc["tokens"]) and len(doc["tokens"]) == doc["stats"]["new_tokens"]
    assert all(set(t) == {"id", "text", "logprob"} for t in doc["tokens"])
    assert all(t["logprob"] is not None and t["logprob"] <= 0 for t in doc["tokens"])  # the chosen token is always reported
    assert doc["stats"]["stop_reason"] in ("max tokens", "eos") and _noisy(doc) == []
    plain = cli("generate", "-m", MODEL, TEXT, "-s", "0", "-n", "8", "-q")
    assert plain.stdout.rstrip("\n") == TEXT + doc["text"].rstrip("\n")  # the same generation, printed after its prompt


def test_prompt_option_is_the_prompt_argument(cli):
    r = cli("generate", "-p", "To be", "-t", "0", "-n", "5", "-q")
    assert r.exit_code == 0 and r.stdout == cli("generate", "To be", "-t", "0", "-n", "5", "-q").stdout
    r = cli("generate", "x", "-p", "y")
    assert r.exit_code == 2 and "give the prompt once" in r.stderr
