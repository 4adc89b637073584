"""The compiled blocks (engine/fast/blocks.py): a few rows of a model on the kernels through all its
blocks in one compiled call, against the same blocks step by step (model.Transformer.block).

Every family with a recipe is checked on a random tiny model: Llama 3 (RoPE scaling; and with
attention biases), Qwen2 (Q, K, V biases), Qwen3 (q/k norms, H x Dh not D), Gemma 3 (the queries' factor, two RoPE tables, sliding and global layers,
post-norms, tanh GELU) and Phi-3 (a partial rotation, a window on every layer, longrope). Float32
weights on the kernels: both paths run the same products, so the logits agree to float32 roundings
(the norms, RoPE and activations computed in another order). Quantized weights: a batch step's rows
and a server's rows at different positions are each sequence's own decode step, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from conftest import assert_f32_near, decoded_alone  # noqa: E402
from test_convert_quantize import tiny_checkpoint  # noqa: E402
from test_new_families import gemma3, llama3, phi3, qwen3  # noqa: E402
from tfcli.engine import kvcache  # noqa: E402
from tfcli.engine.fast.arguments import Blocks  # noqa: E402
from tfcli.engine.fast.load import kernels  # noqa: E402
from tfcli.engine.fast.run import fast_executor as executor  # noqa: E402
from tfcli.engine.fast.run.fast_executor import Fast, on_kernels  # noqa: E402
from tfcli.engine.fast.run.kernel_products import running  # noqa: E402
from tfcli.engine.kvcache import BatchCache  # noqa: E402
from tfcli.engine.slots import Slots  # noqa: E402
from tfcli.store import load  # noqa: E402

BUILDERS = {"llama3": lambda f: llama3(f, tied=False), "qwen3": lambda f: qwen3(f, tied=True), "gemma3": lambda f: gemma3(f, tied=True),
            "phi3": lambda f: phi3(f, tied=False), "phi3-longrope": lambda f: phi3(f, tied=True),
            "qwen2": lambda f: tiny_checkpoint(f, "qwen2"),  # Q, K and V biases
            "llama-biases": lambda f: llama3(f, tied=False, attention_bias=True)}  # Q, K, V and the output's biases  # fmt: skip


@pytest.fixture(autouse=True)
def kernels_here():
    if running() is None:
        pytest.skip("compiled kernels unavailable")


@pytest.fixture(scope="module", autouse=True)
def every_model_large():
    """Every model here runs as a large one would be: its passes on the kernels (on_kernels)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(executor, "KERNELS_FROM", 0)
        yield


@pytest.fixture(scope="module", params=list(BUILDERS))
def model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    BUILDERS[request.param](folder)
    m = load(folder).model
    assert on_kernels(m)  # a small float32 model, run as a large one would be (every_model_large)
    return m


@pytest.fixture
def calls(monkeypatch) -> list[int]:
    """The rows of each compiled blocks call."""
    seen: list[int] = []
    real = kernels.decode_blocks
    monkeypatch.setattr(kernels, "decode_blocks", lambda slots, threads=1: seen.append(int(slots[Blocks.T])) or real(slots, threads))
    return seen


def _step_by_step(monkeypatch):
    monkeypatch.setattr(Fast, "blocks", lambda self, *a, **k: None)  # every block as the textbook writes it, on the same products


def _decode(m, ids, prompt: int, workers: int) -> np.ndarray:
    """A prompt pass of `prompt` rows, then one step per token: every position's logits [T, V]."""
    cache = m.new_cache(len(ids) + 1)
    run = Fast(workers)
    first = m.forward(ids[:prompt], cache, all_logits=True, run=run)  # [prompt, V]
    return np.concatenate([first] + [m.forward(ids[t : t + 1], cache, run=run) for t in range(prompt, len(ids))])  # [T, V]


@pytest.mark.parametrize("workers", [1, 2])
def test_compiled_blocks_equal_the_blocks_step_by_step(model, calls, monkeypatch, workers):
    """12 prompt rows, then 28 decode steps (the sliding layers' windows of 7 and 9 crossed, their
    cache slid in a small room): the same logits as the blocks step by step, within float32 roundings."""
    monkeypatch.setattr(kvcache, "FIRST_ROOM", 8)
    monkeypatch.setattr(kvcache, "SLACK", 4)
    ids = np.random.default_rng(5).integers(1, 300, 40)
    compiled = _decode(model, ids, 12, workers)
    assert calls[:2] == [12, 1] and len(calls) == 29  # the prompt and every step ran compiled
    _step_by_step(monkeypatch)
    assert_f32_near(compiled, _decode(model, ids, 12, workers), steps=64)


def test_a_prompt_of_more_rows_than_the_kernels_take_runs_step_by_step(model, calls):
    from tfcli.engine.fast.run.kernel_products import KERNEL_ROWS

    model.forward(np.arange(1, KERNEL_ROWS + 2), model.new_cache(KERNEL_ROWS + 2), run=Fast(2))
    assert calls == []


def test_a_pass_with_hooks_runs_step_by_step(model, calls):
    from tfcli.engine.sites import Hooks

    seen = []
    hooks = Hooks().add("resid_post", lambda x, *_: seen.append(x.shape) or x, len(model.layers) - 1)
    model.forward(np.array([3, 4, 5]), model.new_cache(8), hooks=hooks, run=Fast(2))
    assert calls == [] and seen == [(3, model.config.d_model)]


@pytest.fixture(scope="module", params=["llama3", "gemma3", "phi3"])
def quantized(request, tmp_path_factory):
    from tfcli.engine.quantized import quantize_weights

    folder = tmp_path_factory.mktemp("q-" + request.param)
    BUILDERS[request.param](folder)
    m = load(folder).model
    quantize_weights(m, "q8_0")
    assert on_kernels(m)
    return m


def test_a_batch_step_and_a_servers_step_are_each_sequence_alone_bit_for_bit(quantized, calls):
    """8-bit activations flip at the smallest difference, so this holds only if every row's numbers
    are its own: a BatchCache step (samples of one prompt) and a Slots step (requests at different
    positions, past their windows) against each sequence's own decode step."""
    m, rng = quantized, np.random.default_rng(7)
    prompts = [rng.integers(1, 300, n) for n in (5, 11, 23)]
    nexts = np.array([17, 42, 99])

    def alone(prompt, token):
        return decoded_alone(m, prompt, [token])[0]  # [V]

    caches = []
    for p in prompts:
        caches.append(m.new_cache(32))
        m.forward(p, caches[-1], run=Fast(2))
    calls.clear()
    rows = m.decode_batch(nexts, Slots(caches), Fast(2, batch=True))  # [3, V], rows at positions 5, 11, 23
    assert calls == [3]
    for b in range(3):
        assert np.array_equal(rows[b], alone(prompts[b], nexts[b]))
    shared = m.new_cache(32)
    m.forward(prompts[1], shared, run=Fast(2))
    batch = BatchCache(m.config, 3, 32)
    batch.fill(shared)
    rows = m.decode_batch(nexts, batch, Fast(2, batch=True))  # [3, V], every row at position 11
    for b in range(3):
        assert np.array_equal(rows[b], alone(prompts[1], nexts[b]))


def test_two_threads_decoding_at_once_each_get_their_own_numbers(quantized):
    """A server's batch step and a new request's prompt may run on two threads at once: each
    thread's calls have buffers of their own, so each sequence decodes as it does alone.

    Alone on one worker: these models' steps on two workers are the same bits (held on the first
    text), and a step on two hands half its work to a helper thread, which on a busy machine waits
    for a core (measured: 0.13 s a step of these two-block models on two workers, 1.3 ms on one)."""
    from concurrent.futures import ThreadPoolExecutor

    m = quantized
    texts = [np.random.default_rng(s).integers(1, 300, 100) for s in range(4)]
    alone = [_decode(m, ids, 4, 1) for ids in texts]
    assert np.array_equal(alone[0], _decode(m, texts[0], 4, 2)), "one worker and two differ: compare with two"
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda ids: _decode(m, ids, 4, 2), texts))
    for a, b in zip(alone, together):
        assert np.array_equal(a, b)


def test_prompts_that_share_a_pass_are_each_their_pass_alone_bit_for_bit(quantized, calls):
    """A server's requests that arrive together run their prompts in one pass (generate.prefill_together,
    slots.Prompts: each row attends through its own sequence's cache): each prompt's logits, and the
    decode steps after it, are its own pass's, bit for bit; the sliding layers' prompts are past their windows."""
    from tfcli.engine.generate import Session, prefill_together

    m, rng = quantized, np.random.default_rng(11)
    prompts = [list(rng.integers(1, 300, n)) for n in (5, 11, 23)]
    sessions = [Session(m, capacity=32, workers=2) for _ in prompts]
    calls.clear()
    logits = prefill_together(sessions, prompts)  # [3, V]
    assert calls == [5 + 11 + 23] and logits.shape == (3, m.config.vocab_size)
    for b, p in enumerate(prompts):
        cache = m.new_cache(32, fast=True)  # a Session's: float16 for a quantized model
        assert np.array_equal(logits[b], m.forward(np.array(p), cache, run=Fast(2))[-1])
        assert sessions[b].cache.length == len(p) and sessions[b].tokens == p
        assert np.array_equal(sessions[b].step(7), m.forward(np.array([7]), cache, run=Fast(2))[-1])
    assert prefill_together(sessions[:2], [prompts[0], list(rng.integers(1, 300, 44))]) is None  # 49 rows: more than the kernels take
