"""`run_with_cache` (tfcli.api) keeps what transformers shows of the same pass: the residual stream
(output_hidden_states), every head's attention weights (output_attentions) and the MLP's hidden
activation, for every family (GPT-2, Llama, Qwen2, Qwen3, Gemma 3, Phi-3) on tiny random models,
on the textbook path and on the fast one; and the cache's keys, aliases, `names=` and stacks.

Tolerance: float32 steps of the largest value of each array (conftest.assert_f32_near): transformers
and tfcli sum the same products in other orders.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import tfcli
from tfcli.engine.errors import TfcliError

from conftest import TINY_GPT2, TINY_LLAMA, assert_f32_near

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

STEPS = 48  # float32 steps of an array's largest value: the same sums in another order (worst measured here 22, Phi-3 on the fast path; twice that for another CPU's BLAS)
IDS = [5, 17, 99, 23, 41, 8, 77, 150, 3, 60, 12, 200, 31, 45, 9, 120, 66, 18, 250, 7]  # 20 tokens: past Gemma's window of 7, Phi-3's of 9


def _qwen2(folder: Path):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.2)
    model.save_pretrained(folder)
    shutil.copy(TINY_LLAMA / "tokenizer.json", folder / "tokenizer.json")


def _built(name: str, folder: Path) -> Path:
    from test_new_families import gemma3, llama3, phi3, qwen3

    {"qwen2": _qwen2, "llama3": lambda f: llama3(f, tied=False), "qwen3": lambda f: qwen3(f, tied=True),
     "gemma3": lambda f: gemma3(f, tied=True), "phi3": lambda f: phi3(f, tied=False)}[name](folder)  # fmt: skip
    return folder


FAMILIES = ["gpt2", "llama", "qwen2", "llama3", "qwen3", "gemma3", "phi3"]


@pytest.fixture(scope="module", params=FAMILIES)
def folder(request, tmp_path_factory) -> Path:
    if request.param == "gpt2":
        return TINY_GPT2
    if request.param == "llama":
        return TINY_LLAMA
    return _built(request.param, tmp_path_factory.mktemp(request.param))


def _reference(folder: Path, ids: list[int]):
    """transformers' eager pass: hidden states [L+1] x [T, D] (the last one final-normed), attention
    weights [L] x [H, T, T], the MLP's hidden activations [L] x [T, F], logits [T, V]."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    acts: dict[int, np.ndarray] = {}
    handles = []
    blocks = model.model.layers if hasattr(model, "model") else model.transformer.h
    for i, layer in enumerate(blocks):
        proj = getattr(layer.mlp, "down_proj", None)
        if proj is not None:  # the down projection reads the hidden activation (silu(gate) * up, ...)
            handles.append(proj.register_forward_hook(lambda m, inp, out, i=i: acts.__setitem__(i, inp[0][0].numpy().copy())))
        else:  # GPT-2: c_proj reads gelu(c_fc(x))
            handles.append(layer.mlp.c_proj.register_forward_hook(lambda m, inp, out, i=i: acts.__setitem__(i, inp[0][0].numpy().copy())))
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True, output_attentions=True)
    for h in handles:
        h.remove()
    return ([h[0].numpy() for h in out.hidden_states], [a[0].numpy() for a in out.attentions],
            [acts[i] for i in sorted(acts)], out.logits[0].numpy())  # fmt: skip


@pytest.mark.parametrize("fast", [False, True], ids=["textbook", "fast"])
def test_run_with_cache_equals_transformers(folder, fast):
    model = tfcli.load(Path(folder), fast=fast)
    ids = [i % model.config.vocab_size for i in IDS]
    hidden, attentions, acts, logits = _reference(folder, ids)
    got, cache = model.run_with_cache(np.array(ids))
    assert_f32_near(got, logits, STEPS)
    stack = cache.accumulated_resid()  # [L+1, T, D]
    assert stack.shape == (model.n_blocks + 1, len(ids), model.config.d_model)
    for i in range(model.n_blocks):
        assert_f32_near(stack[i], hidden[i], STEPS)
    assert_f32_near(cache["ln_final"], hidden[-1], STEPS)  # transformers' last hidden state is after the final norm
    assert not np.allclose(stack[-1], hidden[-1], atol=1e-3)  # ... and the residual stream is not: the test tells them apart
    for b in range(model.n_blocks):
        assert cache["attn", b].shape == attentions[b].shape == (model.config.n_head, len(ids), len(ids))
        assert_f32_near(cache["attn", b], attentions[b], STEPS)
        assert_f32_near(cache["mlp_act", b], acts[b], STEPS)
        # the aliases are the same arrays
        assert cache[f"blocks.{b}.attn.hook_pattern"] is cache["attn", b]
        assert cache[f"blocks.{b}.mlp.hook_post"] is cache["mlp_act", b]
        assert cache[f"blocks.{b}.hook_resid_post"] is cache["resid_post", b]
    # the sums the sites add up to: resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out
    for b in range(model.n_blocks):
        assert_f32_near(cache["resid_mid", b], cache["resid_pre", b] + cache["attn_out", b], 4)
        assert_f32_near(cache["resid_post", b], cache["resid_mid", b] + cache["mlp_out", b], 4)
    assert cache["blocks.0.hook_resid_pre"] is cache["hook_embed"] is cache["embed"]


def test_textbook_and_fast_paths_keep_the_same_cache(tmp_path):
    """Both executors on one model: every site within float32 steps of its largest value."""
    plain, fast = tfcli.load(TINY_LLAMA, fast=False), tfcli.load(TINY_LLAMA, fast=True)
    a_logits, a = plain.run_with_cache("To be, or not to be: that is the question")
    b_logits, b = fast.run_with_cache("To be, or not to be: that is the question")
    assert set(a) == set(b) and len(a) == 1 + 8 * plain.n_blocks + 1
    for key in a:
        assert_f32_near(b[key], a[key], 32)
    assert_f32_near(b_logits, a_logits, 32)


def test_a_prompt_in_parts_on_threads_keeps_the_same_cache(monkeypatch):
    """The cache's hooks only read, so the fast executor may cut a long prompt into parts on threads
    (engine/fast/, Parts), each part showing them its rows: the cache gathers the rows into the same
    arrays a whole pass keeps. A hook of the user's, which may change a value, keeps the pass whole."""
    from tfcli.engine.fast.run import fast_executor as executor

    text = "To be, or not to be: that is the question. Whether 'tis nobler in the mind to suffer"
    whole_logits, whole = tfcli.load(TINY_LLAMA, fast=True).run_with_cache(text)
    monkeypatch.setenv("TFCLI_THREADS", "2")
    monkeypatch.setattr(executor, "PART_MIN_TOKENS", 8)  # this short text in two parts
    parts = []
    real = executor.Parts.each_part
    monkeypatch.setattr(executor.Parts, "each_part", lambda self, trunk: parts.append(self.parts) or real(self, trunk))
    model = tfcli.load(TINY_LLAMA, fast=True)
    logits, cache = model.run_with_cache(text)
    assert len(parts) == 1 and len(parts[0]) == 2, parts
    assert set(cache) == set(whole)
    for key in whole:
        assert cache[key].shape == whole[key].shape, key
        assert_f32_near(cache[key], whole[key], 32)  # the same sums, each part's products in their own blocks
    assert cache.nbytes == whole.nbytes  # every site read, so put together: each array once
    for b in range(model.n_blocks):
        np.testing.assert_array_equal(np.triu(cache["attn", b], 1), 0)  # no part saw its future
    assert_f32_near(logits, whole_logits, 32)
    assert cache["blocks.0.hook_resid_pre"] is cache["hook_embed"] and cache["resid_pre", 2] is cache["resid_post", 1]
    with model.hooks({("resid_post", 0): lambda value, site: None}):
        _, hooked = model.run_with_cache(text)
    assert len(parts) == 1  # a hook of the user's: the pass ran whole
    assert_f32_near(hooked["attn", 1], whole["attn", 1], 32)


def test_names_keep_only_what_is_asked():
    model = tfcli.load("shakespeare")
    logits, every = model.run_with_cache("To be, or not to be")
    _, few = model.run_with_cache("To be, or not to be", names=[("resid_post", 1), "blocks.2.attn.hook_pattern"])
    assert set(few) == {("resid_post", 1), ("attn", 2), ("ln_final", None)}
    np.testing.assert_array_equal(few["resid_post", 1], every["resid_post", 1])
    np.testing.assert_array_equal(few["attn", 2], every["attn", 2])
    assert few.nbytes < every.nbytes / 10
    with pytest.raises(TfcliError, match="was not kept"):
        few["resid_post", 0]
    with pytest.raises(TfcliError, match="was not kept"):
        few.accumulated_resid()
    _, patterns = model.run_with_cache("To be", names=lambda name: name.endswith("hook_pattern"))
    assert set(patterns) == {("attn", b) for b in range(model.n_blocks)} | {("ln_final", None)}


def test_accumulated_resid_and_the_lens():
    """apply_ln_to_stack(accumulated_resid()) @ W_U is the logit lens that `tfcli lens` reads, and
    its last row the model's own logits."""
    from tfcli.analysis.lens import logit_lens, residual_stream

    model = tfcli.load("shakespeare")
    logits, cache = model.run_with_cache("To be, or not to be")
    stack = cache.accumulated_resid()
    assert stack.shape == (model.n_blocks + 1, 19, model.config.d_model)
    lens_logits = cache.apply_ln_to_stack(stack) @ model._lm.model.unembedding  # [L+1, T, V]
    assert_f32_near(lens_logits[-1], logits, 16)
    net = model._lm.model
    want = logit_lens(net, residual_stream(net, model.to_tokens("To be, or not to be")), k=1)
    np.testing.assert_array_equal(lens_logits.argmax(axis=-1), want.ids[:, :, 0])
    assert cache.accumulated_resid(2).shape[0] == 2  # the stream entering block 2: indices 0 and 1
    with pytest.raises(TfcliError, match="out of range"):
        cache.accumulated_resid(9)


def test_cache_keys_and_repr():
    model = tfcli.load("shakespeare")
    _, cache = model.run_with_cache("To be")
    assert cache["resid_post", -1] is cache["resid_post", model.n_blocks - 1]
    assert ("pattern", 1) in cache and ("post", 2) in cache and "blocks.0.hook_mlp_out" in cache
    assert "blocks.9.hook_resid_post" not in cache and "nonsense" not in cache
    assert "blocks.3.hook_resid_post" in cache.names()
    assert repr(cache).startswith("ActivationCache(5 tokens")
