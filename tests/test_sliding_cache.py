"""A sliding layer's KV cache holds only what its queries can still see (engine/kvcache.py).

Gemma 3's sliding layers and Phi-3's window attend to the last W positions only; their cache
drops the older ones when it runs out of room. Every way a cache is used must give the logits of
a cache that keeps everything: token by token, after a rollback, copied for n choices, filled into
a batch, and with a prompt pass split between threads. The room is made small here (FIRST_ROOM,
SLACK) so that a 100-token text slides many times.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from conftest import assert_f32_near  # noqa: E402
from test_new_families import gemma3, phi3  # noqa: E402
from tfcli.engine import kvcache  # noqa: E402
from tfcli.engine.batch import BatchCache  # noqa: E402
from tfcli.engine.fast.run.fast_executor import Fast  # noqa: E402
from tfcli.engine.generate import Session  # noqa: E402
from tfcli.store import load  # noqa: E402
from tfcli.engine.fast import FAST  # noqa: E402

N = 110  # tokens: the 128-position tiny models, windows of 7 and 9


@pytest.fixture(scope="module", params=["gemma3", "phi3"])
def model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    (gemma3(folder, tied=True) if request.param == "gemma3" else phi3(folder, tied=False))
    return load(folder).model


@pytest.fixture
def small_room(monkeypatch):
    monkeypatch.setattr(kvcache, "FIRST_ROOM", 8)
    monkeypatch.setattr(kvcache, "SLACK", 4)


def _ids(seed: int = 0, n: int = N) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 300, n)


def _whole(model, ids) -> np.ndarray:
    """Every position's logits from one pass over an empty cache large enough to keep all [T, V]."""
    return model.forward(ids, model.new_cache(len(ids) + 1), all_logits=True, run=FAST)


def test_token_by_token_equals_one_pass_while_the_sliding_layers_hold_little(model, small_room):
    ids = _ids()
    want = _whole(model, ids)
    cache = model.new_cache(N)
    got = [model.forward(ids[:3], cache, all_logits=True, run=FAST)] + [model.forward(ids[t : t + 1], cache, run=FAST) for t in range(3, N)]
    assert_f32_near(np.concatenate(got), want)
    assert cache.n_sliding and cache.off > 0  # the sliding layers dropped positions ...
    assert cache.ks.shape[2] <= cache.window + 2 * kvcache.SLACK < N  # ... and hold about a window
    assert cache.room >= N or cache.n_sliding == model.config.n_layer  # the global layers keep everything


def test_prompt_passes_in_parts_slide_too(model, small_room):
    """Passes of 20 tokens after the first: each pass moves the window further."""
    ids = _ids(1)
    want = _whole(model, ids)
    cache = model.new_cache(N)
    got = [model.forward(ids[a : a + 20], cache, all_logits=True, run=FAST) for a in range(0, N, 20)]
    assert_f32_near(np.concatenate(got), want)
    assert cache.off > 0


def test_a_rollback_within_the_slack_and_a_reuse_beyond_it(model, small_room):
    """Lookup decoding rolls a few tokens back; a new prompt sharing only an old prefix starts again."""
    ids = _ids(2)
    s = Session(model, capacity=N)
    s.prefill(list(ids[:80]))
    for t in ids[80:90]:
        s.step(int(t))
    s.rewind(87)  # three tokens back: within SLACK
    logits = s.step(int(ids[87]))
    assert_f32_near(logits, _whole(model, ids[:88])[-1])
    other = list(ids[:20]) + [5, 6, 7]  # shares 20 tokens, long dropped by the sliding layers
    logits, computed = s.prefill(other)
    assert computed == len(other)  # all of it again: the sliding layers no longer hold position 14..19
    assert_f32_near(logits, _whole(model, np.array(other))[-1])


def test_a_copied_cache_and_a_batch_filled_from_it_go_on_alike(model, small_room):
    ids = _ids(3)
    cache = model.new_cache(N)
    for a in range(0, 90, 30):  # passes after the first drop what the windows no longer see
        model.forward(ids[a : a + 30], cache, run=FAST)
    assert cache.off > 0
    copy = cache.copy()
    batch = BatchCache(model.config, 2, N)
    batch.fill(cache)
    want = _whole(model, ids[:95])[90:]  # [5, V]
    for t in range(90, 95):
        a = model.forward(ids[t : t + 1], cache, run=FAST)[-1]
        b = model.forward(ids[t : t + 1], copy, run=FAST)[-1]
        rows = model.decode_batch(np.array([ids[t], ids[t]]), batch, run=FAST)
        for got in (a, b, rows[0], rows[1]):
            assert_f32_near(got, want[t - 90])


def test_a_prompt_pass_on_threads_after_the_cache_slid(model, small_room):
    ids = _ids(4)
    cache = model.new_cache(N)
    for a in range(0, 60, 20):
        model.forward(ids[a : a + 20], cache, run=FAST)
    assert cache.off > 0
    got = model.forward(ids[60:], cache, all_logits=True, run=Fast(3))  # parts on threads
    assert_f32_near(got, _whole(model, ids)[60:])


def test_attention_weights_of_a_slid_layer_cover_every_position(model, small_room):
    """A recorder asks for weights: the dropped positions get zero weight, the rows still sum to 1."""
    from tfcli.engine.inspect import Recorder

    ids = _ids(5)
    cache = model.new_cache(N)
    for a in range(0, 100, 25):
        model.forward(ids[a : a + 25], cache, run=FAST)
    assert cache.off > 0
    rec = Recorder(attention=True)
    model.forward(ids[100:104], cache, hooks=rec, run=FAST)
    full = Recorder(attention=True)
    model.forward(ids[:104], model.new_cache(N), hooks=full, run=FAST)
    for layer in range(model.config.n_layer):
        assert rec.attn[layer].shape[-1] == 104
        assert_f32_near(rec.attn[layer], full.attn[layer][:, 100:], steps=64)


def test_a_long_cache_of_a_sliding_model_is_counted_as_what_it_holds(model):
    cfg = model.config
    per_position = 2 * cfg.n_kv_head * cfg.head_dim * 4
    global_layers = sum(1 for w in cfg.windows if not w)
    n = 100_000
    assert cfg.kv_cache_bytes(n) == per_position * (global_layers * n + (cfg.n_layer - global_layers) * (cfg.windows[0 if cfg.windows[0] else 1] + 1024))


@pytest.mark.parametrize("family", ["gemma3", "phi3"])
def test_a_few_row_pass_on_the_kernels_is_its_decode_steps_bit_for_bit(family, tmp_path):
    """On the kernels (a quantized model), a pass of a few rows (a lookup check) runs each row's
    attention as a decode step's call over the keys that row's window sees (in the compiled blocks,
    fast/blocks.py, or Fast.attention): each row's logits are those of the decode step at its
    position, bit for bit, here across the sliding window."""
    from tfcli.engine.fast.run.fast_executor import on_kernels
    from tfcli.engine.fast.run.kernel_products import running
    from tfcli.engine.quantized import quantize_weights

    if running() is None:
        pytest.skip("compiled kernels unavailable")
    (gemma3(tmp_path, tied=True) if family == "gemma3" else phi3(tmp_path, tied=False))
    m = load(tmp_path).model
    quantize_weights(m, "q8_0")
    assert on_kernels(m)
    ids = _ids(3, 30)
    steps = m.new_cache(40)
    m.forward(ids[:20], steps, run=FAST)
    alone = np.concatenate([m.forward(ids[t : t + 1], steps, run=FAST) for t in range(20, 30)])  # [10, V]
    few = m.new_cache(40)
    m.forward(ids[:20], few, run=FAST)
    together = m.forward(ids[20:30], few, all_logits=True, run=FAST)  # [10, V]: 10 rows crossing windows of 7 and 9
    assert np.array_equal(together, alone)
