"""The backward pass of every inference family (engine/grad/) equals torch autograd on tiny random
models written by transformers: the gradient of every weight (under the checkpoint's names) and of
every site's activation (embed, resid_pre, z, attn_out, resid_mid, mlp_act, mlp_out, resid_post),
for a two-sequence batch's cross-entropy and for one text's logit difference.

The reference runs in float64, so that what is measured is tfcli's float32 arithmetic. Each
gradient's relative error, |ours - torch| / |torch| over the whole tensor, must stay under 2e-5:
a float32 step is 1.2e-7, which leaves room for the sums of a few hundred terms in each product
and the float32 the transformers norms compute in even in float64 models (measured: at most
3e-6, Qwen2's untied weights and Phi-3's sites).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tfcli.engine import grad  # noqa: E402
from tfcli.engine.loader import build as build_model, read_checkpoint  # noqa: E402

V, B, T = 96, 2, 12
TOLERANCE = 2e-5


def _randomise(model, seed: int) -> None:
    """Every parameter random (a gradient of a weight left at 0 or 1 can hide a mistake): norms
    around their identity (1, or 0 for Gemma's 1 + w), the rest around 0."""
    torch.manual_seed(seed)
    gemma = model.config.model_type.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:
                p.copy_((0.0 if gemma else 1.0) + 0.1 * torch.randn_like(p))
            elif gemma and name.endswith("embed_tokens.weight"):
                p.copy_(0.2 / model.config.hidden_size**0.5 * torch.randn_like(p))  # Gemma scales them by √D
            else:
                p.copy_(0.2 * torch.randn_like(p))


def build(kind: str, tied: bool):
    """A tiny random model of each family, with what sets it apart switched on."""
    import transformers as tr

    small = dict(vocab_size=V, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0)  # fmt: skip
    if kind == "gpt2":
        model = tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4, tie_word_embeddings=tied,
                                                 resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, bos_token_id=0, eos_token_id=0))  # fmt: skip
    elif kind == "llama":  # Llama 3.1's RoPE scaling, active at this size
        rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16}  # fmt: skip
        model = tr.LlamaForCausalLM(tr.LlamaConfig(**small, rope_parameters=rope, rms_norm_eps=1e-5))
    elif kind == "qwen2":  # biases on q, k, v
        model = tr.Qwen2ForCausalLM(tr.Qwen2Config(**small, rope_theta=1e6, use_sliding_window=False))
    elif kind == "qwen3":  # per-head q/k norms, H x Dh not D
        model = tr.Qwen3ForCausalLM(tr.Qwen3Config(**small, head_dim=16, rope_theta=1e6, use_sliding_window=False))
    elif kind == "phi3":  # part of each head rotated; untied: a sliding window of 5; tied: longrope
        rotated = 0.5 if tied else 0.75
        rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": rotated}
        if tied:
            rng = np.random.default_rng(0)
            pairs = int(16 * rotated) // 2
            rope |= {"rope_type": "longrope", "short_factor": list(1 + rng.random(pairs)), "long_factor": list(2 + rng.random(pairs))}
        model = tr.Phi3ForCausalLM(tr.Phi3Config(**(small | dict(hidden_size=64)), rope_parameters=rope, partial_rotary_factor=rotated, original_max_position_embeddings=32,
                                                 sliding_window=None if tied else 5, pad_token_id=0))  # fmt: skip
    else:  # gemma3: layers 0 and 2 slide over 5 positions, query_pre_attn_scalar 24, soft-capped logits
        model = tr.Gemma3ForCausalLM(tr.Gemma3TextConfig(
            **(small | dict(num_hidden_layers=3)), head_dim=16, sliding_window=5,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0}},
            query_pre_attn_scalar=24, final_logit_softcapping=10.0, pad_token_id=0))  # fmt: skip
    _randomise(model, seed=len(kind) + tied)
    return model.eval()


CASES = [(k, t) for k in ("gpt2", "llama", "qwen2", "qwen3", "phi3", "gemma3") for t in (False, True)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{k}-{'tied' if t else 'untied'}" for k, t in CASES])
def pair(request, tmp_path_factory):
    kind, tied = request.param
    model = build(kind, tied)
    folder = tmp_path_factory.mktemp(kind)
    model.save_pretrained(folder)
    net = build_model(read_checkpoint(folder))
    assert net.config.tie_embeddings is tied and net.config.family == kind
    return model, net


# Where each site is in transformers' modules: (module path under the layer, "in" or "out").
LLAMA_SITES = {"resid_pre": ("input_layernorm", "in"), "z": ("self_attn.o_proj", "in"), "attn_out": ("self_attn.o_proj", "out"),
               "resid_mid": ("post_attention_layernorm", "in"), "mlp_act": ("mlp.down_proj", "in"), "mlp_out": ("mlp", "out"), "resid_post": ("", "out")}  # fmt: skip
SITES = {
    "gpt2": {"resid_pre": ("ln_1", "in"), "z": ("attn.c_proj", "in"), "attn_out": ("attn.c_proj", "out"), "resid_mid": ("ln_2", "in"),
             "mlp_act": ("mlp.c_proj", "in"), "mlp_out": ("mlp", "out"), "resid_post": ("", "out")},  # fmt: skip
    "gemma3": LLAMA_SITES | {"attn_out": ("post_attention_layernorm", "out"), "resid_mid": ("pre_feedforward_layernorm", "in"),
                             "mlp_out": ("post_feedforward_layernorm", "out")},  # fmt: skip
}


def torch_grads(model, ids: np.ndarray, scalar) -> tuple[float, dict, dict]:
    """autograd in float64 of scalar(logits [B, T, V]) -> (value, {name: weight grad}, {(site, block): grad})."""
    m = model.double()
    m.zero_grad()
    kind = m.config.model_type.removesuffix("_text")
    layers = m.transformer.h if kind == "gpt2" else m.model.layers
    kept, handles = {}, []

    def keep(key, tensor):
        tensor = tensor[0] if isinstance(tensor, tuple) else tensor
        tensor.retain_grad()
        kept[key] = tensor

    for i, layer in enumerate(layers):
        for site, (path, end) in SITES.get(kind, LLAMA_SITES).items():
            module = layer.get_submodule(path) if path else layer
            if end == "in":
                handles.append(module.register_forward_pre_hook(lambda mod, args, key=(site, i): keep(key, args[0])))
            else:
                handles.append(module.register_forward_hook(lambda mod, args, out, key=(site, i): keep(key, out)))
    try:
        value = scalar(m(torch.tensor(ids)).logits)
        value.backward()
    finally:
        for h in handles:
            h.remove()
    weights = {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
    sites = {key: t.grad.numpy().copy() for key, t in kept.items()}
    model.float()
    return float(value.detach()), weights, sites


def relative_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.linalg.norm(ours - theirs.reshape(ours.shape)) / np.linalg.norm(theirs))


def assert_sites_equal(grads: grad.Grads, sites: dict, n_layer: int) -> None:
    for (site, i), theirs in sites.items():
        assert relative_error(grads.site(site, i), theirs) <= TOLERANCE, (site, i, relative_error(grads.site(site, i), theirs))
    assert relative_error(grads.site("embed", -1), sites[("resid_pre", 0)]) <= TOLERANCE
    assert len(sites) == 7 * n_layer


def assert_weights_equal(net, grads: grad.Grads, ref: dict) -> None:
    named = grad.backward_of(net).named(grads)
    ref = {n: g for n, g in ref.items() if not (net.config.tie_embeddings and n == "lm_head.weight")}
    assert set(named) == set(ref), set(named) ^ set(ref)
    for name, g in named.items():
        assert g.dtype == np.float32 and g.shape == ref[name].shape, name
        assert relative_error(g, ref[name]) <= TOLERANCE, (name, relative_error(g, ref[name]))


def test_cross_entropy_gradients_equal_autograd(pair):
    """A batch of two sequences: every weight and every site, against transformers."""
    model, net = pair
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))
    loss, grads = grad.loss_and_grads(net, x, y)
    ref_loss, ref_weights, ref_sites = torch_grads(model, x, lambda logits: torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(y).reshape(-1)))
    assert abs(loss - ref_loss) <= 1e-5 * ref_loss
    assert_weights_equal(net, grads, ref_weights)
    assert_sites_equal(grads, {k: v.reshape(B * T, -1) for k, v in ref_sites.items()}, net.config.n_layer)


def test_logit_difference_gradients_equal_autograd(pair):
    """One text, the attribution metric logit(answer) - logit(wrong) at its last position."""
    model, net = pair
    ids = np.random.default_rng(2).integers(0, V, T)
    metric, grads = grad.metric_grads(net, ids, answer=5, wrong=7)
    ref, ref_weights, ref_sites = torch_grads(model, ids[None], lambda logits: logits[0, -1, 5] - logits[0, -1, 7])
    assert abs(metric - ref) <= 1e-4 * max(1.0, abs(ref))
    assert_weights_equal(net, grads, ref_weights)
    assert_sites_equal(grads, {k: v.reshape(T, -1) for k, v in ref_sites.items()}, net.config.n_layer)


def test_a_quantized_gguf_run_in_place_has_the_gradients_of_its_dequantized_weights(tmp_path, monkeypatch):
    """The tiny Llama as a GGUF of mixed block types (Q4_0 .. Q8_0, F16, BF16), run in place: its
    products' backward dequantizes tile by tile, as its forward does. Against torch on the same
    file converted to float32 (the dequantized weights); the gradient of a quantized matrix is the
    one its float32 stand-in would get."""
    pytest.importorskip("gguf")
    from transformers import LlamaForCausalLM

    from test_gguf import MIXED, write_gguf
    from tfcli.engine.loader import load_folder
    from tfcli.store import gguf as tg
    from tfcli.store.gguf.cached import converted

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "home"))
    path = write_gguf(tmp_path / "tiny-mixed.gguf", types=MIXED, alignment=64)
    net = load_folder(converted(path)[0]).model
    assert net.quantized()
    model = LlamaForCausalLM.from_pretrained(tg.convert(path, tmp_path / "f32").path, dtype=torch.float32).eval()
    vocab = net.config.vocab_size
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, vocab, (B, T)), rng.integers(0, vocab, (B, T))
    loss, grads = grad.loss_and_grads(net, x, y)
    ref_loss, ref_weights, ref_sites = torch_grads(model, x, lambda logits: torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), torch.tensor(y).reshape(-1)))
    assert abs(loss - ref_loss) <= 1e-5 * ref_loss
    assert_weights_equal(net, grads, ref_weights)
    assert_sites_equal(grads, {k: v.reshape(B * T, -1) for k, v in ref_sites.items()}, net.config.n_layer)


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_the_attention_weights_gradient_equals_autograd(kind, tmp_path):
    """Site attn [H, T, S]: the pass only reads the weights, but their gradient (what changing one
    would do) is the softmax backward's input; transformers' eager attention returns the same
    tensor it multiplies the values by (output_attentions), whose gradient autograd keeps (at every
    position, hidden ones included: d weights = d z · vᵀ). Gemma 3's sliding layers too."""
    model = build(kind, tied=False)
    model.save_pretrained(tmp_path)
    net = build_model(read_checkpoint(tmp_path))
    ids = np.random.default_rng(6).integers(0, V, T)
    _, grads = grad.metric_grads(net, ids, answer=5, wrong=7)
    m = type(model).from_pretrained(tmp_path, dtype=torch.float64, attn_implementation="eager").eval()
    out = m(torch.tensor(ids)[None], output_attentions=True)
    for a in out.attentions:
        a.retain_grad()
    (out.logits[0, -1, 5] - out.logits[0, -1, 7]).backward()
    for i, a in enumerate(out.attentions):
        assert relative_error(grads.site("attn", i), a.grad[0].numpy()) <= TOLERANCE, i  # [H, T, S]
