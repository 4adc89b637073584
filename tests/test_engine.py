"""The NumPy engine against transformers, and cached decoding against full recomputation."""

from __future__ import annotations

import numpy as np
import pytest

from tfcli.engine.inspect import Recorder
from tfcli.store import load
from tfcli.engine.generate import Generation, Session
from tfcli.engine.sampling import Sampler, SamplingParams

from conftest import DATA, assert_f32_close, assert_f32_near, reference
from tfcli.engine.fast import FAST

MODELS = ["tiny-gpt2", "tiny-llama"]


@pytest.fixture(scope="module", params=MODELS)
def lm(request):
    return request.param, load(DATA / request.param)


@pytest.mark.parametrize("prompt", ["one", "short", "long"])
def test_logits_equal_transformers(lm, prompt):
    name, m = lm
    ref = reference(name)
    ids = ref[f"ids_{prompt}"]
    logits = m.model.forward(ids, m.model.new_cache(len(ids)), all_logits=True, run=FAST)  # [T, V]
    assert logits.shape == ref[f"logits_{prompt}"].shape
    assert logits.dtype == np.float32
    assert np.abs(logits - ref[f"logits_{prompt}"]).max() <= 1e-4


def test_long_prompt_is_past_64_tokens():
    assert len(reference("tiny-gpt2")["ids_long"]) > 64


def test_kv_cache_equals_recomputation(lm):
    """Feed a sequence token by token through the cache; each step's logits must equal those of
    the whole prefix run in one pass with no cache."""
    _, m = lm
    ids = reference("tiny-gpt2")["ids_long"]  # 70 tokens: 5 in the prompt pass, 65 decode steps
    full = m.model.forward(ids, m.model.new_cache(len(ids)), all_logits=True, run=FAST)  # [T, V]
    cache = m.model.new_cache(len(ids))
    first = m.model.forward(ids[:5], cache, all_logits=True, run=FAST)  # a prompt pass, then decode steps
    steps = [first] + [m.model.forward(ids[t : t + 1], cache, run=FAST) for t in range(5, len(ids))]
    cached = np.concatenate(steps)  # [T, V]
    assert cache.length == len(ids)
    assert_f32_near(cached, full)


def test_last_position_logits_equal_all_positions(lm):
    _, m = lm
    ids = reference("tiny-gpt2")["ids_short"]
    last = m.model.forward(ids, m.model.new_cache(len(ids)), run=FAST)
    full = m.model.forward(ids, m.model.new_cache(len(ids)), all_logits=True, run=FAST)
    assert last.shape == (1, m.config.vocab_size)
    # same values up to the summation order BLAS picks for a [1, D] vs a [T, D] product
    assert_f32_near(last[0], full[-1])


def test_greedy_continuation_equals_transformers(lm):
    name, m = lm
    ref = reference(name)
    gen = Generation(Session(m.model), m.tokenizer, list(ref["greedy_prompt"]), Sampler(SamplingParams(temperature=0)), len(ref["greedy"]))
    tokens = [step.token for step in gen]
    assert len(tokens) >= 32
    assert tokens == list(ref["greedy"])


def test_attention_weights_equal_transformers(lm):
    name, m = lm
    ref = reference(name)
    ids = ref["ids_long"]
    rec = Recorder(attention=True)
    m.model.forward(ids, m.model.new_cache(len(ids)), hooks=rec, run=FAST)
    got = np.stack([rec.attn[i] for i in range(m.config.n_layer)])  # [L, H, T, T]
    assert got.shape == ref["attn_long"].shape
    assert np.abs(got - ref["attn_long"]).max() <= 1e-5
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
    upper = np.triu(np.ones(got.shape[-2:], dtype=bool), k=1)
    assert (got[..., upper] == 0).all()


def test_weights_are_memory_mapped_not_copied():
    m = load(DATA / "tiny-gpt2")
    # float32 weights are read-only views into the file's mmap, not private arrays
    w = m.model.layers[0].c_attn_w
    assert not w.flags.owndata and not w.flags.writeable
    # the tied unembedding is the embedding matrix itself
    assert np.shares_memory(m.model.unembedding, m.model.token_embedding)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_checkpoints_load(tmp_path, dtype):
    """F16 and BF16 files load and compute in float32, close to the float32 original."""
    import shutil

    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    src = DATA / "tiny-gpt2"
    dst = tmp_path / dtype
    shutil.copytree(src, dst)
    tensors = {k: v.to(getattr(torch, dtype)) for k, v in load_file(src / "model.safetensors").items()}
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    ref = reference("tiny-gpt2")
    m = load(dst)
    assert m.model.token_embedding.dtype == np.float32
    ids = ref["ids_short"]
    logits = m.model.forward(ids, m.model.new_cache(len(ids)), all_logits=True, run=FAST)
    # exact against a float32 model whose weights were rounded the same way
    rounded = {k: v.float() for k, v in tensors.items()}
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(src).eval()
    hf.load_state_dict(rounded, strict=False)
    with torch.no_grad():
        expect = hf(torch.from_numpy(ids)[None]).logits[0].numpy()
    assert np.abs(logits - expect).max() <= 1e-4


def _rewrite(tmp_path, transform, name="model.safetensors"):
    """A copy of tiny-gpt2 whose tensors went through `transform(dict) -> dict of files`."""
    import shutil

    from safetensors.numpy import load_file, save_file

    dst = tmp_path / "ckpt"
    shutil.copytree(DATA / "tiny-gpt2", dst)
    tensors = load_file(dst / "model.safetensors")
    (dst / "model.safetensors").unlink()
    for fname, part in transform(tensors).items():
        if fname.endswith(".json"):
            (dst / fname).write_text(part)
        else:
            save_file(part, dst / fname)
    return dst


def _logits(folder):
    ids = reference("tiny-gpt2")["ids_short"]
    m = load(folder)
    return m, m.model.forward(ids, m.model.new_cache(len(ids)), all_logits=True, run=FAST)


def test_gpt2_keys_without_prefix_with_mask_buffers_and_saved_lm_head(tmp_path):
    """Older GPT-2 files: no 'transformer.' prefix, the causal-mask buffers saved as tensors, and a
    tied lm_head written out; all load, nothing is reported as unexpected."""

    def old_layout(t):
        out = {k.removeprefix("transformer."): v for k, v in t.items()}
        for i in range(3):
            out[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 128, 128), dtype=np.float32))
        out["lm_head.weight"] = t["transformer.wte.weight"].copy()
        return {"model.safetensors": out}

    m, logits = _logits(_rewrite(tmp_path, old_layout))
    assert m.warnings == []
    assert np.abs(logits - reference("tiny-gpt2")["logits_short"]).max() <= 1e-4


def test_sharded_checkpoint_loads(tmp_path):
    import json

    def shard(t):
        names = sorted(t)
        half = len(names) // 2
        files = {"model-00001-of-00002.safetensors": {n: t[n] for n in names[:half]},
                 "model-00002-of-00002.safetensors": {n: t[n] for n in names[half:]}}
        index = {"metadata": {}, "weight_map": {n: f for f, part in files.items() for n in part}}
        return {**files, "model.safetensors.index.json": json.dumps(index)}

    _, logits = _logits(_rewrite(tmp_path, shard))
    assert np.abs(logits - reference("tiny-gpt2")["logits_short"]).max() <= 1e-4


def test_unexpected_tensor_is_a_warning(tmp_path):
    def extra(t):
        return {"model.safetensors": {**t, "transformer.h.0.attn.rotary": np.zeros(4, dtype=np.float32)}}

    m, _ = _logits(_rewrite(tmp_path, extra))
    assert len(m.warnings) == 1 and "transformer.h.0.attn.rotary" in m.warnings[0]


def test_prompt_pass_in_chunks_equals_one_pass(lm, monkeypatch):
    """A long prompt runs in chunks (bounded attention scores); the logits must not change."""
    import tfcli.engine.generate as g

    _, m = lm
    ids = list(reference("tiny-gpt2")["ids_long"])  # 70 tokens
    whole, n = Session(m.model).prefill(ids)
    monkeypatch.setattr(g, "PREFILL_CHUNK", 16)
    s = Session(m.model)
    chunked, n2 = s.prefill(ids)
    assert n == n2 == len(ids) and s.tokens == ids and s.cache.length == len(ids)
    assert_f32_near(chunked, whole)


def test_blocked_attention_equals_one_block(monkeypatch):
    """Long prompt passes score queries in blocks; the result must equal a single block, and the
    assembled weights must keep rows summing to 1 and the future at exactly 0."""
    from tfcli.engine.fast.run import dense_ops as fast_ops

    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 70, 16)).astype(np.float32)  # [Hkv, G, T, Dh]
    k = rng.standard_normal((2, 75, 16)).astype(np.float32)  # [Hkv, S, Dh], 5 cached positions first
    v = rng.standard_normal((2, 75, 16)).astype(np.float32)
    kt = k.transpose(0, 2, 1)  # [Hkv, Dh, S], as the cache keeps keys
    whole_out, whole_w = fast_ops.attention(q, kt, v, start=5, return_weights=True)
    monkeypatch.setattr(fast_ops, "ATTN_BLOCK", 16)
    out, w = fast_ops.attention(q, kt, v, start=5, return_weights=True)
    # The blocks sum the same products in another order: equal to a few float32 steps, not to the bit.
    assert_f32_close(out, whole_out, steps=8, floor=1.0)  # sums of values of size ~1
    assert_f32_close(w, whole_w, steps=8)
    assert_f32_close(w.sum(-1), np.ones(w.shape[:-1]), steps=8)
    future = np.triu(np.ones((70, 75), dtype=bool), k=6)
    assert (w[..., future] == 0).all()


def test_session_refuses_an_empty_prompt(lm):
    from tfcli.engine.errors import PromptError

    _, m = lm
    with pytest.raises(PromptError, match="the prompt is empty"):
        Session(m.model).prefill([])
