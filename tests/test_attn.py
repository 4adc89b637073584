"""tfcli attn: attention weights equal transformers', masks, the worked example, and the CLI's views and files."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tfcli.analysis.attention import (
    banded_mask,
    causal_mask,
    attention_weights,
    fit,
    masked_softmax,
    parse_pattern,
    sliding_mask,
    summarize,
    worked_example,
)
from tfcli.draw import fonts, images
from tfcli.cli.views.attn import token_labels
from tfcli.store import load
from tfcli.engine.errors import UsageError
from tfcli.engine.fast import FAST

from conftest import TINY_GPT2, TINY_LLAMA, reference

TANG = Path(__file__).resolve().parent.parent / "weights" / "tang"
CHINESE = "今天天气很好"


# --- the engine's attention weights ---------------------------------------------------------


@pytest.mark.parametrize("name, path", [("tiny-gpt2", TINY_GPT2), ("tiny-llama", TINY_LLAMA)])
@pytest.mark.parametrize("case", ["one", "short", "long"])
def test_attention_weights_equal_transformers(name, path, case):
    ref = reference(name)
    lm = load(path)
    got = attention_weights(lm.model, ref[f"ids_{case}"].tolist(), list(range(lm.config.n_layer)))  # [L, H, T, T]
    want = ref[f"attn_{case}"]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5


@pytest.mark.parametrize("path", [TINY_GPT2, TINY_LLAMA])
def test_rows_sum_to_one_and_the_future_is_exactly_zero(path):
    lm = load(path)
    ids = reference(path.name)["ids_long"].tolist()
    w = attention_weights(lm.model, ids, list(range(lm.config.n_layer)))  # [L, H, T, T]
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-5)
    future = ~causal_mask(len(ids))
    assert (w[..., future] == 0.0).all()


def test_asking_for_some_layers_keeps_only_those():
    lm = load(TINY_LLAMA)
    ids = reference("tiny-llama")["ids_short"].tolist()
    every = attention_weights(lm.model, ids, [0, 1, 2])
    some = attention_weights(lm.model, ids, [2, 0])
    np.testing.assert_array_equal(some, every[[2, 0]])


# --- masks, the worked example, summaries ---------------------------------------------------


def test_masks():
    assert causal_mask(4).sum() == 4 * 5 // 2
    s = sliding_mask(6, 3)
    assert s.sum(axis=1).tolist() == [1, 2, 3, 3, 3, 3]
    assert not s[5, 2] and s[5, 3]
    b = banded_mask(6, 3)
    assert b.sum(axis=1).tolist() == [1, 2, 3, 1, 2, 3]
    assert not b[3, 2]  # a new block starts: no look back across it
    for allowed in (causal_mask(7), sliding_mask(7, 2), banded_mask(7, 3)):
        w = masked_softmax(np.random.default_rng(0).normal(size=(7, 7)).astype(np.float32), allowed)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-6)
        assert (w[~allowed] == 0.0).all() and (w[allowed] > 0).all()


def test_parse_pattern():
    assert parse_pattern("sliding:4").name == "sliding:4"
    assert parse_pattern("banded:2").mask(4).tolist() == banded_mask(4, 2).tolist()
    for bad in ("sliding", "banded:0", "dense", "sliding:-1"):
        with pytest.raises(UsageError):
            parse_pattern(bad)


def test_worked_example_adds_up():
    ex = worked_example()
    t = ex.row
    np.testing.assert_allclose(ex.weights.sum(axis=1), 1.0, atol=1e-6)
    assert (ex.weights[t, t + 1 :] == 0).all() and np.isneginf(ex.masked[t, t + 1 :]).all()
    np.testing.assert_allclose(ex.weights[t, : t + 1], ex.exps(t)[: t + 1] / ex.exps(t).sum(), rtol=1e-6)
    np.testing.assert_allclose(ex.context(t), sum(ex.weights[t, i] * ex.values[i] for i in range(len(ex.tokens))), rtol=1e-6)
    assert ex.tokens[int(ex.weights[t].argmax())] == "cat"


def test_summaries_name_the_pattern():
    t = 6
    previous = np.eye(t, k=-1)
    previous[0, 0] = 1
    first = np.zeros((t, t))
    first[:, 0] = 1
    s = summarize(previous, 0, 0)
    assert s.kind == "previous token" and s.to_previous == 1.0 and s.entropy == 0.0
    s = summarize(first, 1, 2)
    assert s.kind == "first token" and s.top_key == 0 and s.top_share == 1.0
    uniform = masked_softmax(np.zeros((t, t), np.float32), causal_mask(t))
    assert summarize(uniform, 0, 0).kind == "spread out"
    assert summarize(np.ones((1, 1)), 0, 0).kind == "-"


def test_pooling_keeps_rows_summing_to_one():
    lm = load(TINY_GPT2)
    ids = reference("tiny-gpt2")["ids_long"].tolist()
    w = attention_weights(lm.model, ids, [1])[0]  # [H, T, T]
    pooled, allowed, groups = fit(w, causal_mask(len(ids)), 16, "pool")
    assert pooled.shape == (w.shape[0], 16, 16) and allowed.shape == (16, 16)
    assert [i for g in groups for i in g] == list(range(len(ids)))
    np.testing.assert_allclose(pooled.sum(axis=-1), 1.0, atol=1e-5)
    last, _, groups = fit(w, causal_mask(len(ids)), 10, "last")
    np.testing.assert_array_equal(last, w[:, -10:, -10:])
    assert groups[0].start == len(ids) - 10


def test_byte_split_characters_are_labelled_by_their_character():
    tok = load(TINY_GPT2).tokenizer
    ids = tok.encode(CHINESE)
    labels = token_labels(tok, ids)
    assert len(labels) == len(ids) > 6  # byte-level BPE with 300 tokens splits most characters
    assert labels[:5] == ["今¹", "今²", "今³", "天", "天"]
    assert {lab[0] for lab in labels} == set(CHINESE)
    assert token_labels(tok, tok.encode("a b\n")) == ["a", "␣b", "⏎"]


# --- the CLI --------------------------------------------------------------------------------


def test_show_mask_offline_labels_each_character(cli):
    r = cli("attn", "--show-mask", CHINESE, "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [t["label"] for t in data["tokens"]] == list(CHINESE)
    assert data["tokens"][2] == {"id": None, "text": CHINESE[2], "position": 2, "label": CHINESE[2]}  # no tokenizer: no id
    w = np.array(data["weights"])
    assert w.shape == (6, 6)
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    assert (w[~causal_mask(6)] == 0).all()

    r = cli("attn", "--show-mask", CHINESE)
    assert r.exit_code == 0, r.stderr
    rows = [line.strip() for line in r.stdout.splitlines() if line.strip()[:1] in set(CHINESE) and line.endswith("1.00")]
    assert [row[0] for row in rows] == list(CHINESE)  # one row of weights per character, in order, each summing to 1
    assert "-inf" in r.stdout


def test_show_mask_patterns(cli):
    r = cli("attn", "--pattern", "sliding:2", "a b c d", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["allowed"] == sliding_mask(4, 2).tolist()
    r = cli("attn", "--show-mask", "a b c d e f", "--pattern", "banded:3")
    assert r.exit_code == 0 and "banded:3" in r.stdout and "keeps 12 of the 6×6" in r.stdout


def test_demo(cli):
    r = cli("attn", "--demo")
    assert r.exit_code == 0, r.stderr
    assert "-inf" in r.stdout and "c_2 = " in r.stdout
    data = json.loads(cli("attn", "--demo", "--json").stdout)
    np.testing.assert_allclose(data["context"], worked_example().context(data["row"]), rtol=1e-6)


def test_json_weights_are_the_engines(cli):
    ref = reference("tiny-llama")
    lm = load(TINY_LLAMA)
    text = "To be, or not to be"
    r = cli("attn", text, "-m", TINY_LLAMA, "--block", "all", "--head", "all", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    ids = [t["id"] for t in data["tokens"]]
    assert ids == lm.tokenizer.encode(text)
    got = np.array(data["weights"], dtype=np.float32)
    np.testing.assert_array_equal(got, attention_weights(lm.model, ids, [0, 1, 2], FAST))  # as the command runs it
    assert data["weights_shape"] == [3, ref["attn_short"].shape[1], len(ids), len(ids)]


def test_terminal_views(cli):
    r = cli("attn", "To be, or not", "-m", TINY_GPT2, "--block", "1", "--head", "2")
    assert r.exit_code == 0, r.stderr
    assert "block 1 of 3 · head 2 of 4" in r.stdout and "masked" in r.stdout and "█" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    r = cli("attn", "To be, or not", "-m", TINY_GPT2, "--head", "all", "--values")
    assert r.exit_code == 0 and sum(line.rstrip().endswith("Σ") for line in r.stdout.splitlines()) == 4
    r = cli("attn", "To be, or not", "-m", TINY_GPT2, "--head", "all", "--block", "all")
    assert r.exit_code == 0 and "B2 H3" in r.stdout and "What each head attends to" in r.stdout


def test_long_text_is_fitted_with_a_note(cli):
    text = "the quick brown fox jumps over the lazy dog " * 3
    for how in ("last", "first", "pool"):
        r = cli("attn", text, "-m", TINY_GPT2, "--fit", how)
        assert r.exit_code == 0, r.stderr
        assert "--fit" in r.stdout
        assert max(len(line) for line in r.stdout.splitlines()) <= 80, how


@pytest.mark.parametrize(
    "args, message",
    [
        (["hi", "--block", "3"], "--block 3 is not a block of tiny-gpt2: it has 3 blocks, 0 to 2"),
        (["hi", "--block", "-4"], "--block -4 is not a block of tiny-gpt2: it has 3 blocks, 0 to 2 (-1 = the last"),
        (["hi", "--layer", "x"], "--block x is not a block"),
        (["hi", "--head", "-5"], "--head -5 is not a head of tiny-gpt2: it has 4 heads"),
        (["hi", "--head", "4"], "--head 4 is not a head"),
        ([""], "the text is empty"),
        ([], "give the TEXT"),
    ],
)
def test_bad_values_are_one_line_errors(cli, args, message):
    r = cli("attn", "-m", TINY_GPT2, *args)
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and message in r.stderr and r.stderr.count("\n") == 1


def test_csv_and_svg(cli, tmp_path):
    r = cli("attn", "To be", "-m", TINY_GPT2, "--head", "all", "--csv", tmp_path / "a.csv", "--svg", tmp_path / "a.svg", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    w = np.array(data["weights"])  # [1, 4, T, T]
    rows = list(csv.DictReader(open(tmp_path / "a.csv", encoding="utf-8")))
    assert len(rows) == w.size
    one = next(x for x in rows if (x["head"], x["query"], x["key"]) == ("3", "2", "1"))
    assert float(one["weight"]) == pytest.approx(w[0, 3, 2, 1], rel=1e-6) and one["key_token"] == "o"
    svg = ET.parse(tmp_path / "a.svg").getroot()
    texts = [e.text for e in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert {"head 0", "head 3", "T", "o"} <= set(texts)
    assert int(svg.get("width")) > 0 and int(svg.get("height")) > 0


def _png_and_layout(cli, tmp_path, *args):
    from PIL import Image

    r = cli("attn", *args, "--png", tmp_path / "a.png", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    labels = [t["label"] for t in data["tokens"]] if "tokens" in data and isinstance(data["tokens"][0], dict) else data["tokens"]
    img = np.asarray(Image.open(tmp_path / "a.png").convert("RGB")).astype(int)
    return img, labels, data


def _dark(region: np.ndarray) -> int:
    return int((region.sum(axis=-1) < 300).sum())


def test_png_has_the_expected_size_and_labels_on_both_axes(cli, tmp_path):
    img, labels, data = _png_and_layout(cli, tmp_path, "To be, or not to be", "-m", TINY_GPT2, "--block", "2", "--head", "1")
    w = np.array(data["weights"])[0, 0]
    panel = images.Panel("head 1", w, causal_mask(len(labels)), labels, labels)
    heading = f"tiny-gpt2 · block 2 of 3 · head 1 of 4 · {len(labels)} tokens"
    d = images.layout([[panel]], heading)
    assert img.shape == (d.height, d.width, 3)
    x0, y0, cell = d.grids[0]
    t = len(labels)
    # The cells: the top-left is weight 1 (viridis yellow), the top-right is masked (grey).
    assert tuple(img[y0 + cell // 2, x0 + cell // 2]) == tuple(images.viridis(1.0).tolist())
    assert tuple(img[y0 + cell // 2, x0 + (t - 1) * cell + cell // 2]) == images.MASKED_FILL
    # Labels: ink left of the rows and above the columns, where the label-less layout has none.
    bare = images.layout([[panel]], heading, labels=False)
    assert (bare.width, bare.height) == (d.width, d.height)
    left = img[y0 : y0 + t * cell, x0 - 40 : x0 - 2]
    top = img[y0 - 30 : y0 - 2, x0 : x0 + t * cell]
    assert _dark(left) > 50 and _dark(top) > 50
    for i in range(t):  # every row has its label
        assert _dark(img[y0 + i * cell + 2 : y0 + (i + 1) * cell - 2, 0 : x0 - 2]) > 0, labels[i]


@pytest.fixture
def no_system_fonts(monkeypatch):
    """As on a fresh machine: no TFCLI_FONT, and fontconfig and the usual font paths find nothing."""
    monkeypatch.delenv("TFCLI_FONT", raising=False)
    monkeypatch.setattr(fonts, "_fontconfig_cjk", lambda: None)
    monkeypatch.setattr(fonts, "CJK_FONTS", [])
    monkeypatch.setattr(fonts, "LATIN_FONTS", [])


def _label_cells(img, d, n):
    """The row label left of each of the n rows of the first panel: [n] crops of the PNG."""
    x0, y0, cell = d.grids[0]
    return [img[y0 + i * cell + 1 : y0 + (i + 1) * cell - 1, 0 : x0 - 2] for i in range(n)]


@pytest.mark.parametrize("args", [["--show-mask", CHINESE], ["-m", "tang", CHINESE, "--block", "0", "--head", "0"]])
def test_png_of_chinese_labels_needs_no_system_font(cli, tmp_path, no_system_fonts, args):
    assert fonts.system_fonts() == [] and fonts.Fonts().files == [(str(fonts.SHIPPED_FONT), 0)]
    img, labels, data = _png_and_layout(cli, tmp_path, *args)
    assert labels == list(CHINESE)
    w = np.array(data["weights"]).reshape(-1, 6, 6)[0]
    heading = "causal mask · 6 tokens" if "--show-mask" in args else "tang · block 0 of 4 · head 0 of 8 · 6 tokens"
    d = images.layout([[images.Panel("x", w, causal_mask(6), labels, labels)]], heading)
    assert img.shape == (d.height, d.width, 3)
    cells = _label_cells(img, d, 6)
    assert all(_dark(c) > 10 for c in cells)
    # Real glyphs, not the font's box for a missing character: the two 天 are drawn alike, the others differently.
    same = [[np.array_equal(a, b) for b in cells] for a in cells]
    assert same[1][2] and sum(map(sum, same)) == 6 + 2, "the labels look alike: drawn as boxes?"
    f = fonts.Fonts()
    tofu = bytes(f.face("x", 16).getmask(fonts._NOTDEF_PROBE))
    assert all(bytes(f.face(c, 16).getmask(c)) != tofu for c in CHINESE) and not f.missing


def test_the_shipped_font_covers_the_shipped_vocabularies(no_system_fonts):
    size = fonts.SHIPPED_FONT.stat().st_size
    assert size < 5_000_000, f"the shipped font is {size / 1e6:.1f} MB"
    licence = (fonts.SHIPPED_FONT.parent / "OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Adobe" in licence
    f = fonts.Fonts()
    for model in ("tang", "shakespeare"):
        vocab = json.loads((TANG.parent / model / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
        chars = {c for token in vocab for c in token if c.isprintable()}
        # Everything in the Basic Multilingual Plane; the rarest ideographs (Extension B on) are not in Noto Sans CJK.
        common = {c for c in chars if ord(c) < 0x10000 and not 0xE000 <= ord(c) < 0xF900}
        lacking = {c for c in common if not f._covers(0, c)}
        assert not lacking, "".join(sorted(lacking))[:40]
    assert all(f._covers(0, c) for c in "␣⏎→¹²³⁴…·×—")


def test_a_character_the_subset_lacks_falls_back_to_a_system_font(monkeypatch):
    monkeypatch.delenv("TFCLI_FONT", raising=False)
    system = fonts.system_fonts()
    rare = "\U00024890"  # a CJK Extension B character: not in the subset
    f = fonts.Fonts()
    assert not f._covers(0, rare)
    f.face(rare, 16)
    if not any(fonts.Fonts([s])._covers(0, rare) for s in system):
        assert f.missing == {rare}  # no font has it: reported, drawn as a box
    else:
        assert not f.missing


def test_png_errors_are_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("TFCLI_FONT", str(tmp_path / "missing.ttf"))
    r = cli("attn", "hi", "-m", TINY_GPT2, "--png", tmp_path / "a.png")
    assert r.exit_code == 1 and r.stderr.startswith("error: TFCLI_FONT=") and r.stderr.count("\n") == 1

    monkeypatch.delenv("TFCLI_FONT")
    monkeypatch.setattr(fonts, "_fontconfig_cjk", lambda: None)
    monkeypatch.setattr(fonts, "CJK_FONTS", [])
    monkeypatch.setattr(fonts, "LATIN_FONTS", [])
    monkeypatch.setattr(fonts, "SHIPPED_FONT", tmp_path / "gone.otf")  # a package stripped of its font
    r = cli("attn", "--show-mask", CHINESE, "--png", tmp_path / "a.png")
    assert r.exit_code == 1 and "no font with CJK glyphs" in r.stderr and "TFCLI_FONT" in r.stderr and "fonts-noto-cjk" in r.stderr
    assert r.stderr.count("\n") == 1
    r = cli("attn", "--show-mask", "abc", "--png", tmp_path / "a.png")  # Latin labels need no CJK font
    assert r.exit_code == 0, r.stderr

    monkeypatch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
    r = cli("attn", "hi", "-m", TINY_GPT2, "--png", tmp_path / "b.png")
    assert r.exit_code == 1 and "needs Pillow" in r.stderr and "pip install pillow" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "b.png").exists()
    assert cli("attn", "hi", "-m", TINY_GPT2, "--svg", tmp_path / "b.svg").exit_code == 0  # SVG needs no library


def test_a_font_given_in_tfcli_font_comes_first(cli, tmp_path, monkeypatch):
    latin = next((p for p, _ in fonts.LATIN_FONTS if Path(p).is_file()), None)
    if latin is None:
        pytest.skip("no Latin system font to give")
    monkeypatch.setenv("TFCLI_FONT", latin)
    f = fonts.Fonts()
    assert f.files[0] == (latin, 0) and f.files[1] == (str(fonts.SHIPPED_FONT), 0)
    assert f.face("abc", 16).path == latin  # it has these
    assert f.face("今天", 16).path == str(fonts.SHIPPED_FONT)  # it lacks these: the shipped subset draws them


@pytest.mark.skipif(not (TANG / "config.json").exists(), reason="weights/tang is not trained yet")
def test_tang_labels_each_character(cli):
    r = cli("attn", CHINESE, "-m", "tang", "--block", "0", "--head", "0", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [t["label"] for t in data["tokens"]] == list(CHINESE)
    w = np.array(data["weights"])[0, 0]
    assert w.shape == (6, 6)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-5)
    assert (w[~causal_mask(6)] == 0).all()
    r = cli("attn", CHINESE, "-m", "tang", "--block", "0", "--head", "0")
    assert r.exit_code == 0, r.stderr
    lines = [line.strip() for line in r.stdout.splitlines()]
    rows = [line for line in lines if line[:1] in set(CHINESE) and len(line) > 1 and set(line[1:]) <= set(" ░▒▓█·")]
    assert [row[0] for row in rows] == list(CHINESE)  # a row per character, in order


# --- many heads: --explain ------------------------------------------------------------------

def _flat(text: str) -> str:
    """Terminal text with its line wrapping undone."""
    return " ".join(text.split())


SMOLLM2_CONFIG = {  # HuggingFaceTB/SmolLM2-135M's config.json, the fields that fix its shape
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
    "num_attention_heads": 9, "num_key_value_heads": 3, "num_hidden_layers": 30, "vocab_size": 49152,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000, "tie_word_embeddings": True,
    "bos_token_id": 0, "eos_token_id": 0,
}  # fmt: skip


def test_explain_without_a_model_is_gpt3(cli):
    r = cli("attn", "--explain")
    assert r.exit_code == 0, r.stderr
    out = _flat(r.stdout)
    assert "GPT-3 175B" in out and "96 × 128 = 12,288" in out and "W_O" in out
    assert "Value↓" in out and "Value↑" in out and "[c_0 c_1 … c_95]" in out  # not eaten as markup
    assert "plain multi-head attention" in out
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    data = json.loads(cli("attn", "--explain", "--json").stdout)
    assert data["model"] == "gpt3"
    assert data["shape"] | {} == {"blocks": 96, "layers": 96, "d_model": 12288, "heads": 96, "head_dim": 128, "kv_heads": 96, "d_attn": 12288, "d_kv": 12288}
    assert data["value_down"] == [12288, 128] and data["value_up"] == [128, 12288]
    assert data["weights_per_layer"]["W_O"] == 12288 * 12288


def test_explain_reads_only_config_json_and_names_the_shared_heads(cli, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_CONFIG))  # no weights, no tokenizer
    r = cli("attn", "--explain", "-m", tmp_path)
    assert r.exit_code == 0, r.stderr
    out = _flat(r.stdout)
    assert "9 × 64 = 576" in out and "Grouped-query attention: the 9 query heads share 3 key/value heads, 3 each" in out
    assert "Key/value head 0 serves query heads 0-2; key/value head 1 serves query heads 3-5; key/value head 2 serves query heads 6-8" in out
    assert "W_K and W_V are [576, 192] instead of [576, 576]" in out
    data = json.loads(cli("attn", "--explain", "-m", tmp_path, "--json").stdout)
    assert [g["query_heads"] for g in data["groups"]] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert data["shape"]["kv_heads"] == 3 and data["q_per_kv"] == 3
    # The preset of `tfcli params` gives the same numbers as the config.json.
    preset = json.loads(cli("attn", "--explain", "--preset", "smollm2-135m", "--json").stdout)
    assert preset["shape"] == data["shape"] and preset["groups"] == data["groups"]


def test_explain_in_chinese(cli):
    r = cli("attn", "--explain", "-m", "tang", "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    zh = r.stdout.replace("\n", "")  # Rich wraps Chinese between any two characters
    assert "多头注意力" in zh and "8 × 32 = 256" in _flat(r.stdout) and "拼接" in zh and "普通多头注意力" in zh
    assert "Multi-head attention in tang" not in r.stdout  # Chinese only, as every command
    assert "多头注意力" not in cli("attn", "--explain", "-m", "tang", "--lang", "en").stdout


def test_demo_ends_with_many_heads(cli):
    r = cli("attn", "--demo")
    assert r.exit_code == 0, r.stderr
    assert "5. Many heads" in r.stdout and "96 × 128 = 12,288" in _flat(r.stdout)


def test_the_grouping_shown_is_the_engines():
    """Changing the keys of key/value head 1 in layer 0 changes exactly the query heads --explain says read it."""
    from tfcli.analysis.attention import HeadSplit

    lm = load(TINY_LLAMA)
    split = HeadSplit("tiny-llama", lm.config)
    ids = reference("tiny-llama")["ids_short"].tolist()
    before = attention_weights(lm.model, ids, [0])[0]  # [H, T, T]
    layer, dh, d_attn = lm.model.layers[0], split.config.head_dim, split.config.d_attn
    w = layer.w_qkv.copy()  # [D, H*Dh + 2*Hkv*Dh]: q, then k, then v
    w[:, d_attn + dh : d_attn + 2 * dh] *= 3.0  # the keys of key/value head 1
    lm.model.layers[0] = dataclasses.replace(layer, w_qkv=w)
    after = attention_weights(lm.model, ids, [0])[0]
    changed = [h for h in range(split.config.n_head) if not np.allclose(before[h], after[h])]
    assert changed == list(split.groups()[1]) == [h for h in range(split.config.n_head) if split.kv_head_of(h) == 1] == [3, 4, 5]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--explain", "hi"], "--explain shows the shapes"),
        (["--explain", "--preset", "gpt5"], "--preset: unknown preset 'gpt5'"),
        (["--preset", "gpt3"], "--preset goes with --explain"),
        (["--explain", "--preset", "gpt3", "-m", "tang"], "give -m MODEL or --preset, not both"),
    ],
)
def test_explain_bad_values(cli, args, message):
    r = cli("attn", *args)
    assert r.exit_code == 2, r.stderr
    assert r.stderr.startswith("error: ") and message in r.stderr and r.stderr.count("\n") == 1


# --- learner views: labels, widths, summaries, bounds ---------------------------------------


@pytest.mark.parametrize("args", [["--demo"], ["--show-mask", "the cat sat on the mat"]])
def test_column_labels_go_across_when_they_fit(cli, args):
    r = cli("attn", *args)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    tokens = "the cat sat on the mat".split()
    headers = [k for k, line in enumerate(lines) if line.split() in (tokens, tokens + ["Σ"])]
    assert len(headers) >= 2 and all(lines[k + 1].split()[0] == "the" for k in headers)  # one line, just above the rows
    assert not any(line.strip() in set("thecasonm") for line in lines)  # no letter stacked on its own line


def test_column_labels_that_do_not_fit_are_written_downwards(cli):
    r = cli("attn", "--show-mask", "a extraordinary b")
    assert r.exit_code == 0, r.stderr
    lines = [line.strip() for line in r.stdout.splitlines()]
    i = lines.index("e")
    assert lines[i : i + 5] == ["e", "x", "t", "r", "a"] and lines[i + 5].split() == ["a", "…", "b"]  # cut to six lines, ending above the columns


def _svg_texts(path):
    root = ET.parse(path).getroot()
    return [(e.text, e.get("transform")) for e in root.iter("{http://www.w3.org/2000/svg}text")]


def test_image_labels_are_measured_and_turned_when_they_do_not_fit(tmp_path):
    labels = ["The", "␣cat", "␣sat", "␣because", "␣it", "␣was", "␣tired", "."]
    n = len(labels)
    w = masked_softmax(np.zeros((n, n), np.float32), causal_mask(n))
    panel = images.Panel("head 0", w, causal_mask(n), labels, labels)
    f = images.fonts_or_none()
    d = images.layout([[panel]], "words", measure=f.measure)
    images.write_svg(tmp_path / "a.svg", d)
    images.write_png(tmp_path / "a.png", d, f)
    texts = dict(_svg_texts(tmp_path / "a.svg"))
    for s in labels:
        assert s in texts  # whole, not cut to "beca…"
    assert texts["␣because"].startswith("rotate(-90")
    # In the PNG, ink rises above the column of '␣because' about as far as the word is long.
    from PIL import Image

    img = np.asarray(Image.open(tmp_path / "a.png").convert("RGB")).astype(int)
    x0, y0, cell = d.grids[0]
    column = img[: y0 - 2, x0 + 3 * cell + 2 : x0 + 4 * cell - 2]
    inked = np.nonzero((column.sum(axis=-1) < 500).any(axis=1))[0]
    size = 16
    assert inked.size and (y0 - inked.min()) >= 0.8 * f.measure("␣because", size)
    # Single characters fit their cells: across, level.
    d = images.layout([[images.Panel("x", np.eye(6), causal_mask(6), list(CHINESE), list(CHINESE))]], "x", measure=f.measure)
    images.write_svg(tmp_path / "b.svg", d)
    assert all(t is None for _, t in _svg_texts(tmp_path / "b.svg"))


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("extra", [[], ["--values"], ["--head", "all"], ["--head", "all", "--block", "all"]])
def test_fitted_views_fit_the_terminal(cli, monkeypatch, columns, extra):
    from rich.cells import cell_len

    from tfcli.cli.console import out

    monkeypatch.setenv("COLUMNS", str(columns))  # not out.width: restoring that would fix the width for later tests
    monkeypatch.setattr(out, "soft_wrap", True)  # lines too long stay long, instead of wrapping out of shape
    text = "the quick brown fox jumps over the lazy dog " * 4
    for how in ("pool", "last", "first"):
        r = cli("attn", text, "--fit", how, *extra)
        assert r.exit_code == 0, r.stderr
        drawn = [line for line in r.stdout.splitlines() if set(line) & set("█▓▒░·") or re.search(r" \d\.\d\d$", line)]  # cells, numbers
        widest = max(cell_len(line) for line in drawn)
        assert widest <= columns, (how, widest)
        assert widest >= columns - 12, (how, widest)  # and it uses the room it has


def test_head_all_panels_carry_token_labels(cli):
    r = cli("attn", "-m", "tang", CHINESE, "--head", "all")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "head 0" in r.stdout and "head 7" in r.stdout
    headers = [line for line in lines if line.split() and set(line.split()) == {CHINESE}]
    assert len(headers) == 2  # a line of panels has each panel's column labels
    rows = [line for line in lines if line[:1] in CHINESE and len(line) > 2]
    assert [row[0] for row in rows] == list(CHINESE) * 2  # and the row labels on its left


def test_the_top_token_does_not_count_the_first_row():
    w = np.array([[1.0, 0, 0, 0], [0.4, 0.6, 0, 0], [0.3, 0.7, 0, 0], [0.3, 0.4, 0.3, 0]])
    s = summarize(w, 0, 0)
    assert s.top_key == 1 and s.top_share == pytest.approx(1.7 / 3)  # with row 0, token 0 would win: 2.0 against 1.7


def test_a_huge_mask_is_bounded(cli, tmp_path):
    import time

    text = "a " * 20_000
    start = time.perf_counter()
    r = cli("attn", "--show-mask", text)
    assert r.exit_code == 0, r.stderr
    assert "Showing the first" in r.stdout and "20,000 tokens" in r.stdout and "200,010,000" in r.stdout.replace("\n", "")
    assert time.perf_counter() - start < 10
    for flag in (["--json"], ["--png", tmp_path / "a.png"], ["--csv", tmp_path / "a.csv"]):
        r = cli("attn", "--show-mask", text, *flag)
        assert r.exit_code == 2 and r.stderr.startswith("error: ") and "at most 1,024 tokens" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "a.png").exists()


def test_a_picture_too_big_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(images, "MAX_SVG_CELLS", 100)
    r = cli("attn", "--show-mask", "a b c d e f g h i j k", "--svg", tmp_path / "a.svg")
    assert r.exit_code == 2 and "--svg would draw 121 cells, more than 100" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "a.svg").exists()


def test_characters_no_font_has_are_named_in_a_warning(cli, tmp_path, no_system_fonts):
    rare = "\U00024890"  # CJK Extension B: not in the shipped subset, and no system font here
    r = cli("attn", "--show-mask", "今" + rare, "--png", tmp_path / "a.png")
    assert r.exit_code == 0 and (tmp_path / "a.png").exists()
    assert "warning: no font found has 1 of the characters" in r.stderr and rare in r.stderr and "TFCLI_FONT" in r.stderr



def test_show_mask_says_it_ignores_block_and_head(cli):
    r = cli("attn", "--show-mask", "the cat sat", "--block", "2")
    assert r.exit_code == 0 and "--block and --head are ignored" in r.stderr
    assert "ignored" not in cli("attn", "--show-mask", "the cat sat").stderr
