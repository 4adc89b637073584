"""The compiled candidates of a batch step's draws (engine/fast/top.py, top_job.py): sampling.top_k_ids
of several rows at once on the pool's threads, the same ids on every row, and None where a value is
not finite (the sampler's own check then names it). End to end, tests/test_serve.py's requests
sampled together (these ids) and alone (NumPy's) draw the same tokens."""

from __future__ import annotations

import numpy as np
import pytest

from tfcli.engine.fast.run.kernel_products import running
from tfcli.engine.sampling import top_k_ids


@pytest.fixture(autouse=True)
def kernels_here():
    if running() is None:
        pytest.skip("compiled kernels unavailable")


def rows_with_edges(rng) -> list[np.ndarray]:
    v = 49_152
    normal = [(rng.standard_normal(v) * 3).astype(np.float32) for _ in range(3)]
    ties = np.round(normal[0])  # a few dozen distinct values: ties at the k-th
    zeros = np.round(normal[1])
    zeros[::7] = -0.0  # -0.0 and 0.0 are equal
    tiny = normal[2].copy()
    tiny[::3] = np.float32(1e-45)  # subnormals
    return normal + [ties, zeros, tiny, np.zeros(v, np.float32), np.full(v, -1e30, np.float32), normal[0][:1000].copy(), normal[1][:1500].copy(), normal[2][:100].copy()]


@pytest.mark.parametrize("k", [1, 5, 40, 200, 1024])
def test_each_rows_ids_are_top_k_ids(k):
    from tfcli.engine.fast.run.top import top_k_rows

    rows = rows_with_edges(np.random.default_rng(3))
    for same_length in ([r for r in rows if len(r) == len(rows[0])], *[[r] for r in rows if len(r) != len(rows[0])]):
        got = top_k_rows(same_length, [k] * len(same_length), 2)
        for row, ids in zip(same_length, got):
            if ids is None:  # k past the row, or more values reach the bound than the job keeps (ties): top_k_ids runs
                assert k > len(row) or k >= 200 or len(np.unique(row)) < 100
                continue
            np.testing.assert_array_equal(ids, top_k_ids(row, k))
    assert sum(ids is not None for ids in top_k_rows(rows[:6], [40] * 6, 2)) == 6


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_row_that_is_not_finite_gets_none_and_the_others_their_ids(bad):
    from tfcli.engine.fast.run.top import top_k_rows

    rng = np.random.default_rng(5)
    rows = [(rng.standard_normal(49_152) * 3).astype(np.float32) for _ in range(3)]
    for at in (0, 777, 49_151):
        broken = rows[1].copy()
        broken[at] = bad
        got = top_k_rows([rows[0], broken, rows[2]], [40, 40, 40], 2)
        assert got[1] is None
        np.testing.assert_array_equal(got[0], top_k_ids(rows[0], 40))
        np.testing.assert_array_equal(got[2], top_k_ids(rows[2], 40))
