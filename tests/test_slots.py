"""Continuous batching's cache (engine/slots.py): a row of a step that mixes positions is the sequence alone."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA, assert_f32_near, decoded_alone
from tfcli.engine.fast.run.fast_executor import Fast
from tfcli.engine.slots import Slots
from tfcli.store import load
from tfcli.engine.fast import FAST


@pytest.fixture(scope="module", params=[TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def lm(request):
    return load(request.param)


@pytest.mark.parametrize("workers", [1, 2], ids=["1-thread", "2-threads"])
def test_each_row_of_a_mixed_step_equals_the_sequence_alone(lm, workers):
    """Prompts of 3, 9 and 1 tokens decode side by side, and a fourth sequence joins half way."""
    model, rng = lm.model, np.random.default_rng(0)
    V = model.config.vocab_size
    prompts = [rng.integers(0, V, n) for n in (3, 9, 5, 5)]  # positions 3, 9, 5: first and last two apart, yet not consecutive
    steps = rng.integers(0, V, (4, 6))  # [B, steps]: the token each row is fed at each step
    alone = [model.forward(np.concatenate([p, s]), model.new_cache(32), all_logits=True, run=FAST)[len(p) - 1 :] for p, s in zip(prompts, steps)]
    caches = [model.new_cache(32) for _ in prompts]
    run = Fast(workers, batch=True)
    fed = [0, 0, 0, 0]  # tokens of `steps` each row has taken
    for b in range(3):
        assert_f32_near(model.forward(prompts[b], caches[b], run=FAST)[-1], alone[b][0])
    live = [0, 1, 2]
    for t in range(6):
        if t == 3:  # the fourth sequence joins: its prompt pass, then it decodes with the others
            model.forward(prompts[3], caches[3], run=FAST)
            live.append(3)
        tokens = np.array([steps[b, fed[b]] for b in live])
        rows = model.forward(tokens, Slots([caches[b] for b in live]), all_logits=True, run=run)  # [B, V]
        for row, b in enumerate(live):
            fed[b] += 1
            assert_f32_near(rows[row], alone[b][fed[b]])
        if t == 1:
            live.remove(1)  # a row leaves: the others go on undisturbed
    assert [caches[b].length for b in range(4)] == [3 + 6, 9 + 2, 5 + 6, 5 + 3]


def test_a_copied_cache_continues_as_the_original(lm):
    model, rng = lm.model, np.random.default_rng(2)
    prompt = rng.integers(0, model.config.vocab_size, 6)
    cache = model.new_cache(16)
    model.forward(prompt, cache, run=FAST)
    twin = cache.copy()
    a = model.forward(np.array([1]), cache, run=FAST)
    b = model.forward(np.array([1]), twin, run=FAST)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("workers", [1, 2])
def test_row_by_row_steps_are_the_sequence_alone_to_the_bit(lm, workers):
    """Batch invariance: whatever the company, a row's logits are exactly those of the sequence
    decoding alone (one token per pass through a KVCache, as tfcli generate does). With 2
    workers, as the server runs its steps: half of each product's blocks on the helper thread,
    BLAS on one thread."""
    from tfcli.engine.fast.run.fast_executor import RowByRow
    from tfcli.engine.threads import new_helper

    run = RowByRow(workers, new_helper() if workers > 1 else None)

    model, rng = lm.model, np.random.default_rng(3)
    V = model.config.vocab_size
    prompts = [rng.integers(0, V, n) for n in (4, 2, 7)]
    steps = rng.integers(0, V, (3, 3))
    alone = [decoded_alone(model, p, s, 16) for p, s in zip(prompts, steps)]  # [V] per step
    for company in ([0], [0, 1], [0, 1, 2], [2, 0]):
        caches = [model.new_cache(16) for _ in prompts]
        for b in company:
            model.forward(prompts[b], caches[b], run=FAST)
        for t in range(3):
            with run.around_step(len(company)):
                rows = model.forward(steps[company, t], Slots([caches[b] for b in company]), all_logits=True, run=run)
            for row, b in enumerate(company):
                np.testing.assert_array_equal(rows[row], alone[b][t])


@pytest.mark.parametrize("workers", [1, 2])
def test_a_model_on_the_kernels_is_the_sequence_alone_to_the_bit(workers, monkeypatch):
    """A float32 model of KERNELS_FROM bytes or more runs its few-row products and decode attention
    on the compiled kernels (fast.executor.on_kernels; the tiny Llama is made to ask for them): the
    server's row-by-row steps still give each row exactly its sequence's logits alone, and those
    stay within float32 steps of the same model on NumPy's products and attention."""
    from tfcli.engine.fast.run import fast_executor as executor, kernel_products as quantized
    from tfcli.engine.fast.run.fast_executor import RowByRow
    from tfcli.engine.threads import new_helper

    if quantized.prepare() is not None or quantized.running() is None:
        pytest.skip("compiled kernels unavailable")
    lm = load(TINY_LLAMA)
    model, rng = lm.model, np.random.default_rng(5)
    V = model.config.vocab_size
    prompts = [rng.integers(0, V, n) for n in (4, 2, 7)]
    steps = rng.integers(0, V, (3, 3))
    on_numpy = [decoded_alone(model, p, s, 16) for p, s in zip(prompts, steps)]
    monkeypatch.setattr(executor, "KERNELS_FROM", 0)  # every model is large enough
    alone = [decoded_alone(model, p, s, 16) for p, s in zip(prompts, steps)]
    assert any(not np.array_equal(a, n) for a, n in zip(alone, on_numpy)), "the kernels did not run"
    run = RowByRow(workers, new_helper() if workers > 1 else None)
    caches = [model.new_cache(16) for _ in prompts]
    for b in range(3):
        model.forward(prompts[b], caches[b], run=FAST)
    for t in range(3):
        with run.around_step(3):
            rows = model.forward(steps[:, t], Slots(caches), all_logits=True, run=run)
        for b in range(3):
            np.testing.assert_array_equal(rows[b], alone[b][t])
            assert_f32_near(alone[b][t], on_numpy[b][t])


def test_several_prompts_in_one_pass_attend_each_to_its_own_sequence(lm):
    """slots.Prompts on the NumPy path: each prompt's logits and cache are its own pass's, within
    float32 roundings (OpenBLAS sums a product of 16 rows in another order than one of 5). Off the
    compiled blocks the server runs such prompts one by one: prefill_together declines them."""
    from tfcli.engine.generate import Session, prefill_together
    from tfcli.engine.slots import Prompts

    model, rng = lm.model, np.random.default_rng(3)
    prompts = [rng.integers(0, model.config.vocab_size, n) for n in (5, 3, 8)]
    caches = [model.new_cache(16) for _ in prompts]
    logits = model.forward(np.concatenate(prompts), Prompts(caches, [len(p) for p in prompts]), run=Fast(2))  # [3, V]
    assert logits.shape == (3, model.config.vocab_size)
    for b, p in enumerate(prompts):
        assert caches[b].length == len(p)
        assert_f32_near(logits[b], decoded_alone(model, p[:-1], [p[-1]], 16)[0])
        assert_f32_near(model.forward(np.array([9]), caches[b], run=FAST)[-1], decoded_alone(model, p, [9], 16)[0])
    assert prefill_together([Session(model, 16, workers=2) for _ in prompts], [list(p) for p in prompts]) is None
