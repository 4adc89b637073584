"""The hand-written backward pass equals torch autograd, for every parameter of small random
GPT-2, Llama and Qwen2 checkpoints built with transformers (tied and untied, grouped-query
attention, q/k/v biases).

The reference runs in float64, so that the difference measured is tfcli's float32 arithmetic;
the relative error of each parameter's gradient, |ours - torch| / |torch| over the whole tensor,
must stay under 1e-4 (a float32 step is 1.2e-7: room for the sums of a few hundred terms).
"""

from __future__ import annotations


import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tfcli.engine.train import layers, trainable  # noqa: E402
from tfcli.engine.train.folder import load_params  # noqa: E402

V, B, T = 64, 2, 12


def random_model(kind: str, tied: bool, seed: int = 0):
    """A small random model of `kind`, with every weight random (biases and norm gains too: a
    gradient of a parameter left at 0 or 1 can hide a mistake)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    if kind == "gpt2":
        cfg = GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=4, tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0,
                         resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)  # fmt: skip
        model = GPT2LMHeadModel(cfg)
    else:
        common = dict(vocab_size=V, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, max_position_embeddings=32, tie_word_embeddings=tied, rms_norm_eps=1e-6)  # fmt: skip
        model = LlamaForCausalLM(LlamaConfig(**common)) if kind == "llama" else Qwen2ForCausalLM(Qwen2Config(**common, rope_theta=1e6, use_sliding_window=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if ("ln_" in name or "norm" in name) and name.endswith("weight") else 0.2 * torch.randn_like(p))
    return model.eval()


CASES = [("gpt2", True), ("gpt2", False), ("llama", False), ("llama", True), ("qwen2", True), ("qwen2", False)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{k}-{'tied' if t else 'untied'}" for k, t in CASES])
def pair(request, tmp_path_factory):
    kind, tied = request.param
    model = random_model(kind, tied)
    folder = tmp_path_factory.mktemp(kind)
    model.save_pretrained(folder)
    cfg, _, params = load_params(folder)
    assert cfg.tie_embeddings is tied
    return model, trainable(cfg, params)


def batch(seed: int = 1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))


def torch_grads(model, x, y) -> tuple[float, dict[str, np.ndarray]]:
    m = model.double()
    m.zero_grad()
    logits = m(torch.tensor(x)).logits  # [B, T, V]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(y).reshape(-1))
    loss.backward()
    grads = {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
    model.float()
    return loss.item(), grads


def test_every_gradient_equals_autograd(pair):
    model, ours = pair
    x, y = batch()
    loss, grads = ours.loss_and_grads(x, y)
    ref_loss, ref = torch_grads(model, x, y)
    assert abs(loss - ref_loss) <= 1e-5 * ref_loss
    assert set(grads) == set(ref), set(grads) ^ set(ref)
    for name, g in grads.items():
        assert g.dtype == np.float32 and g.shape == ref[name].shape, name
        err = np.linalg.norm(g - ref[name]) / np.linalg.norm(ref[name])
        assert err <= 1e-4, (name, err)


def test_loss_equals_transformers_in_float32(pair):
    model, ours = pair
    x, y = batch(2)
    with torch.no_grad():
        logits = model(torch.tensor(x)).logits
        ref = float(torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(y).reshape(-1)))
    assert abs(ours.loss(x, y) - ref) <= 1e-5 * ref


def test_attention_without_the_mask_reads_the_future():
    """With the mask, changing a later token changes nothing before it; without, it does."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 5, 4)).astype(np.float32) for _ in range(3))
    k2, v2 = k.copy(), v.copy()
    k2[:, :, -1] += 1.0
    v2[:, :, -1] += 1.0
    masked = [layers.attention(q, kk, vv, causal=True)[0] for kk, vv in ((k, v), (k2, v2))]
    open_ = [layers.attention(q, kk, vv, causal=False)[0] for kk, vv in ((k, v), (k2, v2))]
    assert np.array_equal(masked[0][:, :, :-1], masked[1][:, :, :-1])
    assert not np.allclose(open_[0][:, :, 0], open_[1][:, :, 0])


@pytest.mark.parametrize("causal", [True, False])
def test_attention_backward_equals_autograd_with_and_without_the_mask(causal):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 4, 6, 8)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 6, 8)).astype(np.float32) for _ in range(2))
    dout = rng.standard_normal(q.shape).astype(np.float32)
    _, saved = layers.attention(q, k, v, causal)
    ours = layers.attention_backward(dout, saved)
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, enable_gqa=True)
    out.backward(torch.tensor(dout, dtype=torch.float64))
    for mine, t in zip(ours, (tq, tk, tv)):
        assert np.linalg.norm(mine - t.grad.numpy()) / np.linalg.norm(t.grad.numpy()) <= 1e-5


def test_dropout_gradient_equals_finite_differences():
    """--dropout has no torch twin to compare with (the masks are drawn differently): the gradient
    with the same masks is checked against central differences, in float64."""
    from tfcli.engine.train import gpt2
    from tfcli.engine.train.run import new_gpt2_config

    class S:  # the few settings new_gpt2_config reads
        d_model, heads, layers, context = 16, 2, 1, 8

    cfg = new_gpt2_config(S, 11)
    params = {k: v.astype(np.float64) for k, v in gpt2.init_params(cfg, np.random.default_rng(0)).items()}
    model = trainable(cfg, params, dropout=0.3)
    x, y = np.random.default_rng(1).integers(0, 11, (2, 8)), np.random.default_rng(2).integers(0, 11, (2, 8))

    def loss() -> float:
        logits, _ = model.forward(x, np.random.default_rng(7))
        return layers.cross_entropy(logits, y.reshape(-1))[0]

    _, grads = model.loss_and_grads(x, y, np.random.default_rng(7))
    for name in ("transformer.h.0.mlp.c_fc.weight", "transformer.wte.weight", "transformer.h.0.attn.c_proj.bias"):
        for idx in [tuple(np.random.default_rng(3).integers(0, n) for n in params[name].shape)]:
            old = params[name][idx]
            params[name][idx] = old + 1e-5
            up = loss()
            params[name][idx] = old - 1e-5
            down = loss()
            params[name][idx] = old
            assert abs((up - down) / 2e-5 - grads[name][idx]) <= 1e-4 * max(1e-3, abs(grads[name][idx])), name
