"""The SAE trainer (engine/train/sae.py) against torch: both losses' gradients (relu's L1 weighted
by decoder norms; TopK with its auxiliary loss on dead features) equal autograd's, one AdamW step
equals torch.optim.AdamW's, and on vectors made from known directions both kinds find them."""

from __future__ import annotations

import numpy as np
import pytest

from tfcli.engine.threads import single_threaded_blas
from tfcli.engine.train.sae import SAE, Settings, Trainer, init_params, unit_rows

torch = pytest.importorskip("torch")

D, N, B = 24, 64, 48


def _sae(kind: str, seed: int = 0) -> SAE:
    rng = np.random.default_rng(seed)
    p = init_params(D, N, kind, rng)
    p["b_enc"] = (0.1 * rng.standard_normal(N)).astype(np.float32)
    p["b_dec"] = (0.1 * rng.standard_normal(D)).astype(np.float32)
    dead = np.zeros(N, bool)
    dead[::3] = True  # a third of the features dead: the auxiliary term has work to do
    return SAE(p, kind, k=6, l1=3.0, k_aux=5, dead=dead if kind == "topk" else None)


def _torch_loss(sae: SAE, x: np.ndarray):
    """The same loss written with torch ops; autograd gives the gradients."""
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in sae.params.items()}
    xt = torch.tensor(x, dtype=torch.float64)
    h = (xt - t["b_dec"]) @ t["W_enc"] + t["b_enc"]
    if sae.kind == "relu":
        f = torch.relu(h)
        x_hat = f @ t["W_dec"] + t["b_dec"]
        loss = ((x_hat - xt) ** 2).sum() / len(x) + sae.l1 * (f * t["W_dec"].norm(dim=1)).sum() / len(x)
    else:
        top = torch.topk(h, sae.k, dim=1)
        f = torch.zeros_like(h).scatter(1, top.indices, torch.relu(top.values))
        x_hat = f @ t["W_dec"] + t["b_dec"]
        e = (xt - x_hat).detach()
        dead = torch.tensor(sae.dead)
        h_dead = torch.where(dead, h, torch.tensor(-torch.inf, dtype=h.dtype))
        top_aux = torch.topk(h_dead, sae.k_aux, dim=1)
        f_aux = torch.zeros_like(h).scatter(1, top_aux.indices, torch.relu(top_aux.values))
        loss = ((x_hat - xt) ** 2).sum() / len(x) + ((f_aux @ t["W_dec"] - e) ** 2).sum() / len(x) / 32
    loss.backward()
    return loss.detach().item(), {k: v.grad.numpy() for k, v in t.items()}


@pytest.mark.parametrize("kind", ["relu", "topk"])
def test_gradients_equal_torch_autograd(kind):
    sae = _sae(kind)
    x = np.random.default_rng(1).standard_normal((B, D)).astype(np.float32)
    parts, grads, _ = sae.loss_and_grads(x)
    want_loss, want = _torch_loss(sae, x)
    assert parts["loss"] == pytest.approx(want_loss, rel=1e-5)
    if kind == "topk":
        assert parts["aux"] > 0
    for name, g in grads.items():
        scale = np.abs(want[name]).max()
        assert scale > 0, name
        # float32 against float64: a few float32 steps of the largest gradient
        np.testing.assert_allclose(g, want[name], atol=64 * np.finfo(np.float32).eps * scale, err_msg=name)


def test_one_adamw_step_equals_torch_optim():
    from tfcli.engine.train.optim import AdamW

    sae = _sae("relu")
    x = np.random.default_rng(2).standard_normal((B, D)).astype(np.float32)
    before = {k: v.copy() for k, v in sae.params.items()}
    _, grads, _ = sae.loss_and_grads(x)
    AdamW((0.9, 0.999), 1e-8, 0.0).step(sae.params, grads, 1e-3)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in before.items()}
    opt = torch.optim.AdamW(t.values(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    for k, v in t.items():
        v.grad = torch.tensor(grads[k])
    opt.step()
    for k, v in t.items():
        np.testing.assert_allclose(sae.params[k], v.detach().numpy(), rtol=0, atol=4 * np.finfo(np.float32).eps * max(1, np.abs(before[k]).max()), err_msg=k)
        assert not np.array_equal(sae.params[k], before[k])


def known_directions(seed: int = 0, d: int = 32, k: int = 64, rows: int = 40_000, p: float = 0.05, noise: float = 0.01):
    """Vectors [rows, d], each a sparse nonnegative mix of k > d unit directions plus noise; the directions [k, d]."""
    rng = np.random.default_rng(seed)
    true = rng.standard_normal((k, d))
    true /= np.linalg.norm(true, axis=1, keepdims=True)
    mix = rng.uniform(0.5, 1.5, (rows, k)) * (rng.random((rows, k)) < p)  # [rows, k], about 3 directions per vector
    x = mix @ true + noise * rng.standard_normal((rows, d))
    return x.astype(np.float32), true.astype(np.float32)


def recovered(w_dec: np.ndarray, true: np.ndarray) -> float:
    """The share of true directions that some decoder row points along with cosine >= 0.9."""
    return float(((unit_rows(true) @ unit_rows(w_dec).T).max(axis=1) >= 0.9).mean())


@pytest.mark.parametrize("kind", ["relu", "topk"])
def test_the_trainer_recovers_known_directions(kind):
    x, true = known_directions()
    s = Settings(kind=kind, n=128, k=4, lr=3e-3, steps=600, batch_size=256, seed=0, dead_tokens=20_000)
    with single_threaded_blas():
        tr = Trainer(s, x[:4096])
        for i in range(s.steps):
            a = i * 256 % (len(x) - 256)
            tr.train_step(x[a : a + 256])
    assert recovered(tr.export()["W_dec"], true) >= 0.9
    # A random dictionary of the same size finds almost none: the test can fail.
    assert recovered(init_params(32, 128, kind, np.random.default_rng(5))["W_dec"], true) < 0.1


def test_export_folds_the_scale_into_the_weights():
    x, _ = known_directions(rows=2000)
    tr = Trainer(Settings(n=64, steps=5, batch_size=256), x[:1024] * 7)
    for i in range(5):
        tr.train_step(x[i * 256 : (i + 1) * 256] * 7)
    raw = SAE(tr.export(), "relu")
    xs = x[:100] * 7
    f = tr.sae.encode(xs * np.float32(tr.scale))
    np.testing.assert_allclose(raw.encode(xs), f, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(raw.decode(f), tr.sae.decode(f) / tr.scale, rtol=1e-4, atol=1e-4)
