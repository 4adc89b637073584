"""tfcli score: per-token log-probabilities and the windowed loss, against transformers."""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA, hf_pretrained, one_line_error
from tfcli.engine.score import LSE_ROWS, log_sum_exp, score, window_starts
from tfcli.store import load

ROOT = Path(__file__).resolve().parents[1]
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs away into the woods. "


@pytest.mark.parametrize("shape", [(LSE_ROWS * 3 + 5, 97), (1, 4), (2, LSE_ROWS + 1, 33), (0, 7)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log_sum_exp_in_blocks_is_the_whole_array_expression(shape, dtype):
    """Bit for bit what the one-expression form gives, with a last block shorter than the others,
    leading axes, and rows holding -inf (a banned token) or only -inf (nothing possible: NaN)."""
    x = (np.random.default_rng(0).standard_normal(shape) * 8).astype(dtype)
    if x.size:
        x.reshape(-1, shape[-1])[::3, ::5] = -np.inf
        x.reshape(-1, shape[-1])[-1] = -np.inf
    with np.errstate(invalid="ignore"):
        top = x.max(axis=-1, keepdims=True) if x.size else np.zeros(shape[:-1] + (1,), dtype)
        whole = top[..., 0] + np.log(np.exp(x - top).sum(axis=-1, dtype=np.float64))
        got = log_sum_exp(x)
    assert got.shape == shape[:-1] and got.dtype == np.float64
    np.testing.assert_array_equal(got, whole)
    if x.size:
        assert np.isnan(got.reshape(-1)[-1]) and np.isfinite(got.reshape(-1)[:-1]).all()


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory) -> Path:
    """A random Qwen2 (q/k/v biases, grouped-query attention) saved by transformers, with tiny-llama's tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=96, use_sliding_window=False, tie_word_embeddings=False,
                      initializer_range=0.2, bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:  # random biases, so that they count
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    out = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(TINY_LLAMA / "tokenizer.json", out / "tokenizer.json")
    return out


@functools.lru_cache(maxsize=None)
def _hf_model(folder: Path):
    return hf_pretrained(folder)


def reference_loss(folder: Path, ids: list[int], window: int, stride: int) -> tuple[float, int]:
    """transformers' cross-entropy over the same tokens, windowed the same way: each window's
    inputs ids[b:b+W] predict ids[b+1:b+W+1], and only the targets no earlier window scored count."""
    import torch
    import torch.nn.functional as F

    model = _hf_model(folder)
    total, count, done = 0.0, 0, 0
    for b in window_starts(len(ids), window, stride):
        end = min(b + window, len(ids) - 1)
        with torch.no_grad():
            logits = model(torch.tensor([ids[b:end]])).logits[0]  # [T, V]
        labels = torch.tensor(ids[b + 1 : end + 1])
        labels[: max(0, done - b)] = -100  # targets b+1..done were scored by an earlier window
        total += float(F.cross_entropy(logits.double(), labels, ignore_index=-100, reduction="sum"))
        count += int((labels != -100).sum())
        done = end
    return total / count, count


@pytest.mark.parametrize("which", ["gpt2", "llama", "qwen2"])
@pytest.mark.parametrize("repeat, window, stride", [(1, None, None), (6, None, None), (6, 40, 40), (6, 50, 17)])
def test_loss_equals_transformers(which, repeat, window, stride, request):
    folder = {"gpt2": TINY_GPT2, "llama": TINY_LLAMA}.get(which) or request.getfixturevalue("tiny_qwen2")
    lm = load(folder)
    ids = lm.tokenizer.prompt(TEXT * repeat)
    if repeat > 1:
        assert len(ids) > lm.config.n_ctx  # longer than the context: several windows
    result = score(lm.model, ids, window, stride)
    w = window or lm.config.n_ctx
    want, count = reference_loss(folder, ids, w, stride or w // 2)
    assert count == result.scored == len(ids) - 1  # every token but the first, once
    assert math.isnan(result.logprobs[0]) and not np.isnan(result.logprobs[1:]).any()
    assert abs(result.nats_per_token / want - 1) <= 1e-4


@pytest.mark.parametrize("window, stride, repeat", [(40, 40, 6), (50, 17, 6), (32, 1, 2)])
def test_windows_run_together_give_each_token_what_one_window_alone_gives(window, stride, repeat, monkeypatch):
    """Whole windows go through one pass as independent sequences; per token, the same
    log-probabilities as one window at a time through the KV cache. Stride 1 on the shorter
    text still makes 86 windows: three passes of up to MAX_WINDOWS, the last one short."""
    from tfcli.engine import score as sc

    lm = load(TINY_LLAMA)
    ids = lm.tokenizer.prompt(TEXT * repeat)
    assert len(ids) - window > 2 * sc.MAX_WINDOWS
    together = score(lm.model, ids, window, stride)
    monkeypatch.setattr(sc, "MAX_WINDOWS", 1)
    alone = score(lm.model, ids, window, stride)
    assert np.isnan(together.logprobs[0]) and not np.isnan(together.logprobs[1:]).any()
    np.testing.assert_allclose(together.logprobs[1:], alone.logprobs[1:], rtol=0, atol=64 * np.finfo(np.float32).eps * np.abs(alone.logprobs[1:]).max())


def test_windows_cover_every_token_once():
    for n, w, s in [(10, 4, 4), (10, 4, 1), (11, 4, 3), (5, 8, 4), (2, 1, 1)]:
        starts = window_starts(n, w, s)
        targets = set()
        done = 0
        for b in starts:
            end = min(b + w, n - 1)
            targets |= set(range(max(done, b) + 1, end + 1))
            done = max(done, end)
        assert targets == set(range(1, n)), (n, w, s)


def test_json_keys_and_a_null_first_logprob(cli):
    r = cli("score", "-m", TINY_GPT2, "héllo world", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["model"] == "tiny-gpt2"
    assert {"tokens", "nats_per_token", "perplexity", "nats_per_char", "nats_per_byte", "window", "stride"} <= set(doc)
    assert doc["tokens"][0]["logprob"] is None
    assert all(set(t) == {"id", "text", "logprob"} for t in doc["tokens"])
    assert all(t["logprob"] < 0 for t in doc["tokens"][1:])
    assert "".join(t["text"] for t in doc["tokens"]) == "héllo world"  # a split character goes with its last token
    nats = -sum(t["logprob"] for t in doc["tokens"][1:])
    # figures worked out in Python are printed to 4 significant digits (cli/json.py), as in every --json
    assert doc["nats_per_token"] == pytest.approx(nats / (len(doc["tokens"]) - 1), rel=1e-3)
    assert doc["perplexity"] == pytest.approx(math.exp(doc["nats_per_token"]), rel=1e-3)
    assert doc["chars"] == len("éllo world") and doc["bytes"] == len("éllo world".encode())


def test_text_file_and_stdin_agree(cli, tmp_path):
    f = tmp_path / "t.txt"
    f.write_text(TEXT, encoding="utf-8")
    a = json.loads(cli("score", "-m", TINY_LLAMA, TEXT, "--json").stdout)
    b = json.loads(cli("score", "-m", TINY_LLAMA, "--file", f, "--json").stdout)
    c = json.loads(cli("score", "-m", TINY_LLAMA, "-", "--json", input=TEXT).stdout)
    assert a == b == c


def test_the_summary_says_how_the_text_was_windowed(cli):
    r = cli("score", "-m", TINY_GPT2, TEXT * 6, "--stride", "32")
    assert r.exit_code == 0, r.stderr
    assert "windows of 128 tokens, stride 32" in r.stdout and "nats/token" in r.stdout and "perplexity" in r.stdout
    r = cli("score", "-m", TINY_GPT2, TEXT, "--text")  # NO_COLOR (the fixture): the numbers instead of the colours
    unmarked = re.sub(r"\[(\d+%|<1%)\]", "", r.stdout)
    assert "one window" in r.stdout and "[p%] after a token" in r.stdout and TEXT.strip() in unmarked




def test_bad_input_one_line(cli, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    one_line_error(cli("score", "-m", TINY_GPT2, "--file", empty), 2, "empty")
    one_line_error(cli("score", "-m", TINY_GPT2, "--file", latin1), 2, "not valid UTF-8", "offset 3")
    one_line_error(cli("score", "-m", TINY_GPT2, "--file", tmp_path / "missing.txt"), 1, "does not exist")
    one_line_error(cli("score", "-m", TINY_GPT2, "--file", tmp_path), 1, "folder")
    one_line_error(cli("score", "-m", TINY_GPT2), 2, "TEXT or --file")
    one_line_error(cli("score", "-m", TINY_GPT2, "x", "--file", empty), 2, "TEXT or --file")
    one_line_error(cli("score", "-m", TINY_GPT2, ""), 2, "empty")
    one_line_error(cli("score", "-m", TINY_GPT2, "a"), 2, "at least 2")
    one_line_error(cli("score", "-m", TINY_GPT2, "abc", "--window", "500"), 2, "--window", "128")
    one_line_error(cli("score", "-m", TINY_GPT2, "abc", "--stride", "0"), 2, "--stride")
    one_line_error(cli("score", "-m", TINY_GPT2, "abc", "--window", "8", "--stride", "9"), 2, "--stride")


def _shared_data() -> Path | None:
    """The corpora (not in the repository): ../shared/data beside the clone, as CI provides it."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "data").is_dir():
            return base / "shared" / "data"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("name, corpus", [("shakespeare", "tinyshakespeare.txt"), ("tang", "tang_poems_simplified.txt")])
def test_the_model_card_validation_loss_reproduces(name, corpus, cli, tmp_path):
    """Run the card's own commands: write the split, then its first part (the card's check in seconds:
    the whole split takes one to two minutes), score it, compare with the figure the card gives for it."""
    data = _shared_data()
    if data is None or not (data / corpus).exists():
        pytest.skip("the training corpora (../shared/data) are not here")
    card = (ROOT / "weights" / name / "README.md").read_text(encoding="utf-8")
    section = card[card.index("## Reproducing the validation loss") :]
    split_cmd, head_cmd = [line for line in section.splitlines() if line.startswith("python -c ")]
    score_cmd = [line for line in section.splitlines() if line.startswith("tfcli score ")][1]
    assert "val-head.txt" in head_cmd and "val-head.txt" in score_cmd, (head_cmd, score_cmd)
    figure = re.findall(r"gives (\d+\.\d{4}) nats/token", section)[1]
    # the card's `tfcli data pull NAME`, from the local copy (no network in a test); then its split, as written
    home = tmp_path / "home"
    env = {**os.environ, "TFCLI_HOME": str(home)}
    pulled = subprocess.run([sys.executable, "-m", "tfcli", "data", "pull", name, "--from", str(data / corpus)],
                            env=env, capture_output=True, text=True)
    assert pulled.returncode == 0, pulled.stderr
    subprocess.run(split_cmd.replace("$(tfcli data path", f"$({sys.executable} -m tfcli data path"), shell=True,
                   cwd=tmp_path, check=True, env=env)
    subprocess.run(head_cmd, shell=True, cwd=tmp_path, check=True, env=env)
    args = [str(tmp_path / a) if a == "val-head.txt" else a for a in shlex.split(score_cmd)[2:]]
    r = cli("score", *args)
    assert r.exit_code == 0, r.stderr
    assert f"{figure} nats/token" in r.stdout, r.stdout


def test_score_without_colour_shows_the_numbers(cli):
    r = cli("score", "To be, or not to be", "--text")  # the cli fixture sets NO_COLOR
    assert r.exit_code == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert re.search(r"\[(\d+%|<1%)\]", first) and "probability of each token:  ≥ 50%" not in r.stdout
    assert "[p%] after a token" in r.stdout
