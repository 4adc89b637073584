"""tfcli geometry: the exact distribution of the angle between random directions (closed forms for
D = 3 and 4, scipy's incomplete beta function for the tails), the sampled statistics against it
within their sampling error for the fixed seed, the promises' arithmetic, and the command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import TINY_GPT2
from tfcli.analysis import geometry as g


@pytest.mark.parametrize("band", [0.5, 1.0, 5.0, 30.0])
def test_exact_distribution_has_closed_forms_in_3_and_4_dimensions(band):
    b = math.radians(band)
    assert 1 - g.exact_outside(3, band) == pytest.approx(math.sin(b), rel=1e-8)  # the cosine is uniform on [-1, 1] (Archimedes)
    assert 1 - g.exact_outside(4, band) == pytest.approx((2 * b + math.sin(2 * b)) / math.pi, rel=1e-8)  # density ∝ sin²θ


@pytest.mark.parametrize("d", [3, 10, 100, 576, 4096, 12288])
@pytest.mark.parametrize("band", [1.0, 5.0])
def test_exact_tails_equal_the_incomplete_beta_function(d, band):
    import scipy.special as special  # in the test extra: the reference, never skipped
    # cos² of the angle between random directions is Beta(1/2, (D-1)/2)
    want = special.betaincc(0.5, (d - 1) / 2, math.sin(math.radians(band)) ** 2)
    assert g.exact_outside(d, band) == pytest.approx(want, rel=1e-4)


def test_exact_density_sums_to_one_and_peaks_at_90():
    for d in (3, 50, 12288):
        h = g.exact_density(d, g.HIST_EDGES)
        assert h.sum() == pytest.approx(1.0, abs=1e-9)
        assert g.HIST_EDGES[h.argmax()] + 1.5 == 90.0


def test_samples_agree_with_the_distribution_within_sampling_error():
    """For uniformly random directions, the squared cosines (and band indicators) of two pairs
    that share a vector are uncorrelated (given the shared vector, the other two are independent
    and rotation makes the shared one irrelevant), so the standard errors are those of P
    independent pairs. Tolerance: 5 standard errors."""
    dims = (3, 10, 100, 1000, 12288)
    for s in g.random_stats(dims, n=600, seed=0):
        d, p = s.d, s.pairs
        assert p == 600 * 599 // 2
        m2 = s.std_cos**2 + s.mean_cos**2  # the mean of c²; E[c²] = 1/D exactly
        var_c2 = 3 / (d * (d + 2)) - 1 / d**2  # E[c⁴] = 3 / (D (D+2)) on the sphere
        assert abs(m2 - 1 / d) <= 5 * math.sqrt(var_c2 / p), d
        assert abs(s.mean_cos) <= 5 * math.sqrt(1 / d / p), d
        assert abs(s.std_cos * math.sqrt(d) - 1) < 0.02, d  # the cosine's sd ≈ 1/√D
        for band in g.BANDS:
            q = s.exact_within[band]
            assert abs(s.within[band] - q) <= 5 * math.sqrt(max(q * (1 - q), 1e-12) / p) + 1e-12, (d, band)
        want = g.exact_density(d, g.HIST_EDGES)
        se = np.sqrt(np.maximum(want * (1 - want), 1e-12) / p)
        assert (np.abs(s.histogram - want) <= 5 * se + 1e-9).all(), d


def test_fixed_seed_gives_fixed_figures():
    a = g.random_stats((5, 50), n=50, seed=3)
    b = g.random_stats((5, 50), n=50, seed=3)
    assert [x.mean_angle for x in a] == [x.mean_angle for x in b]
    assert [x.mean_angle for x in a] != [x.mean_angle for x in g.random_stats((5, 50), n=50, seed=4)]


def test_embedding_stats_by_brute_force():
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((40, 6)) + 2.0  # a shared direction: cosines well above 0
    raw, centred = g.embedding_stats(emb, n=40, seed=0)
    u = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    c = (u @ u.T)[np.triu_indices(40, k=1)]
    assert raw.mean_cos == pytest.approx(c.mean()) and raw.mean_cos > 0.5
    x = emb - emb.mean(axis=0)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    assert centred.mean_cos == pytest.approx((u @ u.T)[np.triu_indices(40, k=1)].mean())
    assert raw.exact_within is None


def test_promises_arithmetic():
    assert g.pairs_before_a_miss(1.0) == pytest.approx(2.0)  # two vectors make the first pair
    assert g.pairs_before_a_miss(0.0) == math.inf
    n = g.pairs_before_a_miss(1e-6)
    assert n * (n - 1) / 2 * 1e-6 == pytest.approx(1.0)
    eps = math.sin(math.radians(5))
    assert g.log10_union_bound(12288, 5) == pytest.approx(12288 * eps**2 / 4 / math.log(10))
    k = g.jl_dimensions(1e6, 0.1)
    assert k == math.ceil(4 * math.log(1e6) / (0.005 - 0.001 / 3))
    assert g.log10_jl_points(k, 0.1) >= 6 > g.log10_jl_points(k - 1, 0.1) - 1e-9


def test_command(cli, tmp_path):
    pytest.importorskip("PIL")
    r = cli("geometry", "-m", TINY_GPT2, "--dims", "3,64,12288", "--sample", "100", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["d_model"] == 64 and [row["d"] for row in data["rows"]] == [3, 64, 12288, 64, 64]
    assert data["rows"][0]["pairs"] == 4950 and data["rows"][-1]["exact_within"] is None
    assert {p["d"] for p in data["promises"]} == {64, 12288}
    r = cli("geometry", "-m", TINY_GPT2, "--sample", "60", "--png", tmp_path / "g.png", "--svg", tmp_path / "g.svg")
    assert r.exit_code == 0, r.stderr
    assert "Johnson–Lindenstrauss" in r.stdout and "1/√D" in r.stdout and "\x1b[" not in r.stdout
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG" and "<svg" in (tmp_path / "g.svg").read_text()
    r = cli("geometry", "-m", TINY_GPT2, "--sample", "60", "--lang", "zh")
    assert "联合界" in r.stdout


@pytest.mark.parametrize("args, message", [(["--dims", "3,x"], "--dims"), (["--dims", "1"], "between 2"), (["--sample", "1"], "--sample")])
def test_bad_input(cli, args, message):
    r = cli("geometry", "-m", TINY_GPT2, *args)
    assert r.exit_code == 2 and message in r.stderr and r.stderr.strip().count("\n") == 0


def test_a_long_run_says_how_long_before_it_starts(cli, monkeypatch):
    """A run estimated over a few seconds says so on stderr, with the figures, before it starts; a
    short one says nothing (the estimate's rates are lowered here so that a short run looks long)."""
    import tfcli.cli.geometry as geometry_cli

    r = cli("geometry", "--dims", "100", "--sample", "100")
    assert r.exit_code == 0 and "about" not in r.stderr, r.stderr
    monkeypatch.setattr(geometry_cli, "MACS_PER_S", 1e4)
    r = cli("geometry", "--dims", "100", "--sample", "100")
    assert r.exit_code == 0 and "about 50 s: 100 vectors in each of 1 dimension up to 100" in r.stderr, r.stderr


def test_the_jl_line_for_fewer_than_2_points_says_it_promises_nothing(cli):
    r = cli("geometry", "--dims", "3")  # the shipped shakespeare: 256 dimensions, 10^0.1 points at 1 ± 0.1
    assert r.exit_code == 0, r.stderr
    flat = " ".join(r.stdout.split())
    assert "the bound holds for fewer than 2 points: it promises nothing here" in flat
    assert "any 10^0.1 points" not in flat and "any 10^0.5 points map into 256 dimensions" in flat
    assert "这个界保证的点少于2个" in "".join(cli("geometry", "--dims", "3", "--lang", "zh").stdout.split())
