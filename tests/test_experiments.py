"""Experiments (analysis/experiments/) equal transformers with forward hooks doing the same thing.

Random GPT-2, Llama and Qwen2 checkpoints built with transformers (every weight, bias and norm
weight random: zero biases would hide a bias counted twice or not at all). Each intervention is
done twice: by tfcli's hooks at its sites, and by torch hooks on transformers' modules (a pre-hook
on a decoder layer or the final norm for the residual stream, on o_proj / c_proj for a head's
context vector, a hook on the MLP for its output, on the decoder layer for steering).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from conftest import TINY_LLAMA  # noqa: E402
from tfcli.analysis.experiments import ablate as ablation  # noqa: E402
from tfcli.analysis.experiments import heads as head_tools  # noqa: E402
from tfcli.analysis.experiments import patch as patching  # noqa: E402
from tfcli.analysis.experiments import steer as steering  # noqa: E402
from tfcli.analysis.experiments.common import ROWS, rows_per_pass  # noqa: E402
from tfcli.store import load  # noqa: E402
from tfcli.engine.fast import FAST  # noqa: E402

TOL = 1e-3  # the bound on grid values and log-probabilities (float32 passes through 3 blocks)


def _randomize(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if ("norm" in name or "ln_" in name) and name.endswith("weight") else 0.2 * torch.randn_like(p))
    return model.eval()


def _gpt2(folder):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=300, n_positions=64, n_embd=64, n_layer=3, n_head=4, bos_token_id=0, eos_token_id=0)
    return _randomize(GPT2LMHeadModel(cfg))


def _llama(folder):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=300, hidden_size=96, intermediate_size=160, num_hidden_layers=3, num_attention_heads=6,
                      num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)  # fmt: skip
    return _randomize(LlamaForCausalLM(cfg))


def _qwen2(folder):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=300, hidden_size=96, intermediate_size=112, num_hidden_layers=3, num_attention_heads=6,
                      num_key_value_heads=2, max_position_embeddings=64, rope_theta=1e6, tie_word_embeddings=True,
                      use_sliding_window=False, bos_token_id=0, eos_token_id=0)  # fmt: skip
    return _randomize(Qwen2ForCausalLM(cfg))


@pytest.fixture(scope="module", params=["gpt2", "llama", "qwen2"])
def pair(request, tmp_path_factory):
    """(tfcli's model, transformers' model, the decoder layers, the final norm, attention output projections, MLPs)."""
    folder = tmp_path_factory.mktemp(request.param)
    ref = {"gpt2": _gpt2, "llama": _llama, "qwen2": _qwen2}[request.param](folder)
    ref.save_pretrained(folder)
    ref.set_attn_implementation("eager")  # the attention weights (output_attentions) come only from eager attention
    shutil.copy(TINY_LLAMA / "tokenizer.json", folder / "tokenizer.json")
    if request.param == "gpt2":
        body = ref.transformer
        parts = (body.h, body.ln_f, [b.attn.c_proj for b in body.h], [b.mlp for b in body.h])
    else:
        body = ref.model
        parts = (body.layers, body.norm, [b.self_attn.o_proj for b in body.layers], [b.mlp for b in body.layers])
    return (load(folder), ref, *parts)


def _logits(ref, ids, hooks) -> np.ndarray:
    handles = [module.register_forward_pre_hook(fn) if pre else module.register_forward_hook(fn) for module, fn, pre in hooks]
    try:
        with torch.no_grad():
            return ref(torch.tensor([list(ids)])).logits[0].double().numpy()  # [T, V]
    finally:
        for h in handles:
            h.remove()


def _hidden(ref, ids) -> list[np.ndarray]:
    with torch.no_grad():
        out = ref(torch.tensor([list(ids)]), output_hidden_states=True)
    return [h[0] for h in out.hidden_states]  # [L+1] x [T, D]; the last one after the final norm in transformers


def _pre_replace(row, p):
    """A forward pre-hook that puts `row` at position p of the module's input hidden states."""

    def hook(module, args, kwargs=None):
        x = args[0].clone()
        x[0, p] = row
        return (x, *args[1:])

    return hook


def _texts(lm):
    rng = np.random.default_rng(5)
    clean = rng.integers(1, 300, 7)
    corrupt = clean.copy()
    corrupt[2] = (clean[2] + 17) % 299 + 1
    return clean, corrupt


def test_patched_residual_equals_transformers(pair):
    lm, ref, layers, final_norm, _, _ = pair
    clean, corrupt = _texts(lm)
    got = patching.patch(lm.model, clean, corrupt, "resid")
    ld = lambda z: z[-1, got.answer] - z[-1, got.wrong]  # noqa: E731
    # Where the clean residual comes from: transformers' own clean run, before each layer (index i),
    # and before the final norm (index L: captured with a pre-hook).
    clean_in = _inputs(ref, clean, layers, final_norm)
    ld_clean, ld_corrupt = ld(_logits(ref, clean, [])), ld(_logits(ref, corrupt, []))
    assert abs(got.clean_ld - ld_clean) < TOL and abs(got.corrupt_ld - ld_corrupt) < TOL
    modules = [*layers, final_norm]
    for i in range(len(modules)):
        for p in (0, 2, 6):
            z = _logits(ref, corrupt, [(modules[i], _pre_replace(clean_in[i][p], p), True)])
            want = (ld(z) - ld_corrupt) / (ld_clean - ld_corrupt)
            assert abs(got.grid[i, p] - want) < TOL, (i, p, got.grid[i, p], want)


def test_patching_a_quantized_model_compares_like_with_like(monkeypatch):
    """On a quantized model whose type's kernels run only a few rows (Q8_0 on AVX2 without VNNI) the
    kernels' 8-bit activations run passes of up to 48 rows, float32 ones longer passes: the variants
    run as the recorded passes did (rows_per_pass, the executor forward takes), so a patch that
    changes nothing (position 0, the same token in both texts, and the last index everywhere but the
    last position) moves the logit difference by exactly 0. With VNNI every length is on the kernels."""
    from tfcli.engine.fast.run import kernel_products
    from tfcli.engine.quantized import quantize_weights

    lm = load(TINY_LLAMA)
    quantize_weights(lm.model, "q8_0")
    clean, corrupt = _texts(lm)
    monkeypatch.setattr(kernel_products, "ALL_ROWS", kernel_products.VNNI_ROWS)
    assert rows_per_pass(lm.model, FAST) == ROWS
    monkeypatch.setattr(kernel_products, "ALL_ROWS", kernel_products.AVX2_ROWS)
    assert rows_per_pass(lm.model, FAST) == 48 and rows_per_pass(lm.model) == ROWS  # the textbook's numerics do not change with rows
    got = patching.patch(lm.model, clean, corrupt, "resid", run=FAST)
    assert (got.grid[:, 0] == 0).all() and (got.grid[:, 1] == 0).all()  # before the changed token: the same streams
    assert (got.grid[-1, :-1] == 0).all() and got.grid[-1, -1] == 1


def _inputs(ref, ids, layers, final_norm) -> list:
    seen = []
    handles = [m.register_forward_pre_hook(lambda module, args: seen.append(args[0][0].clone())) for m in [*layers, final_norm]]
    try:
        _logits(ref, ids, [])
    finally:
        for h in handles:
            h.remove()
    return seen


def _zero_head(h, dh):
    def hook(module, args):
        x = args[0].clone()
        x[..., h * dh : (h + 1) * dh] = 0
        return (x, *args[1:])

    return hook


def _logprob(z, answer):
    z = z[-1] - z[-1].max()
    return z[answer] - np.log(np.exp(z).sum())


def test_ablated_heads_and_mlps_equal_transformers(pair):
    lm, ref, layers, _, o_proj, mlps = pair
    ids, _ = _texts(lm)
    got = ablation.ablate(lm.model, ids)
    base = _logprob(_logits(ref, ids, []), got.answer)
    assert abs(got.logprob - base) < TOL
    dh = lm.config.head_dim
    for b in range(lm.config.n_layer):
        for h in range(lm.config.n_head):
            want = _logprob(_logits(ref, ids, [(o_proj[b], _zero_head(h, dh), True)]), got.answer) - base
            assert abs(got.heads[b, h] - want) < TOL, (b, h)
        zero_mlp = lambda module, args, out: torch.zeros_like(out)  # noqa: E731
        want = _logprob(_logits(ref, ids, [(mlps[b], zero_mlp, False)]), got.answer) - base
        assert abs(got.mlps[b] - want) < TOL, b


def test_ablation_hooks_on_a_pass_equal_transformers(pair):
    """--ablate 1.2 --ablate 0.mlp on generate, score and lens: the same hooks on any pass."""
    lm, ref, layers, _, o_proj, mlps = pair
    ids, _ = _texts(lm)
    hooks = ablation.ablation_hooks(lm.model, ["1.2", "0.mlp"])
    got = lm.model.forward(np.asarray(ids), lm.model.new_cache(len(ids)), all_logits=True, hooks=hooks, run=FAST)
    zero_mlp = lambda module, args, out: torch.zeros_like(out)  # noqa: E731
    want = _logits(ref, ids, [(o_proj[1], _zero_head(2, lm.config.head_dim), True), (mlps[0], zero_mlp, False)])
    assert np.abs(got - want).max() < TOL


def test_steered_greedy_continuation_equals_transformers(pair):
    lm, ref, layers, _, _, _ = pair
    model = lm.model
    a, b = [5, 9, 200, 31], [7, 8]
    s = steering.steering_vector(model, (a, len(a)), (b, len(b)), layer=1, scale=4.0)
    ha, hb = _hidden(ref, a)[2].double().numpy(), _hidden(ref, b)[2].double().numpy()  # after block 1
    assert np.abs(s.vector - (ha.mean(0) - hb.mean(0))).max() < TOL
    push = torch.tensor(4.0 * s.vector)

    def add(module, args, out):
        if isinstance(out, tuple):
            return (out[0] + push, *out[1:])
        return out + push

    prompt = [3, 14, 15]
    from tfcli.engine.generate import Session

    session = Session(model, 32, hooks=s.hooks())
    logits, _ = session.prefill(prompt)
    mine = []
    for _ in range(12):
        tok = int(np.argmax(logits))
        mine.append(tok)
        logits = session.step(tok)
    ids = list(prompt)
    for _ in range(12):
        ids.append(int(np.argmax(_logits(ref, ids, [(layers[1], add, False)])[-1])))
    assert mine == ids[len(prompt) :]
    plain = list(prompt)
    for _ in range(12):
        plain.append(int(np.argmax(_logits(ref, plain, [])[-1])))
    assert plain != ids  # the push is large enough to change the text, so the check above means something


def test_direct_logit_attribution_equals_transformers(pair):
    lm, ref, layers, final_norm, o_proj, mlps = pair
    ids, _ = _texts(lm)
    got = head_tools.attribute(lm.model, ids, position=-1)
    z = _logits(ref, ids, [])
    assert abs(got.logit - z[-1, got.target]) < TOL
    assert abs(got.total - got.logit) < TOL  # the parts add up to the logit
    # Per head, from transformers: the head's slice of o_proj's input through its columns of W_O,
    # the final norm with the scale of this residual, the target's unembedding.
    seen = {}
    handles = [m.register_forward_pre_hook(lambda module, args, b=b: seen.__setitem__(b, args[0][0, -1].double())) for b, m in enumerate(o_proj)]
    handles.append(final_norm.register_forward_pre_hook(lambda module, args: seen.__setitem__("x", args[0][0, -1].double())))
    try:
        _logits(ref, ids, [])
    finally:
        for h in handles:
            h.remove()
    x = seen["x"]
    unembed = ref.get_output_embeddings().weight[got.target].detach().double()
    g = final_norm.weight.detach().double()
    if hasattr(final_norm, "bias") and final_norm.bias is not None:  # LayerNorm
        std = torch.sqrt(((x - x.mean()) ** 2).mean() + final_norm.eps)
        lin = lambda c: (c - c.mean()) / std * g  # noqa: E731
    else:
        eps = getattr(final_norm, "variance_epsilon", getattr(final_norm, "eps", 1e-6))
        rms = torch.sqrt((x**2).mean() + eps)
        lin = lambda c: c / rms * g  # noqa: E731
    dh = lm.config.head_dim
    for b, m in enumerate(o_proj):
        w = m.weight.detach().double()  # Linear [D, H*Dh]; Conv1D (GPT-2) [H*Dh, D]
        w = w.T if w.shape[0] != lm.config.d_attn or isinstance(m, torch.nn.Linear) else w
        for h in range(lm.config.n_head):
            part = seen[b][h * dh : (h + 1) * dh] @ w[h * dh : (h + 1) * dh]
            assert abs(got.heads[b, h] - float(lin(part) @ unembed)) < TOL, (b, h)


def test_head_detectors_equal_transformers_attentions(pair):
    lm, ref, *_ = pair
    ids, _ = _texts(lm)
    got = head_tools.detect(lm.model, ids, lm.tokenizer, repeat=10, seed=1)
    with torch.no_grad():
        att = [a[0].double().numpy() for a in ref(torch.tensor([list(ids)]), output_attentions=True).attentions]  # [L] x [H, T, T]
        rep = [a[0].double().numpy() for a in ref(torch.tensor([got.induction_tokens]), output_attentions=True).attentions]
    t = np.arange(1, len(ids))
    off = len(got.induction_tokens) - 20
    second = np.arange(off + 10, off + 20)
    for b in range(lm.config.n_layer):
        assert np.abs(got.previous_token[b] - att[b][:, t, t - 1].mean(-1)).max() < TOL
        assert np.abs(got.first_token[b] - att[b][:, t, 0].mean(-1)).max() < TOL
        assert np.abs(got.induction[b] - rep[b][:, second, second - 9].mean(-1)).max() < TOL
        assert np.abs(got.duplicate_token[b] - rep[b][:, second, second - 10].mean(-1)).max() < TOL
    assert got.induction_tokens[off : off + 10] == got.induction_tokens[off + 10 :]


@pytest.mark.parametrize("tied", [True, False])
def test_gemma3_head_attribution_freezes_the_norm_after_w_o(tied, tmp_path):
    """Gemma 3 norms the attention output after W_O: with that norm's scale held at its value for
    the block's whole output (as the final norm's is), each head's share is linear again. Per head,
    from transformers: o_proj's input slice through its columns of W_O, post_attention_layernorm's
    (1 + w) at the rms of o_proj's output, the final norm frozen, the target's unembedding."""
    from test_new_families import gemma3

    ref = gemma3(tmp_path / "g", tied=tied, final_logit_softcapping=None)
    lm = load(tmp_path / "g")
    ids = list(range(3, 40))
    got = head_tools.attribute(lm.model, ids, position=-1)
    z = _logits(ref, ids, [])
    assert abs(got.logit - z[-1, got.target]) < TOL
    assert abs(got.total - got.logit) < TOL
    layers = ref.model.layers
    seen = {}
    hooks = [(layer.self_attn.o_proj, lambda m, a, b=b: seen.__setitem__(("in", b), a[0][0, -1].double()), True) for b, layer in enumerate(layers)]
    hooks += [(layer.self_attn.o_proj, lambda m, a, out, b=b: seen.__setitem__(("out", b), out[0, -1].double()), False) for b, layer in enumerate(layers)]
    hooks += [(ref.model.norm, lambda m, a: seen.__setitem__("x", a[0][0, -1].double()), True)]
    _logits(ref, ids, hooks)
    eps = ref.config.rms_norm_eps
    x = seen["x"]
    final = lambda c: c / torch.sqrt((x**2).mean() + eps) * (1 + ref.model.norm.weight.detach().double())  # noqa: E731
    unembed = ref.get_output_embeddings().weight[got.target].detach().double()
    dh = lm.config.head_dim
    for b, layer in enumerate(layers):
        o = seen[("out", b)]
        post = lambda c: c / torch.sqrt((o**2).mean() + eps) * (1 + layer.post_attention_layernorm.weight.detach().double())  # noqa: E731
        w = layer.self_attn.o_proj.weight.detach().double()  # [D, H*Dh]
        for h in range(lm.config.n_head):
            part = w[:, h * dh : (h + 1) * dh] @ seen[("in", b)][h * dh : (h + 1) * dh]  # [D]
            assert abs(got.heads[b, h] - float(final(post(part)) @ unembed)) < TOL, (b, h)
    assert np.abs(got.heads).max() > 10 * TOL  # the shares are not all near zero


def test_gemma3_head_attribution_is_refused_with_soft_capped_logits(tmp_path):
    from test_new_families import gemma3
    from tfcli.engine.errors import ConfigError

    gemma3(tmp_path / "g", final_logit_softcapping=10.0)
    with pytest.raises(ConfigError, match="soft-capped"):
        head_tools.attribute(load(tmp_path / "g").model, list(range(3, 20)))
