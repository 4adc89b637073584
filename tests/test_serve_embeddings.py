"""Embeddings: /v1/embeddings and `tfcli embed text`, against transformers' hidden_states[-1].

The vector is the last hidden state after the final norm, pooled (the mean over the tokens by
default), scaled to length 1; `dimensions` keeps the first d values and scales again; base64 is
the float32 bytes, little-endian.
"""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA
from test_serve import openai_client, post, serving

TEXTS = ["The cat sat on the mat.", "A kitten rests on a rug, purring softly all afternoon.", "Stock prices fell sharply on Monday."]


def hf_last_hidden(folder, ids) -> np.ndarray:
    """transformers' hidden_states[-1][0]: the last layer's output after the final norm, [T, D]."""
    import torch

    from conftest import hf_pretrained

    with torch.no_grad():
        out = hf_pretrained(folder)(torch.tensor([list(ids)]), output_hidden_states=True)
    return out.hidden_states[-1][0].numpy()


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def tiny():
    from tfcli.store import load

    return load(TINY_LLAMA)


@pytest.fixture(scope="module")
def url(tiny):
    with serving(tiny, "tiny-llama", max_rows=4, queue=8) as (u, _):
        yield u


@pytest.mark.parametrize("folder", [TINY_LLAMA, TINY_GPT2], ids=["llama", "gpt2"])
def test_an_embedding_is_transformers_last_hidden_state_mean_pooled(folder):
    from tfcli.engine.embeddings import embedding, last_hidden
    from tfcli.store import load

    lm = load(folder)
    for text in TEXTS:
        ids = lm.tokenizer.prompt(text)
        hf = hf_last_hidden(folder, ids)  # [T, D]
        np.testing.assert_allclose(last_hidden(lm.model, ids), hf, atol=1e-4)
        np.testing.assert_allclose(embedding(lm.model, ids), unit(hf.mean(0)), atol=1e-4)
        np.testing.assert_allclose(embedding(lm.model, ids, "last"), unit(hf[-1]), atol=1e-4)


def test_a_long_input_runs_in_parts_with_the_same_states(tiny, monkeypatch):
    from tfcli.engine import embeddings

    ids = tiny.tokenizer.prompt(" ".join(TEXTS))
    whole = embeddings.last_hidden(tiny.model, ids)
    monkeypatch.setattr(embeddings, "CHUNK", 7)
    parts = embeddings.last_hidden(tiny.model, ids)
    assert len(ids) > 3 * 7
    np.testing.assert_allclose(parts, whole, atol=1e-5)


def test_the_pooling_a_sentence_transformers_folder_asks_for(tmp_path):
    from tfcli.engine.embeddings import pooling_of

    assert pooling_of(tmp_path) == "mean"
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False}))
    assert pooling_of(tmp_path) == "last"
    (tmp_path / "1_Pooling" / "config.json").write_text("{not json")
    assert pooling_of(tmp_path) == "mean"


def test_the_server_gives_each_input_its_embedding(url, tiny):
    status, body, _ = post(url + "/v1/embeddings", {"input": TEXTS, "model": "tiny-llama"})
    assert status == 200, body
    assert body["object"] == "list" and body["model"] == "tiny-llama"
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    for text, d in zip(TEXTS, body["data"]):
        ids = tiny.tokenizer.prompt(text)
        want = unit(hf_last_hidden(TINY_LLAMA, ids).mean(0))
        np.testing.assert_allclose(d["embedding"], want, atol=1e-4)
    n = sum(len(tiny.tokenizer.prompt(t)) for t in TEXTS)
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_base64_decodes_to_the_same_floats(url):
    _, floats, _ = post(url + "/v1/embeddings", {"input": TEXTS[0]})
    status, b64, _ = post(url + "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"})
    assert status == 200
    got = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    assert got.tolist() == np.asarray(floats["data"][0]["embedding"], dtype=np.float32).tolist()


def test_token_ids_and_dimensions(url, tiny):
    ids = tiny.tokenizer.prompt(TEXTS[1])
    _, by_text, _ = post(url + "/v1/embeddings", {"input": TEXTS[1]})
    status, by_ids, _ = post(url + "/v1/embeddings", {"input": [ids, ids[:3]]})
    assert status == 200 and len(by_ids["data"]) == 2
    assert by_ids["data"][0]["embedding"] == by_text["data"][0]["embedding"]
    status, short, _ = post(url + "/v1/embeddings", {"input": TEXTS[1], "dimensions": 8})
    assert status == 200
    full = np.asarray(by_text["data"][0]["embedding"])
    np.testing.assert_allclose(short["data"][0]["embedding"], unit(full[:8]), atol=1e-6)


def test_the_openai_client_embeds(url):
    client = openai_client(url)
    out = client.embeddings.create(model="tiny-llama", input=TEXTS)  # the client asks for base64 and decodes it
    plain = client.embeddings.create(model="tiny-llama", input=TEXTS, encoding_format="float")
    assert len(out.data) == 3
    for a, b in zip(out.data, plain.data):
        assert np.asarray(a.embedding, dtype=np.float32).tolist() == np.asarray(b.embedding, dtype=np.float32).tolist()
        assert abs(np.linalg.norm(a.embedding) - 1) < 1e-5
    assert out.usage.prompt_tokens > 0


@pytest.mark.parametrize(
    "body, param, needle",
    [
        ({}, "input", "'input' is required"),
        ({"input": ""}, "input", "empty"),
        ({"input": []}, "input", "non-empty"),
        ({"input": [1.5]}, "input", "input[0]"),
        ({"input": "hi", "encoding_format": "int8"}, "encoding_format", "float or base64"),
        ({"input": "hi", "dimensions": 0}, "dimensions", "between 1 and 96"),
        ({"input": "hi", "dimensions": 97}, "dimensions", "between 1 and 96"),
        ({"input": ["hi"] * 257}, "input", "at most 256"),
        ({"input": [[5] * 200]}, "input", "maximum context length"),
        ({"input": [[10**6]]}, "input", "outside the vocabulary"),
        ({"input": "hi", "model": "gpt-4"}, "model", "does not exist"),
    ],
)
def test_bad_embedding_requests_are_400s_naming_the_field(url, body, param, needle):
    status, got, _ = post(url + "/v1/embeddings", body)
    assert status in (400, 404), got
    assert got["error"]["param"] == param and needle in got["error"]["message"], got


def test_embed_text_equals_the_server(cli, url):
    r = cli("embed", "text", TEXTS[0], TEXTS[2], "-m", str(TINY_LLAMA), "--json")
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    _, body, _ = post(url + "/v1/embeddings", {"input": [TEXTS[0], TEXTS[2]]})
    for t, d in zip(report["texts"], body["data"]):
        np.testing.assert_allclose(t["embedding"], d["embedding"], atol=1e-4)  # --json rounds to 4 digits
    a, b = (np.asarray(d["embedding"]) for d in body["data"])
    assert report["cosines"][0][1] == pytest.approx(float(a @ b), abs=1e-3)
    assert report["pooling"] == "mean" and report["dimensions"] == 96


def test_embed_text_draws_and_refuses_at_one_line(cli):
    r = cli("embed", "text", TEXTS[0], TEXTS[1], "-m", str(TINY_LLAMA))
    assert r.exit_code == 0, r.stderr
    assert "text embeddings" in r.stdout and "cosine" in r.stdout
    assert all(len(line) <= 80 for line in r.stdout.splitlines())
    from conftest import one_line_error

    one_line_error(cli("embed", "text", "hi", "-m", str(TINY_LLAMA), "--dimensions", "0"), 2, "--dimensions")
    one_line_error(cli("embed", "text", "", "-m", str(TINY_LLAMA)), 2, "empty")
    one_line_error(cli("embed", "neighbors", "hi", "-m", str(TINY_LLAMA), "--dimensions", "4"), 2, "--dimensions goes with text")
