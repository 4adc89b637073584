"""Choosing the next token from logits: repetition penalty, temperature, top-k, top-p, min-p.

The order is that of transformers' logits processors (penalty, temperature, top-k, top-p), with
min-p last as in llama.cpp. Under a grammar (engine/grammar.py) the tokens it forbids are removed
after the penalty and before the temperature, so every later step sees the allowed ones alone. The sampler owns its
random generator, so one seed gives one output
whatever else the program does with randomness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ops
from .errors import CheckpointError, UsageError


class NonFiniteError(CheckpointError):
    """Logits with NaN or Inf: the model's weights or activations, not the user's input."""


@dataclass(frozen=True)
class SamplingParams:
    # Defaults of llama.cpp's sampler, which users of local models know (nanoGPT uses 0.8 and top-k 200).
    temperature: float = 0.8  # 0 = greedy (argmax); < 1 sharpens the distribution, > 1 flattens it
    top_k: int = 40  # keep the k most likely tokens; 0 = off
    top_p: float = 0.95  # keep the smallest set whose probability reaches p; 1 = off
    min_p: float = 0.05  # drop tokens less likely than min_p x the top token; 0 = off
    repetition_penalty: float = 1.0  # > 1 discourages tokens seen in the last `repeat_last_n`; 1 = off
    repeat_last_n: int = 64
    seed: int | None = None  # None: a fresh random seed

    @classmethod
    def merged(cls, generation: dict, **flags) -> SamplingParams:
        """The settings a run uses: each flag given (not None) first, then the model's
        generation_config.json, then the defaults above. A model whose authors set do_sample false
        gets greedy decoding unless --temperature says otherwise."""
        base = cls()
        model: dict = {}
        for key, kind in (
            ("temperature", float), ("top_k", int), ("top_p", float), ("min_p", float), ("repetition_penalty", float),
        ):
            value = generation.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                model[key] = kind(value)
        if generation.get("do_sample") is False:
            model["temperature"] = 0.0
        unknown = set(flags) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown sampling settings: {sorted(unknown)}")
        chosen = {key: getattr(base, key) for key in cls.__dataclass_fields__}
        chosen.update(model)
        chosen.update({key: value for key, value in flags.items() if value is not None})
        return cls(**chosen)

    def validate(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise UsageError(
                f"{{temperature}} must be 0 or more, not {self.temperature}", "0 is greedy; 0.7-1.0 is typical"
            )
        if self.top_k < 0:
            raise UsageError(f"{{top_k}} must be 0 (off) or a positive count, not {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise UsageError(f"{{top_p}} must be in (0, 1], not {self.top_p}", "1 turns it off; 0.9-0.95 is typical")
        if not (0 <= self.min_p < 1):
            raise UsageError(f"{{min_p}} must be in [0, 1), not {self.min_p}", "0 turns it off; 0.05 is typical")
        if not np.isfinite(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise UsageError(
                f"{{repetition_penalty}} must be a positive number, not {self.repetition_penalty}",
                "1 turns it off; 1.1 is typical",
            )
        if self.repeat_last_n < 0:
            raise UsageError(f"{{repeat_last_n}} must be 0 or more, not {self.repeat_last_n}")
        if self.seed is not None and not (0 <= self.seed < 2**63):
            raise UsageError(f"{{seed}} must be between 0 and 2^63-1 (or -1 for a random one), not {self.seed}")


@dataclass(frozen=True)
class Choice:
    """What the sampler saw when it picked a token: the top candidates before and after the knobs."""

    token: int
    top_ids: np.ndarray  # [N] most likely tokens under the model's own distribution
    p_model: np.ndarray  # [N] their probabilities: softmax(logits), temperature 1, no filters
    p_final: np.ndarray  # [N] their probabilities in the distribution actually sampled from
    kept: int  # how many tokens survived top-k / top-p / min-p
    allowed: np.ndarray | None = None  # [N] under a grammar: whether it allowed each of the top tokens
    ruled_out: float = 0.0  # under a grammar: the model's probability (T = 1, no filters) of every token it forbade


class Sampler:
    def __init__(self, params: SamplingParams):
        params.validate()
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def candidates(
        self, logits: np.ndarray, history: list[int], allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """logits [V] -> the distribution sampled from, as (token ids [K], probabilities [K]).

        Only the tokens that survive the filters are carried: with top-k on, the softmax and the
        top-p sort see k values, not the whole vocabulary (the result is the same, since tokens
        filtered out would get probability 0; temperature does not change the ranking). `allowed`
        [V] bool: a grammar's mask (engine/grammar.py): the tokens it forbids are gone before the
        temperature and the filters, so the softmax is taken over the allowed ones alone.
        """
        check_finite(logits)
        logits = self._penalized(logits, history)  # [V]
        if allowed is None:
            return self._filtered(logits)
        pool = np.flatnonzero(allowed)  # [A] the tokens the grammar allows
        if len(pool) == 0:
            raise UsageError("the grammar allows no token here")
        ids, probs = self._filtered(logits[pool])  # ids: positions in pool
        return pool[ids], probs

    def _penalized(self, logits: np.ndarray, history: list[int]) -> np.ndarray:
        """logits [V] with the repetition penalty applied to the tokens of the last repeat_last_n (a copy), or as
        given."""
        p = self.params
        if p.repetition_penalty != 1.0 and p.repeat_last_n > 0 and history:
            logits = logits.copy()  # [V]
            seen = np.unique(np.asarray(history[-p.repeat_last_n :]))
            seen = seen[seen < logits.shape[0]]
            vals = logits[seen].astype(np.float64)  # [n]; float64 then back is exactly float32 division
            with np.errstate(over="ignore", under="ignore"):
                pen32 = np.float32(p.repetition_penalty)  # what float32 logits were always divided by
                pen = np.float64(pen32) if 0 < pen32 < np.inf else np.float64(p.repetition_penalty)
                # CTRL's penalty (Keskar et al. 2019): shrink positive logits, push negative ones further down.
                new = np.where(vals > 0, vals / pen, vals * pen)
            if np.abs(new[np.isfinite(new)]).max(initial=0.0) >= np.finfo(np.float32).max or not np.isfinite(new).all():
                logits = logits.astype(np.float64)  # an extreme penalty: values float32 cannot hold
            logits[seen] = new
        return logits

    def _filtered(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Temperature, top-k, top-p and min-p over the logits given [K'] (the vocabulary, or the
        tokens a grammar allows) -> (positions in `logits` [K], probabilities [K])."""
        p = self.params
        if p.temperature == 0:
            return np.array([int(np.argmax(logits))]), np.ones(1, dtype=np.float32)
        vocab = logits.shape[0]
        if 0 < p.top_k < vocab:
            # [>= k]: ties with the k-th are kept, as in transformers
            ids = top_k_ids(logits, p.top_k)
        else:
            ids = np.arange(vocab)
        probs = _tempered(logits[ids], p.temperature)  # [K]
        if p.top_p < 1.0:
            order = _descending(probs, p.top_p)  # [M] most likely first, M <= K, their total >= top_p
            cum = np.cumsum(probs[order])
            # Keep every token whose predecessors' total is still below p: the smallest set reaching p.
            keep = order[(cum - probs[order]) < p.top_p]
            ids, probs = ids[keep], probs[keep]
        if p.min_p > 0:
            keep = probs >= p.min_p * probs.max()
            ids, probs = ids[keep], probs[keep]
        return ids, probs / probs.sum()

    def final_probs(self, logits: np.ndarray, history: list[int]) -> np.ndarray:
        """The distribution sampled from, over the whole vocabulary [V] (one-hot for temperature 0)."""
        ids, probs = self.candidates(logits, history)
        dense = np.zeros(logits.shape[0], dtype=np.float32)  # [V]
        dense[ids] = probs
        return dense

    def sample(self, logits: np.ndarray, history: list[int], allowed: np.ndarray | None = None) -> int:
        return self._pick(*self.candidates(logits, history, allowed))

    def choose(self, logits: np.ndarray, history: list[int], top_n: int, allowed: np.ndarray | None = None) -> Choice:
        """Sample like `sample`, and report the top candidates before and after the knobs (and,
        under a grammar's mask `allowed`, which of them it ruled out)."""
        ids, probs = self.candidates(logits, history, allowed=allowed)
        token = self._pick(ids, probs)
        p_model = ops.softmax(logits.astype(np.float32))  # [V]
        n = min(top_n, len(p_model))
        top = np.argpartition(-p_model, n - 1)[:n]
        top = top[np.argsort(-p_model[top], kind="stable")]  # [N]
        final = dict(zip(ids.tolist(), probs.tolist()))
        p_final = np.array([final.get(int(i), 0.0) for i in top], dtype=np.float32)  # [N]
        if allowed is None:
            return Choice(token, top, p_model[top], p_final, len(ids))
        # the model's probability on what the grammar forbade
        ruled_out = float(p_model[~allowed].sum(dtype=np.float64))
        return Choice(token, top, p_model[top], p_final, len(ids), allowed[top].copy(), ruled_out)

    def _pick(self, ids: np.ndarray, probs: np.ndarray) -> int:
        if len(ids) == 1:
            return int(ids[0])
        # Inverse CDF with one uniform draw: cheap, and exactly reproducible for a seed.
        cdf = np.cumsum(probs, dtype=np.float64)
        return int(ids[min(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"), len(cdf) - 1)])


def top_k_ids(x: np.ndarray, k: int) -> np.ndarray:
    """The indices, in order, of the values of x [V] at least its k-th largest (1 <= k <= V; ties
    with it kept, as transformers keeps them): np.flatnonzero(x >= np.partition(x, V - k)[V - k]),
    about 10x faster for a top-k of 40 over a vocabulary of 49,152 (a cost paid by every sample at
    every step), with one pass over x.

    The largest values of k different groups of x are k values of x, so the k-th largest group
    maximum is at most the k-th largest value: every value from there up is a candidate, and the
    k-th largest of the candidates is the k-th largest of x. Few values pass, so the partition is small.
    Group j is every n-th value from j on: their maxima are one vector maximum down [size, n].
    """
    n = max(4 * k, 512)  # groups: at least 4k, so that the bound sits well above most values
    size = len(x) // n
    if size < 8:
        return np.flatnonzero(x >= np.partition(x, len(x) - k)[len(x) - k])
    maxima = x[: n * size].reshape(size, n).max(axis=0)  # [n]
    ids = np.flatnonzero(x >= np.partition(maxima, n - k)[n - k])  # [>= k], every value >= the k-th largest
    values = x[ids]
    return ids[values >= np.partition(values, len(values) - k)[len(values) - k]]


def check_finite(logits: np.ndarray) -> None:
    """NonFiniteError when the model's logits hold NaN or Inf: nothing can be sampled from them,
    and the cause is the model (bad weights, or activations past float32), not the sampler."""
    if not np.isfinite(logits).all():
        nan = int(np.isnan(logits).sum())
        what = f"NaN in {nan:,}" if nan else f"Inf in {int(np.isinf(logits).sum()):,}"
        raise NonFiniteError(
            f"the model's logits are not finite ({what} of {logits.shape[-1]:,} tokens)",
            "its weights likely hold NaN or Inf, or its activations overflow float32; check or fetch the weight file "
            "again",
        )


def _tempered(z: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(z / temperature) [K] as float32. The ordinary case runs in float32 as always; when
    z / temperature does not fit a float32 (-t 1e-45 divides by almost nothing, -t 1e308 is past
    float32, a penalty of 1e-40 made huge logits), it is taken as the limit it tends to, in float64
    after subtracting the max: a tiny temperature is greedy (ties shared), a huge one uniform."""
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        t32 = np.float32(temperature)
        if z.dtype == np.float32 and 0 < t32 < np.inf:
            scaled = z / t32  # [K]
            if np.isfinite(scaled).all():
                return ops.softmax(scaled)
        z = z.astype(np.float64)  # [K]
        top = z.max()
        if np.isposinf(top):
            e = (z == top).astype(np.float64)  # only the infinite ones count, equally
        else:
            e = np.exp((z - top) / temperature)  # (z - top) <= 0: no overflow; the top is exp(0) = 1
        return (e / e.sum()).astype(np.float32)


def _descending(probs: np.ndarray, mass: float) -> np.ndarray:
    """Indices of the most likely entries, sorted, enough of them to hold `mass` of the total.

    Sorting a whole 50,000-token vocabulary costs milliseconds; the top few hundred usually hold the
    mass, so sort a partition of them first and fall back to the full sort only when they do not.
    """
    m = 256
    while m < len(probs):
        part = np.argpartition(-probs, m - 1)[:m]  # [m], unordered
        if probs[part].sum() >= mass:
            return part[np.argsort(-probs[part], kind="stable")]
        m *= 4
    return np.argsort(-probs, kind="stable")


def speculative_choice(sampler: Sampler, logits: np.ndarray, history: list[int], draft: int) -> tuple[int, bool]:
    """Speculative sampling's acceptance rule for a draft that puts all its probability on one token
    x (Leviathan et al. 2023; Chen et al. 2023): accept x with probability p(x), where p is the
    distribution `sampler` samples from; on rejection draw from p with x removed, renormalised.
    Returns (the token, whether it is the draft).

    Realised with the sampler's usual single draw: y ~ p, accepted when y == x. Then
    P(accept) = p(x), and a rejected y is distributed as p(y) / (1 - p(x)) over y != x, which is the
    rule above. Drawing this way uses the random stream exactly as plain sampling does, so lookup
    decoding with a seed gives the text plain decoding gives with that seed.
    """
    token = sampler.sample(logits, history)
    return token, token == draft
