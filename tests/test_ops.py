"""The fast attention equals the plain one that reads like the formula."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import EPS32, assert_f32_near
from tfcli.engine import ops
from tfcli.engine.fast.run import dense_ops as fast_ops


@pytest.mark.parametrize("n_kv, group, t_len, start", [(2, 1, 5, 0), (3, 3, 7, 4), (1, 4, 1, 9), (2, 2, 300, 20)])
def test_fast_attention_equals_reference(n_kv, group, t_len, start):
    """Grouped heads, cached positions, one decode query, and a prompt long enough for query blocks."""
    rng = np.random.default_rng(0)
    dh, s_len = 8, start + t_len
    q = rng.standard_normal((n_kv, group, t_len, dh), dtype=np.float32)  # [Hkv, G, T, Dh]
    k = rng.standard_normal((n_kv, s_len, dh), dtype=np.float32)  # [Hkv, S, Dh]
    v = rng.standard_normal((n_kv, s_len, dh), dtype=np.float32)  # [Hkv, S, Dh]
    out, weights = fast_ops.attention(q, k.transpose(0, 2, 1).copy(), v, start, return_weights=True)
    # The reference takes one key/value head per query head: repeat each for its group.
    ref_out, ref_w = ops.reference_attention(
        q.reshape(n_kv * group, t_len, dh), np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    )  # [H, T, Dh], [H, T, S]
    assert_f32_near(out.reshape(n_kv * group, t_len, dh), ref_out)
    assert_f32_near(weights.reshape(n_kv * group, t_len, s_len), ref_w, steps=8)  # weights <= 1: 8 steps of 1.0
    future = np.arange(s_len)[None, :] > np.arange(start, s_len)[:, None]  # [T, S]
    assert (ref_w[:, future] == 0).all() and np.allclose(ref_w.sum(-1), 1, rtol=0, atol=8 * EPS32)


def test_reference_attention_by_hand():
    """Two positions, one head: the second query attends to both keys by softmax of q.k/sqrt(d)."""
    q = np.array([[[1.0, 0.0], [0.0, 2.0]]], dtype=np.float32)  # [1, 2, 2]
    k = np.array([[[1.0, 0.0], [0.0, 1.0]]], dtype=np.float32)
    v = np.array([[[1.0, 2.0], [3.0, 4.0]]], dtype=np.float32)
    out, w = ops.reference_attention(q, k, v)
    s = np.array([0.0, 2.0]) / np.sqrt(2)
    p = np.exp(s) / np.exp(s).sum()
    assert_f32_near(w[0], [[1, 0], p], steps=8)
    assert_f32_near(out[0, 1], p @ v[0], steps=8)


@pytest.mark.parametrize("out, n_in", [(3072, 576), (45, 64), (1000, 96), (7, 33)])
def test_each_row_is_each_row_alone_to_the_bit(out, n_in):
    """fast/ops.py each_row: row t of the product is exactly the one-row product x[t] @ rows.T, with and
    without a helper thread, whole blocks or not (what makes a batch step batch-invariant)."""
    from tfcli.engine.threads import new_helper

    rng = np.random.default_rng(out)
    rows = rng.standard_normal((out, n_in), dtype=np.float32)  # [out, in], as stored
    x = rng.standard_normal((5, n_in), dtype=np.float32)  # [T, in]
    alone = np.concatenate([x[t : t + 1] @ rows.T for t in range(5)])  # [T, out]: how one sequence's step computes it
    for pool in (None, new_helper()):
        y = fast_ops.each_row(x, rows, pool)
        assert y.shape == (5, out) and y.flags.c_contiguous
        np.testing.assert_array_equal(y, alone)


def test_silu_of_a_large_negative_is_its_limit_without_a_warning():
    """e^-x overflows float32 below x = -88.7; x / inf is SiLU's limit (-0.0) and nothing is printed."""
    import warnings

    from tfcli.engine.ops import silu

    x = np.array([-1000.0, -100.0, -88.0, 0.0, 3.0, 100.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = silu(x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64)))
    # float32 terms: a few units in the last place, and below its smallest normal (1.2e-38) the limit's 0
    np.testing.assert_allclose(got, want, rtol=4 * EPS32, atol=np.finfo(np.float32).tiny)
    assert np.signbit(got[0]) and got[0] == 0.0
