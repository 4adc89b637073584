"""Near-orthogonality in high dimensions, computed: the angles between random unit vectors, the
exact distribution they follow, what the Johnson–Lindenstrauss lemma promises, and the same
statistics for a model's token vectors. Pure NumPy, no I/O; a fixed seed gives fixed figures.

For two independent uniformly random directions in D dimensions, the angle θ between them has
density ∝ sin^(D-2) θ on [0, π], and the cosine has mean 0 and variance exactly 1/D (E[c²] = 1/D
by symmetry: the D squared coordinates of a unit vector sum to 1). So the angles crowd around 90°
with a spread of about 1/√D radians.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DIMS = (3, 10, 100, 1_000, 4_096, 12_288)  # 12,288: GPT-3's width
SAMPLE = 600  # vectors per dimension: 179,700 pairs
BANDS = (1.0, 5.0)  # degrees either side of 90°


def random_units(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """[n, d] directions uniform on the sphere: Gaussian vectors scaled to length 1."""
    x = rng.standard_normal((n, d))  # [n, d]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def pair_cosines(units: np.ndarray) -> np.ndarray:
    """[n, d] unit rows -> the cosines of all n(n-1)/2 distinct pairs."""
    c = units @ units.T  # [n, d] @ [d, n] -> [n, n]
    return np.clip(c[np.triu_indices(len(units), k=1)], -1.0, 1.0)


def angles_degrees(cosines: np.ndarray) -> np.ndarray:
    return np.degrees(np.arccos(np.clip(cosines, -1.0, 1.0)))


# --- the exact distribution -------------------------------------------------------------------

_GRID = 200_001  # points on [0, π/2]: a step of 0.00045°, fine for D = 12,288's spread of 0.5° (and its tails)


def _log_density(d: int, theta: np.ndarray) -> np.ndarray:
    if d == 2:  # sin^0 θ = 1 everywhere, θ = 0 included (0 x log 0 would be NaN): angles are uniform
        return np.zeros_like(theta)
    with np.errstate(divide="ignore"):
        return (d - 2) * np.log(np.sin(theta))


def _trapz(y: np.ndarray, x: np.ndarray) -> float:
    return float(((y[1:] + y[:-1]) / 2 * np.diff(x)).sum())


def exact_outside(d: int, band_degrees: float) -> float:
    """P(|θ - 90°| > band) for two random directions in d dimensions, by integrating the density
    ∝ sin^(d-2) θ in log space, and the tail on its own grid (1 - inside would lose a tail of
    1e-20 to rounding)."""
    if d < 2:
        raise ValueError("d must be at least 2")
    edge = math.pi / 2 - math.radians(band_degrees)
    if edge <= 0:
        return 0.0
    theta = np.linspace(0.0, math.pi / 2, _GRID)  # the density is symmetric about 90°
    top = _log_density(d, np.array([math.pi / 2]))[0]
    half = _trapz(np.exp(_log_density(d, theta) - top), theta)
    tail_theta = np.linspace(0.0, edge, _GRID)
    tail = _trapz(np.exp(_log_density(d, tail_theta) - top), tail_theta)
    return tail / half


def exact_density(d: int, edges_degrees: np.ndarray) -> np.ndarray:
    """The share of pairs in each bin [edges_i, edges_i+1) of angle: [len(edges) - 1]."""
    theta = np.linspace(0.0, math.pi, 2 * _GRID - 1)
    logf = _log_density(d, theta)
    f = np.exp(logf - logf.max())
    cum = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) / 2 * np.diff(theta))])  # [G] trapezoid
    at = np.interp(np.radians(edges_degrees), theta, cum)
    return np.diff(at) / cum[-1]


# --- what a sample shows, beside what theory says ----------------------------------------------


@dataclass(frozen=True)
class AngleStats:
    label: str
    d: int
    pairs: int
    mean_angle: float  # degrees
    std_angle: float  # degrees
    mean_cos: float
    std_cos: float
    within: dict[float, float]  # band (degrees) -> measured share of pairs with |θ - 90°| <= band
    exact_within: dict[float, float] | None  # the same from the exact distribution (random vectors only)
    histogram: np.ndarray  # [bins] share of pairs per bin of HIST_EDGES


HIST_EDGES = np.linspace(-1.5, 181.5, 62)  # 3° bins centred on 0°, 3°, ... 90° ... 180°


def stats(label: str, cosines: np.ndarray, d: int, exact: bool) -> AngleStats:
    ang = angles_degrees(cosines)
    off = np.abs(ang - 90.0)
    hist = np.histogram(ang, bins=HIST_EDGES)[0] / len(ang)
    return AngleStats(
        label, d, len(cosines), float(ang.mean()), float(ang.std()), float(cosines.mean()), float(cosines.std()),
        {b: float((off <= b).mean()) for b in BANDS},
        {b: 1.0 - exact_outside(d, b) for b in BANDS} if exact else None,
        hist,
    )  # fmt: skip


def random_stats(dims, n: int = SAMPLE, seed: int = 0) -> list[AngleStats]:
    """For each d: n random unit vectors (one generator, seeded once) and their pairwise angles."""
    rng = np.random.default_rng(seed)
    return [stats(f"random, D = {d:,}", pair_cosines(random_units(n, d, rng)), d, exact=True) for d in dims]


def embedding_stats(embedding: np.ndarray, n: int = SAMPLE, seed: int = 0) -> list[AngleStats]:
    """The same for n random rows of a token embedding [V, D]: as they are, and centred (the mean
    row subtracted first: token vectors share a common direction that pushes cosines up)."""
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(embedding), size=min(n, len(embedding)), replace=False))
    rows = np.asarray(embedding[picked], dtype=np.float64)
    d = rows.shape[1]
    mean = np.asarray(embedding, dtype=np.float64).mean(axis=0)  # [D]
    out = []
    for label, x in (("token embeddings", rows), ("token embeddings, centred", rows - mean)):
        u = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
        out.append(stats(label, pair_cosines(u), d, exact=False))
    return out


# --- what the theory promises ------------------------------------------------------------------


def pairs_before_a_miss(outside: float) -> float:
    """How many random vectors you can draw before expecting one pair outside the band:
    n(n-1)/2 · p = 1 -> n ≈ √(2/p) (inf when p is 0)."""
    return math.inf if outside <= 0 else 0.5 + math.sqrt(0.25 + 2.0 / outside)


def log10_union_bound(d: int, band_degrees: float) -> float:
    """log10 of how many directions in d dimensions provably exist with every pairwise angle
    within 90° ± band: P(|cos| > ε) <= 2 exp(-d ε² / 2) for random ones (ε = sin band), so
    n = exp(d ε² / 4) random vectors have an expected < 1 bad pair, hence some set of n is good."""
    eps = math.sin(math.radians(band_degrees))
    return d * eps * eps / 4 / math.log(10)


def jl_dimensions(n_points: float, eps: float) -> int:
    """Johnson–Lindenstrauss (Dasgupta and Gupta's constant): any n points map linearly into
    k >= 4 ln n / (ε²/2 - ε³/3) dimensions with every distance kept within 1 ± ε."""
    return math.ceil(4 * math.log(n_points) / (eps * eps / 2 - eps**3 / 3))


def log10_jl_points(k: int, eps: float) -> float:
    """The inverse: log10 of how many points k dimensions hold at distortion ε."""
    return k * (eps * eps / 2 - eps**3 / 3) / 4 / math.log(10)
