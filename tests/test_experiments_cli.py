"""tfcli patch / ablate / steer / heads: the JSON keys scripts rely on, agreement with the analysis
functions, the views at 80 columns without colour, and one-line errors for bad input."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA, one_line_error


def _json(r) -> dict:
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    return json.loads(r.stdout)


@pytest.mark.parametrize("model", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_patch_json_and_the_analysis_agree(cli, model):
    from tfcli.analysis.experiments.patch import patch
    from tfcli.store import load

    doc = _json(cli("patch", "-m", model, "The cat sat", "The dog sat", "--json"))
    assert set(doc) == {"model", "site", "clean", "corrupt", "answer", "wrong", "clean_logit_diff", "corrupt_logit_diff", "grid"}
    assert set(doc["clean"]) == {"text", "tokens"} and set(doc["answer"]) == {"id", "text"}
    lm = load(model)
    r = patch(lm.model, lm.tokenizer.prompt("The cat sat"), lm.tokenizer.prompt("The dog sat"))
    assert [g["layer"] for g in doc["grid"]] == list(range(lm.config.n_layer + 1))
    np.testing.assert_allclose([g["values"] for g in doc["grid"]], r.grid, atol=1e-3)
    # The last residual index at the last position is the whole answer; the corrupt stream elsewhere at index L is nothing.
    assert doc["grid"][-1]["values"][-1] == pytest.approx(1.0, abs=1e-4)
    heads = _json(cli("patch", "-m", model, "The cat sat", "The dog sat", "--site", "heads", "--json"))
    assert [g["block"] for g in heads["grid"]] == list(range(lm.config.n_layer)) and len(heads["grid"][0]["values"]) == lm.config.n_head


def test_ablate_and_heads_json(cli):
    doc = _json(cli("ablate", "-m", TINY_LLAMA, "Hello world", "--json"))
    assert set(doc) == {"model", "tokens", "answer", "heads", "mlps"}
    assert set(doc["answer"]) == {"id", "text", "logprob"} and len(doc["heads"]) == 3 and len(doc["heads"][0]["values"]) == 6
    doc = _json(cli("heads", "-m", TINY_LLAMA, "Hello world", "--json", "--repeat", "8"))
    assert {"model", "tokens", "position", "target", "embedding", "heads", "mlps", "bias", "total", "detectors", "induction_tokens"} <= set(doc)
    parts = doc["embedding"] + sum(map(sum, (h["values"] for h in doc["heads"]))) + sum(doc["mlps"]) + doc["bias"]
    assert parts == pytest.approx(doc["total"], abs=1e-3) and doc["total"] == pytest.approx(doc["target"]["logit"], abs=1e-3)
    assert set(doc["detectors"]) == {"previous_token", "first_token", "induction", "duplicate_token"}
    assert np.asarray(doc["detectors"]["induction"]).shape == (3, 6) and len(doc["induction_tokens"]) == 16


def test_steer_json_and_saved_vector(cli, tmp_path):
    v = tmp_path / "v.npz"
    doc = _json(cli("steer", "-m", TINY_LLAMA, "Once", "--toward", "good day", "--away", "bad night", "--layer", "1", "--scale", "3", "-t", "0", "-n", "8", "--json", "--save", v))
    assert {"model", "prompt", "prompt_ids", "layer", "scale", "toward", "away", "vector_norm", "plain", "steered"} <= set(doc)
    assert set(doc["plain"]) == {"text", "token_ids"} and len(doc["steered"]["token_ids"]) == 8 and v.exists()
    plain = _json(cli("generate", "-m", TINY_LLAMA, "Once", "-t", "0", "-n", "8", "--json"))
    assert [t["id"] for t in plain["tokens"]] == doc["plain"]["token_ids"]
    steered = _json(cli("generate", "-m", TINY_LLAMA, "Once", "-t", "0", "-n", "8", "--json", "--steer", v))
    assert [t["id"] for t in steered["tokens"]] == doc["steered"]["token_ids"]


def test_ablate_flag_changes_score_generate_and_lens(cli):
    base = _json(cli("score", "-m", TINY_LLAMA, "Hello world", "--json"))
    cut = _json(cli("score", "-m", TINY_LLAMA, "Hello world", "--json", "--ablate", "0.mlp", "--ablate", "1.2"))
    assert cut["nats_per_token"] != base["nats_per_token"]
    lens = _json(cli("lens", "-m", TINY_LLAMA, "Hello world", "--json", "--ablate", "2.n5"))
    assert lens["layers"]
    r = cli("generate", "-m", TINY_LLAMA, "Hi", "-t", "0", "-n", "4", "--ablate", "0.1")
    assert r.exit_code == 0


def test_views_at_80_columns_without_colour(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    for args in (("patch", "The cat sat", "The dog sat"), ("ablate", "Hello world"), ("heads", "Hello world", "--repeat", "8")):
        r = cli(*args[:1], "-m", TINY_LLAMA, *args[1:])
        assert r.exit_code == 0, r.stderr
        assert max(len(line) for line in r.stdout.splitlines()) <= 80
        assert "\x1b[" not in r.stdout and "…" not in "".join(line for line in r.stdout.splitlines() if line[:4].strip().isdigit())
    r = cli("ablate", "-m", TINY_LLAMA, "Hello world", "--lang", "zh")
    assert "答案" in r.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (("patch", "The cat sat", "A dog"), "tokens"),
        (("patch", "The cat sat", "The dog sat", "--answer", "catdog"), "must be one token"),
        (("patch", "The cat sat", "The dog sat", "--site", "nowhere"), "--site"),
        (("patch", "", "The dog sat"), "empty"),
        (("ablate", "Hi", "--answer", ""), "must be one token"),
        (("steer", "Hi", "--toward", "a", "--away", "b", "--layer", "7"), "out of range"),
        (("steer", "Hi", "--toward", "a", "--away", "b", "--layer", "1", "--scale", "nan"), "finite"),
        (("steer", "Hi", "--toward", "a", "--away", "b", "--layer", "1", "--scale", "inf"), "finite"),
        (("heads", "Hi", "--position", "9"), "outside"),
        (("generate", "Hi", "--ablate", "1.9"), "out of range"),
        (("generate", "Hi", "--ablate", "x"), "B.H"),
        (("score", "Hello", "--ablate", "9.mlp"), "out of range"),
    ],
)
def test_bad_input_gets_one_line(cli, args, needle):
    r = cli(args[0], "-m", TINY_LLAMA, *args[1:])
    one_line_error(r, 2 if r.exit_code == 2 else 1, needle)


def test_a_text_over_the_context_is_refused(cli):
    one_line_error(cli("ablate", "-m", TINY_LLAMA, "x" * 400), 2, "context")


def test_a_bad_steering_file(cli, tmp_path):
    bad = tmp_path / "v.npz"
    np.savez(bad, vector=np.ones(7, np.float32), layer=np.int64(1), scale=np.float64(2))
    one_line_error(cli("generate", "-m", TINY_LLAMA, "Hi", "--steer", bad), 2, "width")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    one_line_error(cli("generate", "-m", TINY_LLAMA, "Hi", "--steer", tmp_path / "junk.npz"), 2, "not a steering vector")



def test_steer_says_what_it_saved_and_another_model_refuses_it(cli, tmp_path):
    path = tmp_path / "v.npz"
    r = cli("steer", "ROMEO:", "--toward", "love", "--away", "hate", "--block", "1", "-n", "2", "-t", "0", "-m", "shakespeare", "--save", path)
    assert r.exit_code == 0 and f"wrote {path}" in " ".join(r.stderr.split()) and "· seed" not in r.stdout  # greedy: no seed to tell
    r = cli("generate", "春", "-n", "2", "-m", "tang", "--steer", path)
    assert r.exit_code != 0 and "made on another model" in r.stderr



def test_a_heads_shares_never_add_past_100_percent(cli):
    from tfcli.analysis.attention import summarize

    # Token 1 looks at token 0, which is both the first and its previous token: counted once.
    t = 6
    w = np.eye(t, k=-1)
    w[0, 0] = 1
    w[2:, 0] = 0.3
    w[np.arange(2, t), np.arange(1, t - 1)] = 0.7
    s = summarize(w, 0, 0)
    assert s.to_first + s.to_previous + s.to_self <= 1 + 1e-9
    r = cli("attn", "-m", "tang", "今天天气很好", "--block", "0", "--head", "0")
    assert r.exit_code == 0, r.stderr
    shares = [int(x) for x in re.findall(r"(\d+)% to (?:the first token|the previous one|themselves)", r.stdout.replace("\n", " "))]
    assert len(shares) == 3 and sum(shares) <= 101  # rounding
    assert "Most attention goes to" not in r.stdout


def test_heads_says_how_its_total_meets_the_logit(cli):
    from tfcli.cli.views.experiments import total_against_logit

    r = cli("heads", "ROMEO: What light", "-m", "shakespeare")
    assert r.exit_code == 0, r.stderr
    logit = float(re.search(r"logit\s+(-?\d+\.\d\d)", r.stdout).group(1))
    total = float(re.search(r"total (-?\d+\.\d\d)", r.stdout).group(1))
    flat = " ".join(r.stdout.split())
    assert total == logit and "The total equals the logit in the header" in flat
    en, zh = total_against_logit(7.816, 7.811)  # a difference that shows at two decimals is said, with its size
    assert "differs from the logit in the header by +0.005" in en and "+0.005" in zh
