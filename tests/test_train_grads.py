"""The trainer's backward pass (the inference families' forward, engine/grad's backward) equals
torch autograd, for every parameter of small random GPT-2, Llama and Qwen2 checkpoints built with
transformers (tied and untied, grouped-query attention, q/k/v biases), with and without the
causal mask (--no-mask) and with dropout (--dropout, the same masks given to torch).

The reference runs in float64, so that the difference measured is tfcli's float32 arithmetic;
the relative error of each parameter's gradient, |ours - torch| / |torch| over the whole tensor,
must stay under 1e-4 (a float32 step is 1.2e-7: room for the sums of a few hundred terms).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tfcli.engine.executor import PLAIN  # noqa: E402
from tfcli.engine.grad import ops as G  # noqa: E402
from tfcli.engine.grad.tape import grouped_attention, unmasked_attention  # noqa: E402
from tfcli.engine.ops import reference_attention  # noqa: E402
from tfcli.engine.train import trainable  # noqa: E402
from tfcli.engine.train.folder import load_params  # noqa: E402

V, B, T = 64, 2, 12


def random_model(kind: str, tied: bool, seed: int = 0):
    """A small random model of `kind`, with every weight random (biases and norm gains too: a
    gradient of a parameter left at 0 or 1 can hide a mistake)."""
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

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
    q = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)  # [N, G, T, Dh]
    k, v = rng.standard_normal((1, 4, 5)).astype(np.float32), rng.standard_normal((1, 5, 4)).astype(np.float32)
    k2, v2 = k.copy(), v.copy()
    k2[:, :, -1] += 1.0  # the last position's key [N, Dh, S]
    v2[:, -1] += 1.0  # and value [N, S, Dh]
    masked = [PLAIN.attention(q, kk, vv, 0, False)[0] for kk, vv in ((k, v), (k2, v2))]
    open_ = [unmasked_attention(q, kk, vv, None)[0] for kk, vv in ((k, v), (k2, v2))]
    assert np.array_equal(masked[0][:, :, :-1], masked[1][:, :, :-1])
    assert not np.allclose(open_[0][:, :, 0], open_[1][:, :, 0])


@pytest.mark.parametrize("window, softcap", [(None, None), (3, None), (None, 2.0), (4, 1.5)])
def test_the_tapes_attention_equals_the_textbooks(window, softcap):
    """grad/tape.py's grouped_attention broadcasts the key/value heads and masks in place: the same
    numbers as executor.Plain.attention, which repeats them (a prompt after 3 cached positions)."""
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)  # [N, G, T, Dh]
    k, v = rng.standard_normal((2, 8, 8)).astype(np.float32), rng.standard_normal((2, 8, 8)).astype(np.float32)
    ours = grouped_attention(q, k, v, True, window, softcap)
    ref = PLAIN.attention(q, k, v, 3, True, window, softcap)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape and np.abs(a - b).max() <= 1e-6 * max(1.0, np.abs(b).max())


@pytest.mark.parametrize("causal", [True, False])
def test_attention_backward_equals_autograd_with_and_without_the_mask(causal):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((8, 6, 8)).astype(np.float32)  # [N, T, Dh]
    k, v = (rng.standard_normal((8, 6, 8)).astype(np.float32) for _ in range(2))  # [N, S, Dh]
    dout = rng.standard_normal(q.shape).astype(np.float32)
    if causal:
        _, w = reference_attention(q, k, v)
    else:
        _, w = unmasked_attention(q[:, None], k.transpose(0, 2, 1), v, None)
        w = w[:, 0]  # [N, T, S]
    ours = G.reference_attention_backward(dout, q, k, v, w)[:3]
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    out.backward(torch.tensor(dout, dtype=torch.float64))
    for mine, t in zip(ours, (tq, tk, tv)):
        assert np.linalg.norm(mine - t.grad.numpy()) / np.linalg.norm(t.grad.numpy()) <= 1e-5


def masks(rng: np.random.Generator, p: float, n_layer: int, shape: tuple[int, int]) -> list[np.ndarray]:
    """The dropout multipliers a pass draws [B*T, D], in its order: the embeddings, then each
    block's attention output and MLP output (engine/grad/tape.py)."""
    return [(rng.random(shape, dtype=np.float32) >= p).astype(np.float32) / np.float32(1 - p)
            for _ in range(1 + 2 * n_layer)]  # fmt: skip


DROPPED = {  # where each family's dropout acts, as torch modules whose output is multiplied
    "gpt2": ("transformer.drop", "transformer.h.{}.attn.c_proj", "transformer.h.{}.mlp.c_proj"),
    "llama": ("model.embed_tokens", "model.layers.{}.self_attn.o_proj", "model.layers.{}.mlp.down_proj"),
}
DROPPED["qwen2"] = DROPPED["llama"]


def test_a_step_with_dropout_equals_autograd_with_the_same_masks(pair):
    """--dropout draws its masks from the step's generator; torch, given the same multipliers at
    the same places (the embeddings, each attention and MLP output), computes the same loss and
    gradients."""
    model, ours = pair
    x, y = batch(3)
    cfg = ours.config
    dropping = type(ours)(cfg, ours.params, dropout=0.25)
    loss, grads = dropping.loss_and_grads(x, y, np.random.default_rng(7))
    kept = masks(np.random.default_rng(7), 0.25, cfg.n_layer, (B * T, cfg.d_model))
    embed, attn, mlp = DROPPED[cfg.family]
    names = [embed] + [n.format(i) for i in range(cfg.n_layer) for n in (attn, mlp)]
    modules = dict(model.named_modules())
    def times(m):
        return lambda mod, args, out: out * torch.tensor(m, dtype=out.dtype).reshape(out.shape)

    handles = [modules[n].register_forward_hook(times(m)) for n, m in zip(names, kept)]
    try:
        ref_loss, ref = torch_grads(model, x, y)
    finally:
        for h in handles:
            h.remove()
    assert abs(loss - ref_loss) <= 1e-5 * ref_loss
    for name, g in grads.items():
        err = np.linalg.norm(g - ref[name]) / np.linalg.norm(ref[name])
        assert err <= 1e-4, (name, err)
    assert abs(loss - ours.loss_and_grads(x, y)[0]) > 1e-4  # the masks changed the loss


def test_without_the_mask_a_step_equals_autograd_with_a_mask_of_zeros(pair):
    """--no-mask: every position reads its whole sequence, as transformers does when it is given an
    additive 4-D mask of zeros instead of the causal one."""
    model, ours = pair
    x, y = batch(4)
    open_ = type(ours)(ours.config, ours.params, causal=False)
    loss, grads = open_.loss_and_grads(x, y)
    m = model.double()
    m.zero_grad()
    zeros = torch.zeros((B, 1, T, T), dtype=torch.float64)
    logits = m(torch.tensor(x), attention_mask=zeros).logits  # [B, T, V]
    ref_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(y).reshape(-1))
    ref_loss.backward()
    ref = {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
    model.float()
    assert abs(loss - ref_loss.item()) <= 1e-5 * ref_loss.item()
    assert abs(open_.loss(x, y) - ref_loss.item()) <= 1e-5 * ref_loss.item()
    for name, g in grads.items():
        assert np.linalg.norm(g - ref[name]) <= 1e-4 * np.linalg.norm(ref[name]), name
    assert abs(loss - ours.loss(x, y)) > 1e-3  # the future changed the loss
