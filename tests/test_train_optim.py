"""The optimisers equal torch.optim's: after one SGD step and after two AdamW steps on the
sequential batches (weight decay on, clipping off), the weights `tfcli train` saved equal those
of torch.optim on transformers' model, to 2e-5. Also the schedule and clipping, on their own."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tfcli.engine.train.optim import clip_by_global_norm, lr_at  # noqa: E402

from conftest import TINY_GPT2, TINY_LLAMA  # noqa: E402

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer.\n" * 40
B, T = 2, 16


def sequential_batches(folder, text, steps):
    """The batches of --data-order sequential: sequence b of step s starts at token (s*B + b)*T."""
    from tokenizers import Tokenizer

    ids = np.array(Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=False).ids)
    train = ids[: int(len(ids) * 0.9)]
    for s in range(steps):
        rows = np.stack([train[(s * B + b) * T : (s * B + b) * T + T + 1] for b in range(B)])
        yield torch.tensor(rows[:, :-1]), torch.tensor(rows[:, 1:])


def torch_run(folder, text, optimizer: str, steps: int, lr: float, wd: float):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()  # eval: no dropout
    named = list(model.named_parameters())
    groups = [{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": wd}, {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99), eps=1e-8) if optimizer == "adamw" else torch.optim.SGD(groups, lr=lr)
    clear = {n: np.ones(p.shape, bool) for n, p in named}  # elements whose gradient is above rounding noise at every step
    for x, y in sequential_batches(folder, text, steps):
        loss = torch.nn.functional.cross_entropy(model(x).logits.flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        for n, p in named:
            g = p.grad.abs()
            clear[n] &= ((g == 0) | (g > 1e-5 * g.max())).numpy()  # 0: a row no token read, 0 on both sides
        opt.step()
    return {n: p.detach().numpy() for n, p in named}, clear


@pytest.mark.parametrize("folder", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
@pytest.mark.parametrize("optimizer, steps, lr", [("sgd", 1, 0.1), ("adamw", 2, 1e-3)])
def test_saved_weights_equal_torch_optim(cli, tmp_path, folder, optimizer, steps, lr):
    from safetensors.numpy import load_file

    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = tmp_path / "out"
    r = cli("train", text, "-o", out, "--from", folder, "--optimizer", optimizer, "--steps", steps, "--lr", lr,
            "--weight-decay", "0.1", "--clip", "0", "--warmup", "0", "--lr-schedule", "constant",
            "--data-order", "sequential", "--batch-size", B, "--seq-len", T, "--eval-every", "100", "--json")  # fmt: skip
    assert r.exit_code == 0, (r.stderr, r.exception)
    ours = load_file(str(out / "model.safetensors"))
    ref, noise = torch_run(folder, TEXT, optimizer, steps, lr, 0.1)
    start = load_file(str(folder / "model.safetensors"))
    assert set(ours) == set(ref)
    moved = 0.0
    left_out = 0
    for name, w in ours.items():
        # AdamW divides each gradient by its own running size: an element whose gradient is
        # rounding noise (below 1e-5 of its tensor's largest, e.g. GPT-2's key bias, whose exact
        # gradient is 0 since softmax ignores what a row shares) gets a step of +-lr of any sign,
        # on both sides. Those elements are left out; the gradient test holds them equal.
        keep = noise[name] if optimizer == "adamw" else np.ones(w.shape, bool)
        left_out += int((~keep).sum())
        np.testing.assert_allclose(w[keep], ref[name][keep], rtol=0, atol=2e-5, err_msg=name)
        moved = max(moved, float(np.abs(ref[name] - start[name]).max()))
    assert moved > 1e-3  # the step moved the weights far more than the tolerance
    assert left_out <= 0.01 * sum(w.size for w in ours.values()), left_out


def test_warmup_then_cosine_to_a_tenth():
    assert lr_at(0, 1.0, 10, 110, "cosine") == pytest.approx(0.1)
    assert lr_at(9, 1.0, 10, 110, "cosine") == pytest.approx(1.0)
    assert lr_at(10, 1.0, 10, 110, "cosine") == pytest.approx(1.0)
    assert lr_at(60, 1.0, 10, 110, "cosine") == pytest.approx(0.55)
    assert lr_at(110, 1.0, 10, 110, "cosine") == pytest.approx(0.1)
    assert lr_at(50, 1.0, 10, 110, "constant") == 1.0


def test_clipping_equals_torch():
    rng = np.random.default_rng(0)
    grads = {k: rng.standard_normal(s).astype(np.float32) for k, s in (("a", (3, 4)), ("b", (5,)))}
    tensors = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads.values()]
    for t, g in zip(tensors, grads.values()):
        t.grad = torch.tensor(g)
    norm = clip_by_global_norm(grads, 1.0)
    ref = torch.nn.utils.clip_grad_norm_(tensors, 1.0)
    assert math.isclose(norm, float(ref), rel_tol=1e-6)
    for t, g in zip(tensors, grads.values()):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-6)
