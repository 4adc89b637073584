"""`tfcli train --from` on Qwen3, Gemma 3 and Phi-3 (GPT-2, Llama and Qwen2: test_train_grads.py):
their inference forward and engine/grad's backward (engine/train/model.py), on tiny
random models written by transformers: the gradients equal torch autograd under the checkpoint's
names, and a few steps give a folder transformers loads and agrees with."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_new_families import gemma3, phi3, qwen3  # noqa: E402
from test_train_cli import logits_both  # noqa: E402

from tfcli.engine.train import TrainError, trainable  # noqa: E402
from tfcli.engine.train.folder import load_params  # noqa: E402

BUILDERS = {"qwen3": qwen3, "gemma3": gemma3, "phi3": phi3}


@pytest.fixture(scope="module", params=list(BUILDERS))
def folder(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "m"
    BUILDERS[request.param](path, tied=request.param != "phi3")
    return path


def test_the_trainers_gradients_equal_autograd(folder):
    from transformers import AutoModelForCausalLM

    cfg, _, params = load_params(folder)
    model = trainable(cfg, params)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, cfg.vocab_size, (2, 10)), rng.integers(0, cfg.vocab_size, (2, 10))
    loss, grads = model.loss_and_grads(x, y)
    assert set(grads) == set(params) and loss == pytest.approx(model.loss(x, y), rel=1e-6)
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    out = torch.nn.functional.cross_entropy(ref(torch.tensor(x)).logits.reshape(-1, cfg.vocab_size), torch.tensor(y).reshape(-1))
    out.backward()
    assert loss == pytest.approx(float(out.detach()), rel=1e-5)
    for name, p in ref.named_parameters():
        g = grads[name]
        assert g.shape == params[name].shape and g.dtype == np.float32
        assert np.linalg.norm(g - p.grad.numpy()) <= 2e-5 * np.linalg.norm(p.grad.numpy()), name


def test_train_from_a_folder_and_transformers_agrees(cli, folder, tmp_path):
    text = tmp_path / "tiny.txt"
    text.write_text("Before we proceed any further, hear me speak.\n" * 40, encoding="utf-8")
    out = tmp_path / "out"
    r = cli("train", text, "-o", out, "--from", folder, "--steps", "3", "--seq-len", "16", "--batch-size", "2", "--lr", "3e-3", "--eval-every", "100", "--json")
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert np.isfinite(json.loads(r.stdout)["train_loss"])
    _, ours, ref = logits_both(out, [17, 3, 250, 99, 42])
    assert np.abs(ours - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    _, before, _ = logits_both(folder, [17, 3, 250, 99, 42])
    assert np.abs(ours - before).max() > 1e-3  # it learned something


def test_without_the_mask_a_step_equals_autograd_with_a_mask_of_zeros(folder):
    """--no-mask on these families too (Gemma 3's sliding window goes with the mask): transformers,
    given an additive 4-D mask of zeros, computes the same loss and gradients."""
    from transformers import AutoModelForCausalLM

    cfg, _, params = load_params(folder)
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, cfg.vocab_size, (2, 10)), rng.integers(0, cfg.vocab_size, (2, 10))
    loss, grads = trainable(cfg, params, causal=False).loss_and_grads(x, y)
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()
    zeros = torch.zeros((2, 1, 10, 10), dtype=torch.float64)
    logits = ref(torch.tensor(x), attention_mask=zeros).logits
    out = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), torch.tensor(y).reshape(-1))
    out.backward()
    assert loss == pytest.approx(float(out.detach()), rel=1e-5)
    for name, p in ref.named_parameters():
        assert np.linalg.norm(grads[name] - p.grad.numpy()) <= 2e-5 * np.linalg.norm(p.grad.numpy()), name


def test_an_unknown_family_is_refused_in_one_line(folder):
    import dataclasses

    cfg, _, params = load_params(folder)
    with pytest.raises(TrainError, match="cannot train a mamba model"):
        trainable(dataclasses.replace(cfg, family="mamba"), params)
