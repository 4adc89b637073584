"""The textbook path and every fast path compute the same pass (engine/executor.py).

PLAIN is `x @ w + b`, the MLP whole and attention as the formula reads; Fast reads stored rows,
cuts products of a few rows into blocks with half of them on a helper thread, splits the MLP by
hidden units, cuts a long prompt into parts on threads, and steps B sequences at once. On GPT-2,
Llama and Qwen2 checkpoints each must give the textbook's logits and the same cache contents.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA, assert_f32_close
from tfcli.engine import executor
from tfcli.engine.executor import PLAIN
from tfcli.engine.fast.run.fast_executor import Fast
from tfcli.engine.fast.run import fast_executor as fast_executor
from tfcli.engine.kvcache import BatchCache
from tfcli.store import load


@pytest.fixture(scope="module", params=["gpt2", "llama", "qwen2"])
def net(request, tmp_path_factory):
    if request.param == "qwen2":
        pytest.importorskip("transformers")
        from test_qwen2 import qwen2_checkpoint

        folder = tmp_path_factory.mktemp("qwen2")
        qwen2_checkpoint(folder, n_head=6, n_kv_head=2, tied=True)
        return load(folder).model
    return load(TINY_GPT2 if request.param == "gpt2" else TINY_LLAMA).model


def _pass(net, prompt, tokens, run):
    """A prompt pass, then a pass over `tokens` after it: (logits [T, V] of the second, the cache)."""
    cache = net.new_cache(len(prompt) + len(tokens))
    net.forward(prompt, cache, run=run)
    return net.forward(tokens, cache, all_logits=True, run=run), cache


def _same_logits(got, want):
    """Sums of hundreds of products in another order: equal to 32 float32 steps of the largest logit."""
    assert_f32_close(got, want, steps=32, floor=float(np.abs(want).max()))


def _same_cache(a, b, length):
    assert a.length == b.length == length
    assert_f32_close(a.k[:, :, :length], b.k[:, :, :length], steps=64, floor=1.0)
    assert_f32_close(a.v[:, :, :length], b.v[:, :, :length], steps=64, floor=1.0)


@pytest.mark.parametrize("t_len", [1, 2, 5, 16, 40])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_pass_equals_the_textbook(net, t_len, workers):
    """One token (a decode step), 2-16 (few-row blocks with a helper, the MLP split), 40 (stored rows)."""
    rng = np.random.default_rng(t_len)
    prompt, tokens = rng.integers(0, net.config.vocab_size, 7), rng.integers(0, net.config.vocab_size, t_len)
    want, want_cache = _pass(net, prompt, tokens, PLAIN)
    got, got_cache = _pass(net, prompt, tokens, Fast(workers))
    _same_logits(got, want)
    _same_cache(got_cache, want_cache, 7 + t_len)


def test_prompt_parts_on_threads_equal_the_textbook(net, monkeypatch):
    monkeypatch.setattr(fast_executor, "PART_MIN_TOKENS", 8)
    rng = np.random.default_rng(0)
    prompt, tokens = rng.integers(0, net.config.vocab_size, 5), rng.integers(0, net.config.vocab_size, 40)
    assert len(fast_executor.split_prompt(net.config, 5, 40, 3)) == 3
    want, want_cache = _pass(net, prompt, tokens, PLAIN)
    got, got_cache = _pass(net, prompt, tokens, Fast(3))
    _same_logits(got, want)
    _same_cache(got_cache, want_cache, 45)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_batch_step_equals_the_textbook_for_each_sequence(net, workers):
    rng = np.random.default_rng(1)
    prompt, nexts = rng.integers(0, net.config.vocab_size, 6), rng.integers(0, net.config.vocab_size, 4)
    cache = net.new_cache(8)
    net.forward(prompt, cache, run=PLAIN)
    batch = BatchCache(net.config, 4, 8)
    batch.fill(cache)
    rows = net.decode_batch(nexts, batch, Fast(workers, batch=True))  # [4, V]
    assert batch.length == 7
    for b, token in enumerate(nexts):
        alone, alone_cache = _pass(net, prompt, np.array([token]), PLAIN)
        _same_logits(rows[b], alone[0])
        assert_f32_close(batch.k[:, b, :, :7], alone_cache.k[:, :, :7], steps=64, floor=1.0)
        assert_f32_close(batch.v[:, b, :, :7], alone_cache.v[:, :, :7], steps=64, floor=1.0)


def test_the_plain_attention_is_the_formula(net):
    """PLAIN's attention repeats each key/value head for its query heads and applies the formula;
    Fast's groups them and masks only the last square: equal weights and outputs."""
    rng = np.random.default_rng(2)
    n_kv, g, t_len, s_len, dh = 2, 3, 5, 9, 8
    q = rng.standard_normal((n_kv, g, t_len, dh), dtype=np.float32)
    k = rng.standard_normal((n_kv, dh, s_len), dtype=np.float32)
    v = rng.standard_normal((n_kv, s_len, dh), dtype=np.float32)
    out, w = PLAIN.attention(q, k, v, s_len - t_len, True)
    fast_out, fast_w = Fast().attention(q, k, v, s_len - t_len, True)
    assert_f32_close(fast_w, w, steps=8)
    assert_f32_close(fast_out, out, steps=8, floor=1.0)
    assert (w[..., np.triu(np.ones((t_len, s_len), bool), k=s_len - t_len + 1)] == 0).all()


@pytest.mark.parametrize("t_len, start, window, softcap", [(5, 4, 3, None), (1, 20, 6, None), (300, 20, 50, 5.0), (7, 0, 16, 2.0), (140, 0, 130, None)])
def test_sliding_window_and_softcap_are_the_same_on_both_paths(t_len, start, window, softcap):
    """Gemma's sliding window (a query sees itself and the window - 1 positions before it) and
    soft-capped scores: PLAIN's formula and Fast's blocks (which score only the keys a block's
    window reaches) give the same weights and outputs, zero weight outside the window."""
    rng = np.random.default_rng(5)
    n_kv, g, dh, s_len = 2, 2, 8, start + t_len
    q = rng.standard_normal((n_kv, g, t_len, dh), dtype=np.float32)
    k = rng.standard_normal((n_kv, dh, s_len), dtype=np.float32)
    v = rng.standard_normal((n_kv, s_len, dh), dtype=np.float32)
    out, w = PLAIN.attention(q, k, v, start, True, window=window, softcap=softcap)
    fast_out, fast_w = Fast().attention(q, k, v, start, True, window=window, softcap=softcap)
    assert_f32_close(fast_w, w, steps=8)
    assert_f32_close(fast_out, out, steps=8, floor=1.0)
    query, key = np.arange(start, s_len)[:, None], np.arange(s_len)[None, :]  # [T, 1], [1, S]
    assert (w[..., (key > query) | (key <= query - window)] == 0).all()
    assert (w[..., (key <= query) & (key > query - window)] > 0).all()


def test_a_pass_runs_the_textbook_unless_its_caller_picks_the_fast_executor(monkeypatch):
    """forward's default is PLAIN: the textbook's products (a quantized weight dequantized, then x @ w),
    never the fast room's; a caller that wants the fast one passes it (a Session, the CLI, the server)."""
    from tfcli.engine import quantized

    lm = load(TINY_LLAMA)
    quantized.quantize_weights(lm.model, "q8_0")
    seen = []
    real = executor.textbook_product
    monkeypatch.setattr(executor, "textbook_product", lambda x, w: seen.append(x.shape) or real(x, w))
    lm.model.forward(np.array([1, 2, 3]), lm.model.new_cache(4))
    assert seen, "the default pass did not run the textbook's products"
    seen.clear()
    lm.model.forward(np.array([1, 2, 3]), lm.model.new_cache(4), run=Fast())
    if fast_executor.kernel_products.running() is not None:
        assert not seen, "the fast executor ran the textbook's products"


def test_the_numerics_of_a_pass_are_the_executors(monkeypatch):
    """An experiment asks the executor how a pass of R rows computes (analysis/experiments/common.py):
    the textbook in float32 whatever R; the fast one, on a quantized model on the kernels, with 8-bit
    activations up to kernel_products.KERNEL_ROWS rows and float32 beyond (Q8_0 on AVX2 without VNNI), or
    8-bit at any length (with VNNI); a small float32 model in float32."""
    from tfcli.engine.quantized import quantize_weights

    small = load(TINY_LLAMA).model
    assert {PLAIN.numerics(small, r) for r in (1, 48, 49, 512)} == {Fast().numerics(small, r) for r in (1, 48, 512)} == {"float32"}
    quantize_weights(small, "q8_0")
    assert {PLAIN.numerics(small, r) for r in (1, 48, 49, 512)} == {"float32"}
    if fast_executor.kernel_products.running() is None:
        pytest.skip("compiled kernels unavailable")
    few = fast_executor.kernel_products.KERNEL_ROWS
    monkeypatch.setattr(fast_executor.kernel_products, "ALL_ROWS", fast_executor.kernel_products.AVX2_ROWS)
    assert [Fast().numerics(small, r) for r in (1, few, few + 1)] == ["8-bit activations", "8-bit activations", "float32"]
    monkeypatch.setattr(fast_executor.kernel_products, "ALL_ROWS", fast_executor.kernel_products.VNNI_ROWS)
    assert {Fast().numerics(small, r) for r in (1, few + 1, 512)} == {"8-bit activations"}


def _llama_on_the_kernels():
    """The tiny Llama quantized to Q4_0 (its passes on the compiled kernels); the test skips without them."""
    from tfcli.engine.quantized import quantize_weights

    lm = load(TINY_LLAMA)
    quantize_weights(lm.model, "q4_0")
    if fast_executor.kernel_products.running() is None:
        pytest.skip("compiled kernels unavailable")
    return lm


@pytest.mark.parametrize("on_integers", [True, False], ids=["on the integers", "on tiles"])
def test_a_pass_on_the_kernels_threads_runs_blas_on_one(monkeypatch, on_integers):
    """A pass beyond KERNEL_ROWS whose every product runs on the kernels' threads (a quantized model whose
    types are in ALL_ROWS) runs BLAS (its attention) on one thread, as a few rows do: two libraries' pools
    spinning on the same two cores wait for each other (a 128-token SmolLM2 prompt 2.9x slower). A pass
    whose products run on BLAS's tiles keeps BLAS's threads."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from tfcli.engine.sites import Hooks

    lm = _llama_on_the_kernels()
    if not any(i["user_api"] == "blas" for i in threadpool_info()):
        pytest.skip("no BLAS library that threadpoolctl can see")
    monkeypatch.setattr(fast_executor.kernel_products, "ALL_ROWS",
                        fast_executor.kernel_products.VNNI_ROWS if on_integers else frozenset())
    seen = []

    def blas_threads(x, site):
        seen.append(min(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"))

    rows = fast_executor.kernel_products.KERNEL_ROWS + 12
    with threadpool_limits(limits=2, user_api="blas"):
        lm.model.forward(np.arange(1, rows + 1), lm.model.new_cache(rows), run=Fast(2),
                         hooks=Hooks().add("attn_out", blas_threads, block=0))
    assert seen == ([1] if on_integers else [2])


def test_a_prompt_part_multiplies_on_its_own_thread(monkeypatch):
    """A prompt cut into parts (a thread each) asks the kernels for one thread per product: a part that
    took the kernels' pool beside the other part made three busy threads on two cores. A pass in one
    part shares its products among the workers."""
    lm = _llama_on_the_kernels()
    monkeypatch.setattr(fast_executor, "PART_MIN_TOKENS", 8)
    asked = []
    product = fast_executor.kernel_products.product

    def counted(x, w, threads=1, k=None):
        asked.append(threads)
        return product(x, w, threads, k)

    monkeypatch.setattr(fast_executor.kernel_products, "product", counted)
    rows = 40
    assert len(fast_executor.split_prompt(lm.config, 0, rows, 2)) == 2
    lm.model.forward(np.arange(1, rows + 1), lm.model.new_cache(rows), run=Fast(2))
    assert asked and set(asked) == {1}
    asked.clear()
    lm.model.forward(np.arange(1, 5), lm.model.new_cache(4), run=Fast(2))
    assert asked and set(asked) == {2}
