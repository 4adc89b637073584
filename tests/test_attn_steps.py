"""`tfcli attn --steps`: one head's attention taken apart, every array the model's own.

On the shipped Tang model the arrays are checked against the same quantities computed here from
its weights with NumPy (GPT-2's block written out); on tiny random models of every family against
transformers' eager attention (its attention weights, and each head's context vector read by a
hook at the output projection's input); then the views, the picture and the errors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from rich.cells import cell_len

from tfcli.analysis.attention import attention_weights
from tfcli.analysis.attention_steps import attention_steps
from tfcli.store import load

from conftest import TINY_GPT2, TINY_LLAMA, one_line_error

TANG = Path(__file__).resolve().parents[1] / "weights" / "tang"
NOTE = "今天天气很好"  # the note's sentence


def near(got, want, steps: float = 64) -> None:
    """Equal within `steps` float32 steps of the largest |want| (sums of products in another order)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.abs(got - want).max() <= steps * np.finfo(np.float32).eps * max(np.abs(want).max(), 1e-30)


# --- the shipped model against NumPy ------------------------------------------------------------


def _layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


def test_tang_block_0_head_0_equals_numpy_from_the_weights(cli):
    from safetensors.numpy import load_file

    r = cli("attn", "--steps", NOTE, "-m", "tang", "--block", "0", "--head", "0", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    keys = ("tokens", "x", "q", "k", "v", "scores", "scaled", "scale", "weights", "context", "output")
    assert set(keys) <= set(doc)
    ids = [t["id"] for t in doc["tokens"]]
    assert "".join(t["text"] for t in doc["tokens"]) == NOTE and len(ids) == 6

    w = {k: v.astype(np.float32) for k, v in load_file(TANG / "model.safetensors").items()}
    p = "transformer." if "transformer.wte.weight" in w else ""
    T, Dh = len(ids), 256 // 8
    x = _layer_norm(w[p + "wte.weight"][ids] + w[p + "wpe.weight"][:T], w[p + "h.0.ln_1.weight"], w[p + "h.0.ln_1.bias"])  # [T, D]
    qkv = x @ w[p + "h.0.attn.c_attn.weight"] + w[p + "h.0.attn.c_attn.bias"]  # [T, 3D]
    q, k, v = qkv[:, 0:Dh], qkv[:, 256 : 256 + Dh], qkv[:, 512 : 512 + Dh]  # head 0 of each
    scores = q @ k.T
    scaled = scores / np.sqrt(Dh)
    masked = np.where(np.tril(np.ones((T, T), bool)), scaled, -np.inf)
    weights = np.exp(masked - masked.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    context = weights @ v
    output = context @ w[p + "h.0.attn.c_proj.weight"][0:Dh]  # head 0's rows of W_O

    for name, want in [("x", x), ("q", q), ("k", k), ("v", v), ("scores", scores), ("scaled", scaled),
                       ("weights", weights), ("context", context), ("output", output)]:  # fmt: skip
        near(doc[name], want)
    assert doc["scale"] == pytest.approx(1 / np.sqrt(Dh), rel=1e-7)
    got = np.array(doc["weights"])
    np.testing.assert_allclose(got.sum(1), 1.0, atol=1e-6)
    assert (got[np.triu_indices(T, 1)] == 0).all()  # exactly 0 above the diagonal
    assert doc["rope"] is False and doc["kv_head"] == 0 and doc["heads_sharing_kv"] == [0]


# --- every family against transformers ---------------------------------------------------------


def _transformers_heads(folder, ids, block):
    """transformers' eager attention weights of `block` [H, T, T] and the input of its output
    projection (every head's context vector side by side) [T, H*Dh], read by a hook."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    if model.config.model_type == "gpt2":
        attn = model.transformer.h[block].attn
        o_proj, o_weight = attn.c_proj, attn.c_proj.weight.detach().numpy()  # Conv1D [H*Dh, D]
    else:
        o_proj = model.model.layers[block].self_attn.o_proj
        o_weight = o_proj.weight.detach().numpy().T  # Linear [D, H*Dh] -> [H*Dh, D]
    seen = {}
    handle = o_proj.register_forward_pre_hook(lambda module, args: seen.__setitem__("z", args[0][0].detach().numpy()))
    with torch.no_grad():
        out = model(torch.tensor([list(ids)]), output_attentions=True)
    handle.remove()
    return out.attentions[block][0].numpy(), seen["z"], o_weight


def _check_against_transformers(folder, ids, blocks):
    lm = load(folder)
    cfg = lm.config
    for block in blocks:
        weights, z, w_o = _transformers_heads(folder, ids, block)
        for head in range(cfg.n_head):
            s = attention_steps(lm.model, list(ids), block, head)
            near(s.weights, weights[head], 256)
            cut = slice(head * cfg.head_dim, (head + 1) * cfg.head_dim)
            near(s.context, z[:, cut], 256)
            near(s.output, z[:, cut] @ w_o[cut], 256)  # the head's output: its context through its rows of W_O
            assert s.kv_head == head // cfg.q_per_kv and head in s.sharing and len(s.sharing) == cfg.q_per_kv
            np.testing.assert_allclose(s.weights.sum(1), 1.0, atol=1e-5)
            if s.rope:  # a rotation keeps lengths; at position 0 it turns nothing
                near(np.linalg.norm(s.q_unrotated, axis=1), np.linalg.norm(s.q, axis=1), 256)
                near(s.q_unrotated[0], s.q[0], 4)
                assert not np.allclose(s.q_unrotated[1:], s.q[1:])


@pytest.mark.parametrize("folder", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_tiny_models_equal_transformers(folder):
    ids = np.random.default_rng(0).integers(0, 300, 13).tolist()
    _check_against_transformers(folder, ids, range(load(folder).config.n_layer))


@pytest.mark.parametrize("family", ["qwen3", "gemma3", "phi3", "llama3"])
def test_every_family_equals_transformers(family, tmp_path):
    """Qwen3's q/k norms, Gemma 3's query scale and sliding window of 7 (shorter than the text),
    Phi-3's partial rotation and window, Llama 3's scaled RoPE."""
    pytest.importorskip("transformers")
    from test_new_families import BUILDERS

    BUILDERS[family](tmp_path, tied=family != "phi3")
    ids = np.random.default_rng(1).integers(0, 300, 12).tolist()
    _check_against_transformers(tmp_path, ids, [0, 1])


def test_the_steps_are_the_pass_own_weights():
    """The same weights the forward pass records at site attn (the plain `attn` view's)."""
    lm = load(TINY_LLAMA)
    ids = lm.tokenizer.prompt("To be, or not to be")
    recorded = attention_weights(lm.model, ids, [2])[0]  # [H, T, T]
    for head in range(lm.config.n_head):
        near(attention_steps(lm.model, ids, 2, head).weights, recorded[head], 16)


# --- the views ----------------------------------------------------------------------------------


STEP_HEADINGS = ["1. The token vectors X", "2. Queries", "3. Keys", "4. Values", "5. Scores", "6. Divided by √Dh",
                 "7. The mask", "8. Softmax of each row: the weights", "9. The context vectors", "10. The head's output"]  # fmt: skip


def test_terminal_view_has_every_step_with_its_shape(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("attn", "--steps", NOTE, "-m", "tang", "--block", "0", "--head", "0")
    assert r.exit_code == 0, r.stderr
    flat = re.sub(r"\s*\n\s*", " ", r.stdout)
    for heading in STEP_HEADINGS:
        assert heading in flat, heading
    assert "[T, D] = [6, 256]" in flat and "[T, Dh] = [6, 32]" in flat and "[T, T] = [6, 6]" in flat and "c_t W_O[h]" in flat
    assert "-inf" in r.stdout and "not rotated" in flat
    assert all(cell_len(line) <= 80 for line in r.stdout.splitlines())
    # the weight table as the note draws it: the first row all on itself, each row summing to 1
    table = r.stdout.split("8. Softmax")[1].split("9. The context")[0]
    rows = [line.split() for line in table.splitlines() if line[:1] in set(NOTE)]
    assert [row[0] for row in rows] == list(NOTE)
    assert rows[0][1:] == ["1.00", "0", "0", "0", "0", "0", "1.00"] and all(row[-1] == "1.00" for row in rows)


def test_chinese_uses_the_notes_words(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("attn", "--steps", NOTE, "-m", "tang", "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    for word in ("查询", "键", "值", "权重", "上下文向量"):
        assert word in r.stdout, word
    assert not re.search(r"[A-Za-z]{4,} [a-z]{3,} [a-z]{3,}", r.stdout), "an English sentence in the Chinese view"


def test_grouped_query_heads_say_which_key_head_they_share_and_rope_is_shown(cli):
    r = cli("attn", "--steps", "To be, or not", "-m", TINY_LLAMA, "--block", "1", "--head", "4")
    assert r.exit_code == 0, r.stderr
    flat = re.sub(r"\s*\n\s*", " ", r.stdout)
    assert "6 query heads share 2 key/value heads; head 4 reads key/value head 1, with heads 3, 4, 5" in flat
    assert "after RoPE" in flat and "q before it:" in flat


def test_a_long_text_shows_the_first_tokens_and_json_has_them_all(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = "To be, or not to be, that is the question: whether 'tis nobler in the mind"
    r = cli("attn", "--steps", text, "-m", TINY_GPT2)
    assert r.exit_code == 0 and "Showing the first" in r.stdout
    assert all(cell_len(line) <= 80 for line in r.stdout.splitlines())
    doc = json.loads(cli("attn", "--steps", text, "-m", TINY_GPT2, "--json").stdout)
    t = len(doc["tokens"])
    assert t > 20 and np.array(doc["weights"]).shape == (t, t) and np.array(doc["output"]).shape == (t, load(TINY_GPT2).config.d_model)


def test_png_and_svg_render(cli, tmp_path):
    from PIL import Image

    r = cli("attn", "--steps", NOTE, "-m", "tang", "--png", tmp_path / "s.png", "--svg", tmp_path / "s.svg")
    assert r.exit_code == 0, r.stderr
    assert "wrote" in r.stderr
    img = np.asarray(Image.open(tmp_path / "s.png").convert("RGB")).astype(int)  # [h, w, 3]
    assert img.shape[0] > 200 and img.shape[1] > 800
    red = ((img[..., 0] > 150) & (img[..., 2] < 90)).sum()
    blue = ((img[..., 2] > 150) & (img[..., 0] < 90)).sum()
    assert red > 500 and blue > 500  # signed panels drawn, not a blank canvas
    svg = (tmp_path / "s.svg").read_text()
    assert svg.count("<rect") > 6 * 16 * 4 and "softmax" in svg


@pytest.mark.parametrize(
    "args, code, needles",
    [
        (("--steps", "hello", "--head", "all"), 2, ["one head", "--head"]),
        (("--steps", "hello", "--block", "all"), 2, ["--block"]),
        (("--steps", "hello", "--head", "99"), 2, ["--head 99"]),
        (("--steps",), 2, ["TEXT"]),
        (("--steps", "hello", "--demo"), 2, ["--demo"]),
        (("--steps", "hello", "--csv", "a.csv"), 2, ["--csv"]),
        (("--demo", "今天天气很好"), 2, ["--demo", "TEXT", "--steps"]),
    ],
)
def test_bad_combinations_are_one_line_errors(cli, args, code, needles):
    one_line_error(cli("attn", "-m", TINY_GPT2, *args), code, *needles)


def test_demo_without_text_still_works(cli):
    r = cli("attn", "--demo")
    assert r.exit_code == 0 and "cat" in r.stdout
