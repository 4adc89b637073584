"""A prompt pass split into parts on several threads (fast.executor.Parts) must give the
logits and the cache of one pass, and must stop every part, without hanging, on an error or Ctrl-C."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tfcli.engine import threads
from tfcli.store import load
from tfcli.engine.fast.run import fast_executor as model_module
from tfcli.engine.fast.run.fast_executor import Fast, split_prompt

from conftest import DATA, assert_f32_near, reference
from tfcli.engine.fast import FAST


@pytest.fixture(params=["tiny-gpt2", "tiny-llama"])
def net(request):
    return load(DATA / request.param).model


@pytest.fixture
def three_threads(monkeypatch):
    """Three threads, and parts as short as 8 tokens, so that the 70-token prompt is split in three."""
    from threadpoolctl import threadpool_info

    before = next((lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"), 1)
    threads.set_blas_threads(3)
    monkeypatch.setattr(model_module, "PART_MIN_TOKENS", 8)
    yield 3  # the workers to pass to forward
    threads.set_blas_threads(before)


def _threads_used(net, monkeypatch) -> set[str]:
    """Record the thread each layer of each part runs on."""
    names: set[str] = set()
    block = net.block

    def recording_block(*args):
        names.add(threading.current_thread().name)
        return block(*args)

    monkeypatch.setattr(net, "block", recording_block)
    return names


def test_split_prompt_balances_the_work(monkeypatch):
    cfg = load(DATA / "tiny-llama").config
    monkeypatch.setattr(model_module, "PART_MIN_TOKENS", 8)
    parts = split_prompt(cfg, 0, 70, 3)
    assert len(parts) == 3 and sum(parts) == 70
    assert parts[0] > parts[1] > parts[2]  # later tokens attend to more positions
    assert split_prompt(cfg, 0, 70, 1) == [70]
    assert split_prompt(cfg, 0, 12, 3) == [12]  # too short for two parts of 8
    monkeypatch.setattr(model_module, "PART_MIN_TOKENS", 160)
    assert split_prompt(cfg, 0, 319, 2) == [319]
    assert len(split_prompt(cfg, 0, 320, 2)) == 2


@pytest.mark.parametrize("start", [0, 5])
def test_parts_on_threads_equal_one_pass(net, three_threads, monkeypatch, start):
    ids = reference("tiny-gpt2")["ids_long"]  # 70 tokens
    one = net.new_cache(len(ids))
    net.forward(ids[:start], one, run=FAST) if start else None
    expect = net.forward(ids[start:], one, all_logits=True, run=FAST)  # [T, V], one part (workers=1)
    split = net.new_cache(len(ids))
    net.forward(ids[:start], split, run=FAST) if start else None
    used = _threads_used(net, monkeypatch)
    got = net.forward(ids[start:], split, all_logits=True, run=Fast(three_threads))  # [T, V]
    assert len(used) == 3  # this thread and two of the pool's
    assert split.length == one.length == len(ids)
    assert_f32_near(got, expect)
    assert_f32_near(split.k, one.k)
    assert_f32_near(split.v, one.v)


def _failing_block(net, monkeypatch, error: BaseException, on_pool: bool):
    """A block that raises `error` at layer 1, on a pool thread or on the calling one."""
    block = net.block

    def block_that_fails(x, layer, at):
        if at.index == 1 and threading.current_thread().name.startswith("tfcli-part") == on_pool:
            raise error
        return block(x, layer, at)

    monkeypatch.setattr(net, "block", block_that_fails)


def _forward_in_thread(net, ids, cache, workers: int) -> BaseException | None:
    """Run a forward pass on a thread of its own; fail the test rather than hang if it never ends."""
    outcome: list[BaseException | None] = []

    def run():
        try:
            net.forward(ids, cache, run=Fast(workers))
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt is what is tested
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "a part of the prompt pass never finished"
    return outcome[0]


@pytest.mark.parametrize(
    "error, on_pool",
    [(RuntimeError("a later part failed"), True), (KeyboardInterrupt(), False), (MemoryError(), False)],
    ids=["error in a later part", "Ctrl-C in the first part", "error in the first part"],
)
def test_a_failing_part_stops_the_others(net, three_threads, monkeypatch, error, on_pool):
    ids = reference("tiny-gpt2")["ids_long"]
    cache = net.new_cache(len(ids))
    with monkeypatch.context() as m:
        _failing_block(net, m, error, on_pool)
        raised = _forward_in_thread(net, ids, cache, three_threads)
    assert type(raised) is type(error)
    assert cache.length == 0  # nothing half-done counts as cached
    # The cache and the pool's threads are usable again: the same pass now equals one pass.
    got = net.forward(ids, cache, run=Fast(three_threads))
    expect = net.forward(ids, net.new_cache(len(ids)), run=FAST)
    assert_f32_near(got, expect)
