"""Text generation: one forward pass over the prompt, then one token per step through the KV cache.

A `Session` is a model with its KV cache and the tokens that cache holds; a new prompt that starts
with those tokens only pays for the rest (a chat reuses every earlier turn). `Generation` is an
iterator of `Step`s; the caller decides what to do with each (print it, collect it, draw its
probabilities). Timings are kept in `stats`, so that an interrupted generation still reports what
it did.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .errors import PromptError, TokenizerError, UsageError
from .model import Transformer
from .sampling import Choice, Sampler
from .tokenizer import TextStream, Tokenizer


PREFILL_CHUNK = 512  # prompt tokens per forward pass


class Session:
    """A model, its KV cache, and the tokens whose keys and values the cache holds."""

    def __init__(self, model: Transformer, capacity: int | None = None, workers: int = 1):
        self.model = model
        self.workers = workers  # threads a long prompt pass may be split over (model.split_prompt)
        self.capacity = min(capacity or model.config.n_ctx, model.config.n_ctx)
        self.cache = model.new_cache(self.capacity)
        self.tokens: list[int] = []

    def prefill(self, tokens: list[int]) -> tuple[np.ndarray, int]:
        """Bring the cache to `tokens`; return the logits after the last one [V] and how many
        tokens were computed (those after the longest prefix the cache already held)."""
        if not tokens:
            raise PromptError("the prompt is empty", "give some text to continue")
        reuse = 0
        for a, b in zip(self.tokens, tokens):
            if a != b:
                break
            reuse += 1
        reuse = min(reuse, len(tokens) - 1)  # the last token must run to give logits
        self.cache.reset(reuse)
        self.tokens = list(tokens[:reuse])
        # In chunks, so that a long prompt's temporaries stay bounded; of equal size (700 tokens as
        # 350 + 350, not 512 + 188), so that each is long enough to be split between threads.
        n_chunks = -(-(len(tokens) - reuse) // PREFILL_CHUNK)
        size = -(-(len(tokens) - reuse) // n_chunks)
        for i in range(reuse, len(tokens), size):
            logits = self.model.forward(np.asarray(tokens[i : i + size]), self.cache, workers=self.workers)[-1]  # [V]
            self.tokens = list(tokens[: i + size])
        return logits, len(tokens) - reuse

    def step(self, token: int) -> np.ndarray:
        """Append one token; return the logits for the next one [V]."""
        logits = self.model.forward(np.asarray([token]), self.cache)[-1]  # [V]
        self.tokens.append(token)
        return logits


@dataclass
class Stats:
    prompt_tokens: int = 0  # tokens run in the prompt pass (a chat turn reuses the earlier ones)
    new_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0  # time of the decode steps (the tokens after the first)
    stop_reason: str = ""  # "eos", "stop string", "max tokens", or "" while running
    slides: int = 0  # times the context was full and generation went on from its recent half

    @property
    def prefill_tps(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        steps = self.new_tokens - 1  # the first new token comes from the prefill pass
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds > 0 else 0.0


@dataclass
class Step:
    token: int
    text: str  # text released by this step (may be "" while a character or a stop string is incomplete)
    choice: Choice | None = None  # the candidates, when asked for with show_top


@dataclass
class Generation:
    session: Session
    tokenizer: Tokenizer
    prompt: list[int]  # the whole context to continue (a session reuses what it already holds)
    sampler: Sampler
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    eos_ids: tuple[int, ...] = ()
    show_top: int = 0  # report the top N candidates of every step
    slide: bool = False  # past the context, keep going on the most recent half (nanoGPT's crop)
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        cfg = self.session.model.config
        if not self.prompt:
            raise PromptError("the prompt is empty", "give some text to continue")
        bad = [t for t in self.prompt if not 0 <= t < cfg.vocab_size]
        if bad:
            raise TokenizerError(
                f"token id {bad[0]} is outside the model's vocabulary of {cfg.vocab_size}",
                "tokenizer.json does not belong to this model",
            )
        if self.max_new_tokens < 1:
            raise UsageError(f"--max-tokens must be at least 1, not {self.max_new_tokens}")
        # The last sampled token is never fed back, so prompt + max_new - 1 positions are used.
        n_ctx = self.session.capacity
        if len(self.prompt) > n_ctx:
            raise PromptError(
                f"the prompt is {len(self.prompt)} tokens but the context holds {n_ctx}",
                "shorten it, or use --truncate to keep its last tokens",
            )
        if len(self.prompt) + self.max_new_tokens - 1 > n_ctx and not self.slide:
            room = n_ctx - len(self.prompt) + 1  # >= 1: a longer prompt was refused just above
            raise UsageError(
                f"--max-tokens {self.max_new_tokens} does not fit: the context holds {n_ctx} tokens and the prompt uses {len(self.prompt)}",
                f"use --max-tokens {room} or fewer, or --slide to go on past the context with the most recent tokens",
            )
        if any(s == "" for s in self.stop):
            raise UsageError("--stop strings must not be empty")

    def __iter__(self) -> Iterator[Step]:
        session, sampler, stats = self.session, self.sampler, self.stats
        self._stream = stream = TextStream(self.tokenizer, context=self.prompt[-4:])
        self._pending = ""  # decoded text held back: it could be the start of a stop string
        history = list(self.prompt)

        t0 = time.perf_counter()
        logits, stats.prompt_tokens = session.prefill(self.prompt)  # [V]
        stats.prefill_seconds = time.perf_counter() - t0
        t_decode = time.perf_counter()
        while True:
            if self.show_top:
                choice = sampler.choose(logits, history, self.show_top)
                token = choice.token
            else:
                choice, token = None, sampler.sample(logits, history)
            history.append(token)
            stats.new_tokens += 1
            if token in self.eos_ids:
                stats.stop_reason = "eos"
                yield Step(token, self.flush(), choice)
                return
            release, self._pending, hit = _split_at_stop(self._pending + stream.push(token), self.stop)
            if hit:
                stats.stop_reason = "stop string"
                yield Step(token, release, choice)
                return
            if stats.new_tokens >= self.max_new_tokens:
                stats.stop_reason = "max tokens"
                yield Step(token, release + self.flush(), choice)
                return
            yield Step(token, release, choice)
            if session.cache.length < session.capacity:
                logits = session.step(token)  # [V]
            else:
                # The context is full: start again from the most recent half. With learned
                # positions the kept tokens move to positions 0.., so they are recomputed, not shifted.
                keep = history[-max(1, session.capacity // 2) :]
                logits, _ = session.prefill(keep)  # [V]
                stats.slides += 1
            stats.decode_seconds = time.perf_counter() - t_decode

    def flush(self) -> str:
        """Text decoded but not yet released (held for a stop string or an incomplete character);
        for a generation that ends early, e.g. on Ctrl-C."""
        if not hasattr(self, "_stream"):
            return ""
        text, self._pending = self._pending + self._stream.flush(), ""
        return text


def _split_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, str, bool]:
    """Split text into (safe to release, held back, stop found).

    On a stop string, release what precedes it and drop the rest. Otherwise hold back the longest
    tail that could still grow into a stop string.
    """
    if not stops:
        return text, "", False
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    if cut >= 0:
        return text[:cut], "", True
    hold = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:n]):
                hold = n
                break
    return text[: len(text) - hold], text[len(text) - hold :], False
