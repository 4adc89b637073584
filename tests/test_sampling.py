"""The sampler: each knob does what it says, and a seed fixes the output."""

from __future__ import annotations

import numpy as np
import pytest

from tfcli.engine.errors import UsageError
from tfcli.engine.sampling import Sampler, SamplingParams

LOGITS = np.array([4.0, 3.0, 2.0, 1.0, 0.0, -1.0], dtype=np.float32)


def probs(**kw) -> np.ndarray:
    base = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    base.update(kw)
    return Sampler(SamplingParams(**base)).final_probs(LOGITS, [])


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def test_no_knobs_is_softmax():
    np.testing.assert_allclose(probs(), softmax(LOGITS), rtol=1e-6)


def test_temperature_zero_is_argmax():
    rng = np.random.default_rng(0)
    for _ in range(20):
        logits = rng.normal(size=50).astype(np.float32)
        s = Sampler(SamplingParams(temperature=0, seed=int(rng.integers(1000))))
        assert s.sample(logits, []) == int(np.argmax(logits))


def test_low_temperature_sharpens_high_flattens():
    cold, warm, hot = probs(temperature=0.25), probs(temperature=1.0), probs(temperature=4.0)
    assert cold[0] > warm[0] > hot[0]
    assert cold[0] > 0.98  # winner takes (almost) all
    np.testing.assert_allclose(cold, softmax(LOGITS / 0.25), rtol=1e-5)


def test_top_k_keeps_k():
    p = probs(top_k=2)
    assert np.count_nonzero(p) == 2 and p[0] > p[1] > 0
    np.testing.assert_allclose(p[:2], softmax(LOGITS[:2]), rtol=1e-6)


def test_top_p_keeps_smallest_set_reaching_p():
    full = softmax(LOGITS)  # [0.636, 0.234, 0.086, ...]
    p = probs(top_p=0.8)  # 0.636 < 0.8 <= 0.636 + 0.234: two tokens
    assert np.count_nonzero(p) == 2
    np.testing.assert_allclose(p[:2], full[:2] / full[:2].sum(), rtol=1e-6)
    assert np.count_nonzero(probs(top_p=0.5)) == 1  # the top token alone already reaches 0.5


def test_min_p_drops_unlikely_tokens():
    full = softmax(LOGITS)
    p = probs(min_p=0.1)  # keep tokens with p >= 0.1 * 0.636
    assert np.count_nonzero(p) == np.count_nonzero(full >= 0.1 * full[0]) == 3


def test_repetition_penalty_lowers_seen_tokens():
    s = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=2.0))
    p = s.final_probs(LOGITS, history=[0, 5])
    # token 0's logit 4 -> 2, token 5's -1 -> -2 (negative logits are multiplied)
    expect = softmax(np.array([2.0, 3.0, 2.0, 1.0, 0.0, -2.0]))
    np.testing.assert_allclose(p, expect, rtol=1e-6)


def test_same_seed_same_tokens_other_seed_other_tokens():
    rng = np.random.default_rng(1)
    logits = [rng.normal(size=100).astype(np.float32) for _ in range(50)]

    def run(seed):
        s = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed))
        return [s.sample(x, []) for x in logits]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_sampling_follows_the_distribution():
    s = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0))
    counts = np.bincount([s.sample(LOGITS, []) for _ in range(20000)], minlength=6) / 20000
    np.testing.assert_allclose(counts, softmax(LOGITS), atol=0.015)


def test_choose_reports_before_and_after():
    s = Sampler(SamplingParams(temperature=0.5, top_k=3, top_p=1.0, min_p=0.0, seed=0))
    c = s.choose(LOGITS, [], top_n=4)
    assert list(c.top_ids) == [0, 1, 2, 3]
    np.testing.assert_allclose(c.p_model, softmax(LOGITS)[:4], rtol=1e-6)
    assert c.p_final[3] == 0 and c.kept == 3
    assert c.p_final[0] > c.p_model[0]  # temperature 0.5 sharpens


@pytest.mark.parametrize(
    "kw",
    [
        dict(temperature=-0.1),
        dict(temperature=float("nan")),
        dict(top_k=-1),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(min_p=1.0),
        dict(min_p=-0.1),
        dict(repetition_penalty=0.0),
        dict(seed=-1),
    ],
)
def test_out_of_range_values_are_refused(kw):
    with pytest.raises(UsageError):
        Sampler(SamplingParams(**kw))


def _dense_reference(logits, temperature, top_k, top_p, min_p):
    """The whole-vocabulary pipeline of transformers' logits processors, written plainly."""
    z = logits.astype(np.float64) / temperature
    if top_k:
        z[z < np.sort(z)[-top_k]] = -np.inf
    p = softmax(z)
    if top_p < 1:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        p[order[(cum - p[order]) >= top_p]] = 0
    if min_p:
        p[p < min_p * p.max()] = 0
    return p / p.sum()


@pytest.mark.parametrize("top_k, top_p, min_p", [(0, 0.9, 0), (40, 0.95, 0.05), (0, 1.0, 0.1), (5, 1.0, 0), (0, 0.5, 0), (1000, 0.99, 0)])
def test_candidate_pipeline_equals_the_dense_one(top_k, top_p, min_p):
    rng = np.random.default_rng(3)
    for scale in (0.5, 3.0):
        logits = (rng.standard_normal(5000) * scale).astype(np.float32)
        s = Sampler(SamplingParams(temperature=0.7, top_k=top_k, top_p=top_p, min_p=min_p))
        np.testing.assert_allclose(s.final_probs(logits, []), _dense_reference(logits, 0.7, top_k, top_p, min_p), atol=1e-6)


def test_settings_merge_flags_then_model_then_defaults():
    """One rule for generate and chat: a flag given wins, then generation_config.json, then the defaults."""
    gen = {"temperature": 0.6, "top_p": 0.9, "top_k": True, "repetition_penalty": "high"}  # bools and strings are not numbers
    p = SamplingParams.merged(gen, temperature=None, top_k=None, top_p=0.5, seed=3)
    assert (p.temperature, p.top_p, p.top_k, p.repetition_penalty, p.seed) == (0.6, 0.5, 40, 1.0, 3)
    assert SamplingParams.merged({"do_sample": False, "temperature": 0.6}).temperature == 0.0  # greedy, as its authors asked
    assert SamplingParams.merged({"do_sample": False}, temperature=0.7).temperature == 0.7  # unless the flag says otherwise
    assert SamplingParams.merged({}) == SamplingParams()


@pytest.mark.parametrize("k", [1, 2, 40, 100, 1000, 12287, 49151, 49152])
def test_top_k_ids_are_those_at_least_the_partition_value(k):
    """The block-maximum bound in top_k_ids keeps exactly the values at least np.partition's k-th
    largest, ties and -inf included, on logits shaped like a model's (a few high, a long tail) and
    on flat ones."""
    from tfcli.engine.sampling import top_k_ids

    rng = np.random.default_rng(k)
    V = 49152
    peaked = (rng.standard_normal(V) * 2 - np.arange(V) % 7).astype(np.float32)
    peaked[rng.integers(0, V, 50)] = 12.5  # many ties at the top
    tied = np.round(rng.standard_normal(V)).astype(np.float32)  # a handful of values, each many times
    blocked = np.full(V, -np.inf, dtype=np.float32)
    blocked[:300] = rng.standard_normal(300)  # all the finite values in the first blocks
    for x in (peaked, tied, blocked, peaked[::-1].copy(), peaked[:1000].copy()):
        if k <= len(x):
            assert np.array_equal(top_k_ids(x, k), np.flatnonzero(x >= np.partition(x, len(x) - k)[len(x) - k]))
