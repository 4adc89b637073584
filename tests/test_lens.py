"""tfcli lens: the logit lens equals transformers' hidden states through the model's final norm and
lm_head, at every layer and position, for GPT-2, Llama and Qwen2 (and SmolLM2, slow); the command's
output, JSON and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA
from test_inspect import TOLERANCE, TEXT, reference_lens, reference_pass, tiny_qwen2  # noqa: F401  (a fixture)
from tfcli.engine.fast import FAST

K = 5


def check_lens_equals_reference(folder: Path, text: str = TEXT) -> None:
    from tfcli.analysis.lens import logit_lens, residual_stream
    from tfcli.store import load

    lm = load(folder)
    ids = lm.tokenizer.prompt(text)
    hidden, _, _, model = reference_pass(folder, ids)
    ref = reference_lens(model, hidden)  # [L+1] x [T, V]
    lens = logit_lens(lm.model, residual_stream(lm.model, ids), k=K)
    assert lens.ids.shape == (lm.config.n_layer + 1, len(ids), K)
    for layer, p in enumerate(ref):
        ref_top = -np.sort(-p, axis=-1)[:, :K]  # [T, K]
        assert np.abs(lens.probs[layer] - ref_top).max() <= TOLERANCE, layer
        # Our top tokens are the reference's (up to ties closer than the tolerance): their reference
        # probabilities are the ones we computed.
        assert np.abs(np.take_along_axis(p, lens.ids[layer], axis=-1) - lens.probs[layer]).max() <= TOLERANCE, layer
        assert (lens.ids[layer, :, 0] == p.argmax(-1))[np.diff(-ref_top, axis=-1)[:, 0] > TOLERANCE].all(), layer
        bits = -(p * np.log2(np.maximum(p, 1e-45))).sum(-1)  # [T]
        assert np.abs(lens.entropy[layer] - bits).max() <= 1e-3, layer
    assert np.abs(lens.probs.sum(-1)).max() <= 1 + 1e-5


@pytest.mark.parametrize("folder", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_lens_equals_reference(folder):
    check_lens_equals_reference(folder)


def test_lens_equals_reference_qwen2(tiny_qwen2):  # noqa: F811
    check_lens_equals_reference(tiny_qwen2)


@pytest.mark.slow
def test_lens_equals_reference_smollm2(smollm2_folder, monkeypatch):
    """On the textbook products (the quantized file's blocks dequantized, then NumPy), which the
    compiled ones are held to in test_smollm2.py."""
    monkeypatch.setenv("TFCLI_KERNELS", "numpy")
    check_lens_equals_reference(smollm2_folder, "The Eiffel Tower is in the city of Paris, which is the capital of")


def test_top_k_orders_by_value_then_id():
    from tfcli.analysis.lens import top_k

    p = np.array([[0.1, 0.4, 0.1, 0.4], [0.7, 0.1, 0.1, 0.1]])
    ids, vals = top_k(p, 3)
    assert ids.tolist() == [[1, 3, 0], [0, 1, 2]] and vals[0].tolist() == [0.4, 0.4, 0.1]


def test_trajectory_cosines_by_hand():
    from tfcli.analysis.lens import baseline_cosine, trajectory

    # Two texts of two tokens, D = 2, L = 1: layer 0 and layer 1 states.
    a = [np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([[0.0, 1.0], [1.0, 1.0]])]
    b = [np.array([[0.0, 3.0], [1.0, 0.0]]), np.array([[5.0, 0.0], [0.0, 2.0]])]
    emb = np.array([[1.0, 0.0], [0.0, 1.0]])
    t = trajectory([a, b], [0, 0], emb)
    assert t.pairwise.shape == (2, 2, 2)
    assert t.pairwise[0, 0, 1] == pytest.approx(1.0) and t.pairwise[1, 0, 1] == pytest.approx(1 / np.sqrt(2))
    assert t.from_embedding[0].tolist() == pytest.approx([1.0, 1 / np.sqrt(2)])
    assert t.from_embedding[1].tolist() == pytest.approx([1.0, 0.0])
    assert t.norms[1].tolist() == pytest.approx([1.0, 2.0])
    # baseline without the first positions: one state per text per layer, so one pair.
    assert baseline_cosine([a, b]).tolist() == pytest.approx([1.0, 1 / np.sqrt(2)])


# --- the command ------------------------------------------------------------------------------


def test_json_has_the_documented_keys(cli):
    r = cli("lens", "-m", TINY_LLAMA, "to be or not", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"model", "tokens", "layers"}
    assert data["model"] == "tiny-llama"
    assert all(set(t) == {"id", "text"} for t in data["tokens"])
    assert [layer["layer"] for layer in data["layers"]] == [0, 1, 2, 3]
    for layer in data["layers"]:
        assert len(layer["positions"]) == len(data["tokens"])
        for p in layer["positions"]:
            assert {"token_id", "token", "prob"} <= set(p) and 0 < p["prob"] <= 1


def test_json_last_layer_is_the_models_prediction(cli):
    from tfcli.store import load

    r = cli("lens", "-m", TINY_GPT2, "hello there", "--json")
    data = json.loads(r.stdout)
    lm = load(TINY_GPT2)
    ids = [t["id"] for t in data["tokens"]]
    logits = lm.model.forward(np.asarray(ids), lm.model.new_cache(len(ids)), all_logits=True, run=FAST)  # [T, V]
    assert [p["token_id"] for p in data["layers"][-1]["positions"]] == logits.argmax(-1).tolist()


def test_grid_and_position(cli):
    r = cli("lens", "-m", TINY_GPT2, "hello there")
    assert r.exit_code == 0, r.stderr
    rows = [line.split()[0] for line in r.stdout.splitlines()[2:6]]
    assert rows == ["0", "1", "2", "3"] and "0 emb" in r.stdout and "softmax(unembed(final_norm(h)))" in r.stdout
    assert "\x1b[" not in r.stdout  # NO_COLOR
    r = cli("lens", "-m", TINY_GPT2, "hello there", "--position", "-1", "--top", "3")
    assert r.exit_code == 0, r.stderr
    assert "#3" in r.stdout and "bits" in r.stdout
    r = cli("lens", "-m", TINY_GPT2, "hello there", "--lang", "zh")
    assert "每一列" in r.stdout


def test_compare(cli):
    r = cli("lens", "-m", TINY_LLAMA, "--compare", " be", "to be", "not to be")
    assert r.exit_code == 0, r.stderr
    assert "A·B" in r.stdout and "baseline" in r.stdout and "C reads" in r.stdout
    r = cli("lens", "-m", TINY_LLAMA, "--compare", " be", "to be", "--json")
    data = json.loads(r.stdout)
    assert set(data) == {"model", "texts", "layers"}
    first = data["layers"][0]
    assert np.allclose(np.diag(first["cosine"]), 1.0)
    assert first["from_embedding"][0]["cosine"] == pytest.approx(1.0, abs=1e-6)  # Llama's layer 0 is the embedding


def test_compare_warnings_are_prose_wrapped_to_the_width_and_in_chinese(cli):
    """What --compare warns about (texts ending in different tokens, a text of one token) is read by
    a person: wrapped between words to the width (80 columns off a terminal), each line within it,
    the first starting `warning:`; with --lang zh, in Chinese."""
    from rich.cells import cell_len

    for args, needle, zh in ((["be", "to be"], "different tokens", "末尾词元不同"), ([" be", "to be"], "single token", "只有一个词元")):
        r = cli("lens", "-m", TINY_LLAMA, "--compare", *args)
        assert r.exit_code == 0, r.stderr
        lines = r.stderr.splitlines()
        assert lines[0].startswith("warning: ") and needle in " ".join(lines) and len(lines) > 1
        assert all(cell_len(line) <= 80 for line in lines), lines
        r = cli("lens", "-m", TINY_LLAMA, "--compare", *args, "--lang", "zh")
        assert r.exit_code == 0 and zh in r.stderr.replace("\n", "")
        assert all(cell_len(line) <= 80 for line in r.stderr.splitlines())
    assert '(" be")' in cli("lens", "-m", TINY_LLAMA, "--compare", "be", "to be").stderr.replace("\n", " ")


def test_png_and_svg(cli, tmp_path):
    pytest.importorskip("PIL")
    r = cli("lens", "-m", TINY_GPT2, "hello there", "--png", tmp_path / "l.png", "--svg", tmp_path / "l.svg")
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "l.png").read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in (tmp_path / "l.svg").read_text()


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["", "-m", TINY_GPT2], 2, "empty"),
        (["hello", "-m", TINY_GPT2, "--position", "99"], 2, "--position 99"),
        (["hello", "-m", TINY_GPT2, "--top", "0"], 2, "--top"),
        (["a", "b", "-m", TINY_GPT2], 2, "--compare"),
        (["--compare", "a", "-m", TINY_GPT2], 2, "two or more"),
        (["hello " * 200, "-m", TINY_GPT2], 2, "context"),
        (["hello", "-m", "no-such-model"], 1, "no-such-model"),
    ],
)
def test_bad_input(cli, args, code, message):
    r = cli("lens", *args)
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert message in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_lens_is_one_forward_pass(cli, monkeypatch):
    """The lens of a text records the residual stream in ONE pass, not one pass per layer."""
    from tfcli.engine.model import Transformer

    calls = []
    real = Transformer.forward
    monkeypatch.setattr(Transformer, "forward", lambda self, *a, **kw: calls.append(len(a[0])) or real(self, *a, **kw))
    r = cli("lens", "-m", TINY_LLAMA, "one two three four five six seven eight nine ten eleven twelve", "--json")
    assert r.exit_code == 0, r.stderr
    assert len(calls) == 1 and calls[0] == len(json.loads(r.stdout)["tokens"])
