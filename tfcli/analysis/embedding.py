"""A model's token vectors as a space: nearest neighbours by cosine, analogies, similarities and
projections on a direction. Pure NumPy on arrays (an embedding matrix [V, D], vectors [D]).

The rules are word2vec's (Mikolov et al. 2013, the `distance` and `word-analogy` programs, which
gensim's most_similar follows): every vector is scaled to unit length first, so only directions
count; an analogy a - b + c is the sum of the unit vectors, and the words it was made of are left
out of its answers (otherwise a itself is usually the nearest). A word the tokenizer splits into
several tokens is the mean of its tokens' rows (before scaling).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def unit_rows(m: np.ndarray) -> np.ndarray:
    """[N, D] -> [N, D], each row scaled to length 1 (a zero row stays zero)."""
    m = np.asarray(m, dtype=np.float32)
    n = np.linalg.norm(m, axis=-1, keepdims=True)  # [N, 1]
    return np.divide(m, n, out=np.zeros_like(m), where=n > 0)


def unit(v: np.ndarray) -> np.ndarray:
    """[D] -> [D] of length 1 (zero stays zero)."""
    return unit_rows(np.asarray(v)[None])[0]


def word_vector(embedding: np.ndarray, ids: list[int]) -> np.ndarray:
    """The vector of a word made of tokens `ids`: the mean of their rows [D]."""
    return np.asarray(embedding[np.asarray(ids)], dtype=np.float32).mean(axis=0)  # [n, D] -> [D]


def angle_degrees(cosine: float | np.ndarray) -> float | np.ndarray:
    return np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0)))


@dataclass(frozen=True)
class Neighbors:
    ids: np.ndarray  # [k] nearest first
    cosines: np.ndarray  # [k]


def cosines_to(units: np.ndarray, v: np.ndarray) -> np.ndarray:
    """[V, D] unit rows, [D] any vector -> [V] the cosine of each row with v."""
    return units @ unit(v)  # [V, D] @ [D] -> [V]


def nearest(units: np.ndarray, v: np.ndarray, k: int, exclude=()) -> Neighbors:
    """The k rows of `units` [V, D] (unit length) most similar to v [D] by cosine, leaving out the
    ids in `exclude`; ties go to the smaller id."""
    cos = cosines_to(units, v)  # [V]
    keep = np.ones(len(cos), dtype=bool)
    keep[np.asarray(list(exclude), dtype=np.int64)] = False
    candidates = np.flatnonzero(keep)
    k = min(k, len(candidates))
    c = cos[candidates]
    part = candidates[np.argpartition(-c, k - 1)[:k]] if k < len(candidates) else candidates
    order = np.lexsort((part, -cos[part]))
    ids = part[order]
    return Neighbors(ids, cos[ids])


def rank(units: np.ndarray, v: np.ndarray, target: int, exclude=()) -> int | None:
    """The 1-based rank of row `target` among the rows not excluded, by cosine with v (ties: the
    smaller id first); None if target is excluded."""
    if target in set(exclude):
        return None
    cos = cosines_to(units, v)  # [V]
    keep = np.ones(len(cos), dtype=bool)
    keep[np.asarray(list(exclude), dtype=np.int64)] = False
    c = cos[target]
    ids = np.arange(len(cos))
    better = keep & ((cos > c) | ((cos == c) & (ids < target)))
    return int(better.sum()) + 1


def analogy(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a - b + c on unit vectors ("king - man + woman"): [D]."""
    return unit(a) - unit(b) + unit(c)


def direction_projections(plus: np.ndarray, minus: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Each of vectors [N, D], as a unit vector, projected on the unit direction plus - minus (both
    unit first): [N], in [-1, 1]; positive is plus's side (Bolukbasi et al. 2016, the he - she axis)."""
    d = unit(unit(plus) - unit(minus))  # [D]
    return unit_rows(vectors) @ d  # [N, D] @ [D] -> [N]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(unit(a) @ unit(b))


def pair_cosines(units: np.ndarray, sample: int = 2000, seed: int = 0) -> np.ndarray:
    """The cosines between all pairs of distinct rows among `sample` random rows of `units` [V, D]:
    [S*(S-1)/2]. Their mean is well above 0 when the vectors crowd into a cone: then any two tokens
    look somewhat alike, and only a cosine above that says something."""
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(units), size=min(sample, len(units)), replace=False))
    s = units[idx]  # [S, D]
    c = s @ s.T  # [S, D] @ [D, S] -> [S, S]
    return c[np.triu_indices(len(s), k=1)]
