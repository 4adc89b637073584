"""The experiments of the Python API (tfcli.lens, patch, ablate, heads, steer, attention, mask,
params) give the numbers their commands print with --json, and every result prints a text form of
at most 80 columns, draws itself for Jupyter and saves as .svg, .png and .json."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tfcli
from tfcli.engine.errors import TfcliError

TEXT = "To be, or not to b"


@pytest.fixture(scope="module")
def model():
    return tfcli.load("shakespeare")


def _close(got, want):
    """Our float against the command's --json (4 significant digits)."""
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-3, atol=1e-6)


def _command(cli, *args):
    r = cli(*args, "-m", "shakespeare", "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_lens_equals_the_command(model, cli):
    want = _command(cli, "lens", TEXT, "--top", "3")
    r = tfcli.lens(model, TEXT, top=3)
    got = json.loads(json.dumps(r.to_dict()))
    assert [layer["resid"] for layer in got["layers"]] == [layer["resid"] for layer in want["layers"]]
    for g, w in zip(got["layers"], want["layers"]):
        assert [p["token_id"] for p in g["positions"]] == [p["token_id"] for p in w["positions"]]
        _close([p["prob"] for p in g["positions"]], [p["prob"] for p in w["positions"]])
        assert [[t["token_id"] for t in p["top"]] for p in g["positions"]] == [[t["token_id"] for t in p["top"]] for p in w["positions"]]


@pytest.mark.parametrize("site", ["resid", "heads", "mlp"])
def test_patch_equals_the_command(model, cli, site):
    want = _command(cli, "patch", TEXT, "To go, or not to g", "--site", site)
    r = tfcli.patch(model, TEXT, "To go, or not to g", site=site)
    assert (r.answer, r.wrong) == (want["answer"]["id"], want["wrong"]["id"])
    _close(r.grid, [row["values"] for row in want["grid"]])
    _close([r.clean_logit_diff, r.corrupt_logit_diff], [want["clean_logit_diff"], want["corrupt_logit_diff"]])
    assert [{k: v for k, v in row.items() if k != "values"} for row in r.to_dict()["grid"]] == [{k: v for k, v in row.items() if k != "values"} for row in want["grid"]]


def test_ablate_equals_the_command(model, cli):
    want = _command(cli, "ablate", TEXT, "--answer", "e")
    r = tfcli.ablate(model, TEXT, answer="e")
    assert r.answer == want["answer"]["id"]
    _close(r.heads, [row["values"] for row in want["heads"]])
    _close(r.mlps, want["mlps"])
    _close(r.logprob, want["answer"]["logprob"])


def test_heads_equals_the_command(model, cli):
    want = _command(cli, "heads", TEXT, "--repeat", "10")
    r = tfcli.heads(model, TEXT, repeat=10)
    assert r.target == want["target"]["id"] and r.position == want["position"]
    _close(r.heads, [row["values"] for row in want["heads"]])
    for k in ("previous_token", "first_token", "induction", "duplicate_token"):
        _close(getattr(r, k), want["detectors"][k])
    assert r.induction_tokens == want["induction_tokens"]


def test_steer_equals_the_command(model, cli):
    want = _command(cli, "steer", "To be, or", "--toward", "love", "--away", "death", "--block", "2", "--scale", "6", "-n", "12", "-t", "0")
    r = tfcli.steer(model, "To be, or", toward="love", away="death", block=2, scale=6, max_new_tokens=12, temperature=0)
    assert (r.plain, r.steered) == (want["plain"]["text"], want["steered"]["text"])
    assert r.steered_ids == want["steered"]["token_ids"]
    _close(float(np.linalg.norm(r.vector)), want["vector_norm"])


def test_attention_equals_the_command(model, cli):
    want = _command(cli, "attn", "To be, or not", "--block", "2", "--head", "all")
    r = tfcli.attention(model, "To be, or not", block=2)
    assert r.weights.shape == tuple(want["weights_shape"]) and r.heads == want["heads"]
    _close(r.weights, want["weights"])


def test_mask_equals_the_command(cli):
    r = cli("attn", "--show-mask", "the cat sat on the mat", "--pattern", "sliding:3", "--json")
    want = json.loads(r.stdout)
    m = tfcli.mask("the cat sat on the mat", pattern="sliding:3")
    assert m.allowed.tolist() == want["allowed"] and m.labels == [t["label"] for t in want["tokens"]]
    _close(m.weights, want["weights"])


def test_params_equals_the_command(cli):
    r = cli("params", "--preset", "smollm2-135m", "--json")
    want = json.loads(r.stdout)
    p = tfcli.params("smollm2-135m")
    assert p.total == want["exact"]["total"] and p.tally == want["tally_3b1b"]["total"]
    assert tfcli.params(model="shakespeare").report["shape"]["layers"] == 4
    with pytest.raises(TfcliError):
        tfcli.params("no-such-preset")


def test_every_result_prints_draws_and_saves(model, tmp_path):
    results = [tfcli.lens(model, TEXT), tfcli.patch(model, TEXT, "To go, or not to g"), tfcli.ablate(model, TEXT),
               tfcli.heads(model, TEXT, repeat=5), tfcli.attention(model, "To be", block=0), tfcli.mask("今天天气很好"),
               tfcli.steer(model, "To be", toward="love", away="death", block=1, max_new_tokens=4, temperature=0), tfcli.params("gpt2")]  # fmt: skip
    for r in results:
        text = str(r)
        assert text == repr(r) and text.strip()
        assert max(len(line) for line in text.splitlines()) <= 80, type(r).__name__
        page = r._repr_html_()
        assert "<pre>" in page
        name = type(r).__name__
        saved = r.save(tmp_path / f"{name}.json")
        assert set(json.loads(saved.read_text())) == set(r.to_dict())
        if r._drawing() is not None:
            assert "<svg" in page
            assert r.save(tmp_path / f"{name}.svg").read_text().lstrip().startswith("<?xml")
            png = r.save(tmp_path / f"{name}.png").read_bytes()
            assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(TfcliError, match="save"):
        results[0].save(tmp_path / "x.gif")
    with pytest.raises(TfcliError, match="no picture"):
        results[-1].save(tmp_path / "x.svg")


@pytest.mark.parametrize("call, needle", [
    (lambda m: tfcli.patch(m, "To be", "To go, or"), "the clean text is 5 tokens"),
    (lambda m: tfcli.patch(m, TEXT, "To go, or not to g", site="nope"), "site must be"),
    (lambda m: tfcli.patch(m, TEXT, "To go, or not to g", answer="ee"), "must be one token"),
    (lambda m: tfcli.ablate(m, TEXT, answer=10_000), "outside the vocabulary"),
    (lambda m: tfcli.heads(m, TEXT, position=40), "outside the text"),
    (lambda m: tfcli.heads(m, TEXT, repeat=1), "repeat"),
    (lambda m: tfcli.attention(m, TEXT, block=7), "block 7 is out of range"),
    (lambda m: tfcli.attention(m, TEXT, head=[0, 8]), "head 8 is out of range"),
    (lambda m: tfcli.steer(m, "To be", toward="love", away="death", block=9), "out of range"),
    (lambda m: tfcli.lens(m, TEXT, top=0), "top"),
    (lambda m: tfcli.lens("shakespeare", TEXT), "a model from tfcli.load"),
    (lambda m: tfcli.mask("a b", pattern="wavy"), "wavy"),
    (lambda m: tfcli.features(m, "/no/such/sae"), "sae"),
])  # fmt: skip
def test_bad_input_is_one_tfcli_error(model, call, needle):
    with pytest.raises(TfcliError, match=needle):
        call(model)


def test_the_explore_page_inline_is_the_page_the_command_writes(model, cli, tmp_path):
    """tfcli.explore_page gives the page `tfcli explore -o` writes, shown in Jupyter as an iframe
    whose srcdoc is that page; it saves as .html only, and refuses a text longer than a page."""
    import base64
    import html
    import re

    page = tfcli.explore_page(model, TEXT)
    r = cli("explore", TEXT, "-m", "shakespeare", "-o", tmp_path / "page.html")
    assert r.exit_code == 0, r.stderr
    theirs = (tmp_path / "page.html").read_text(encoding="utf-8")
    blobs = r'"dtype":\s*"([^"]*)",\s*"shape":\s*\[[^\]]*\],\s*"b64":\s*"([^"]*)"'  # the arrays: the command's pass on its own threads
    assert re.sub(blobs, "", page.html) == re.sub(blobs, "", theirs)  # may round a last bit otherwise
    for (dtype, a), (_, b) in zip(re.findall(blobs, page.html), re.findall(blobs, theirs), strict=True):
        dtype = dtype.replace("\\u003c", "<").replace("\\u003e", ">")  # as json_in_html writes them
        x, y = (np.frombuffer(base64.b64decode(v), np.dtype(dtype)).astype(float) for v in (a, b))
        np.testing.assert_allclose(x, y, rtol=1e-3, atol=2)  # quantised probabilities: a step of 1 where one sits on an edge
    frame = page._repr_html_()
    assert frame.startswith("<iframe srcdoc=\"") and html.unescape(frame.split('srcdoc="')[1].split('" title=')[0]) == page.html
    assert page.save(tmp_path / "again.html").read_text(encoding="utf-8") == page.html
    assert all(len(line) <= 80 for line in str(page).splitlines())
    with pytest.raises(TfcliError, match=r"\.html"):
        page.save(tmp_path / "page.json")
    with pytest.raises(TfcliError, match="at most"):
        tfcli.explore_page(model, "x" * 200)
    with pytest.raises(TfcliError, match="lang"):
        tfcli.explore_page(model, TEXT, lang="fr")
