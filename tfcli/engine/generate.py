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
from dataclasses import dataclass, field, replace

import numpy as np

from . import ops
from .errors import PromptError, TokenizerError, UsageError
from .grammar import Constraint
from .lookup import Drafter
from .model import Transformer
from .sampling import Choice, Sampler
from .sites import Hooks
from .slots import Prompts
from .fast.run.fast_executor import Fast
from .tokenizer import TextStream, Tokenizer


PREFILL_CHUNK = 512  # prompt tokens per forward pass


class Session:
    """A model, its KV cache, and the tokens whose keys and values the cache holds."""

    def __init__(self, model: Transformer, capacity: int | None = None, workers: int = 1, hooks: Hooks | None = None):
        self.model = model
        self.hooks = hooks  # at the sites of every pass (engine/sites.py): an ablation, a steering vector
        self.workers = workers  # threads a pass may use (engine/executor.py)
        self.run = Fast(workers)  # its helper thread, if any, is kept for the session's passes
        self.capacity = min(capacity or model.config.n_ctx, model.config.n_ctx)
        self.cache = model.new_cache(self.capacity, fast=True)  # float16 for a quantized model (--kv-type)
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
        reuse = self.cache.resumable(min(reuse, len(tokens) - 1))  # the last token must run to give logits
        self.cache.reset(reuse)
        self.tokens = list(tokens[:reuse])
        # In chunks, so that a long prompt's temporaries stay bounded; of equal size (700 tokens as
        # 350 + 350, not 512 + 188), so that each is long enough to be split between threads.
        n_chunks = -(-(len(tokens) - reuse) // PREFILL_CHUNK)
        size = -(-(len(tokens) - reuse) // n_chunks)
        for i in range(reuse, len(tokens), size):
            # [V]
            logits = self.model.forward(np.asarray(tokens[i : i + size]), self.cache, hooks=self.hooks, run=self.run)[
                -1
            ]
            self.tokens = list(tokens[: i + size])
        return logits, len(tokens) - reuse

    def step(self, token: int) -> np.ndarray:
        """Append one token; return the logits for the next one [V]."""
        logits = self.model.forward(np.asarray([token]), self.cache, hooks=self.hooks, run=self.run)[-1]  # [V]
        self.tokens.append(token)
        return logits

    def verify(self, tokens: list[int]) -> np.ndarray:
        """Append T tokens in one pass (a token and the draft guessed after it); return the logits
        after each of them [T, V]: row j is what the model predicts after tokens[j]."""
        # [T, V]
        logits = self.model.forward(np.asarray(tokens), self.cache, all_logits=True, hooks=self.hooks, run=self.run)
        self.tokens.extend(tokens)
        return logits

    def rewind(self, length: int) -> None:
        """Forget every position from `length` on (the rejected part of a draft)."""
        self.cache.reset(length)
        del self.tokens[length:]


@dataclass
class Stats:
    prompt_tokens: int = 0  # tokens run in the prompt pass (a chat turn reuses the earlier ones)
    new_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0  # time of the decode steps (the tokens after the first)
    # "eos", "stop string", "max tokens", "grammar" (whole, nothing may follow), or "" while running
    stop_reason: str = ""
    slides: int = 0  # times the context was full and generation went on from its recent half
    drafted: int = 0  # with lookup: tokens guessed from the context and checked by the model
    accepted: int = 0  # of those, the ones the sampler drew as well (each saved a decode step)

    @property
    def prefill_tps(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        steps = self.new_tokens - 1  # the first new token comes from the prefill pass
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds > 0 else 0.0


def prefill_together(sessions: list[Session], prompts: list[list[int]]) -> np.ndarray | None:
    """Several new sessions' prompts in one forward pass (each through its own cache, slots.Prompts),
    on the first session's executor: every weight read once for all of them. Returns the logits
    after each prompt [B, V], the same bits as each session's prefill alone; or None, having run
    nothing, where the pass would not give those (a model off the compiled blocks, too many rows):
    then prefill them one by one."""
    model, run, total = sessions[0].model, sessions[0].run, sum(len(p) for p in prompts)
    if not all(prompts) or not run.rows_apart(model, total):
        return None
    for s in sessions:
        s.cache.reset()
    # [B, V]
    logits = model.forward(
        np.concatenate(prompts), Prompts([s.cache for s in sessions], [len(p) for p in prompts]), run=run
    )
    for s, p in zip(sessions, prompts):
        s.tokens = list(p)
    return logits


@dataclass
class Step:
    token: int
    text: str  # text released by this step (may be "" while a character or a stop string is incomplete)
    choice: Choice | None = None  # the candidates, when asked for with show_top


def check_max_new_tokens(n: int) -> None:
    """The one check of a token budget (a command calls it before loading a model, too)."""
    if n < 1:
        raise UsageError(f"{{max_new_tokens}} must be at least 1, not {n}")


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
    lookup: Drafter | None = None  # guess the next tokens from the context and check them in one pass
    constraint: Constraint | None = None  # a grammar's place (engine/grammar.py): only the tokens it allows are drawn
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
        check_max_new_tokens(self.max_new_tokens)
        # The last sampled token is never fed back, so prompt + max_new - 1 positions are used.
        n_ctx = self.session.capacity
        if len(self.prompt) > n_ctx:
            raise PromptError(
                f"the prompt is {len(self.prompt)} tokens but the context holds {n_ctx}",
                "shorten it, or use {truncate} to keep its last tokens",
            )
        if len(self.prompt) + self.max_new_tokens - 1 > n_ctx and not self.slide:
            room = n_ctx - len(self.prompt) + 1  # >= 1: a longer prompt was refused just above
            raise UsageError(
                f"{{max_new_tokens}} {self.max_new_tokens} does not fit: the context holds {n_ctx} tokens and the "
                f"prompt uses {len(self.prompt)}",
                f"use {{max_new_tokens}} {room} or fewer, or {{slide}} to go on past the context with the most recent "
                "tokens",
            )
        if any(s == "" for s in self.stop):
            raise UsageError("{stop} strings must not be empty")
        if self.lookup is not None and self.slide:
            raise UsageError("{lookup} does not go with {slide}", "a slide recomputes the context; drop one of the two")

    def begin(self) -> None:
        """Start the text stream and the history; `take` then turns logits into steps."""
        self._stream = TextStream(self.tokenizer, context=self.prompt[-4:])
        self._pending = ""  # decoded text held back: it could be the start of a stop string
        self.history = list(self.prompt)

    def take(self, logits: np.ndarray) -> Step:
        """Draw the next token from logits [V] and say what it adds; stats.stop_reason is set when
        it ends the generation (EOS, a stop string, the token budget)."""
        sampler, stats, constraint = self.sampler, self.stats, self.constraint
        allowed = None if constraint is None else constraint.allowed()  # [V] bool
        if self.show_top:
            choice = with_chosen(
                sampler.choose(logits, self.history, self.show_top, allowed), logits, sampler, self.history, allowed
            )
            token = choice.token
        else:
            choice, token = None, sampler.sample(logits, self.history, allowed)
        self.history.append(token)
        stats.new_tokens += 1
        if constraint is not None:
            constraint.advance(token)
        if token in self.eos_ids:
            stats.stop_reason = "eos"
            return Step(token, self.flush(), choice)
        release, self._pending, hit = _split_at_stop(self._pending + self._stream.push(token), self.stop)
        if hit:
            stats.stop_reason = "stop string"
            return Step(token, release, choice)
        if stats.new_tokens >= self.max_new_tokens:
            stats.stop_reason = "max tokens"
            return Step(token, release + self.flush(), choice)
        if constraint is not None and constraint.finished:  # the grammar is whole and allows nothing more
            stats.stop_reason = "grammar"
            return Step(token, release + self.flush(), choice)
        return Step(token, release, choice)

    def __iter__(self) -> Iterator[Step]:
        session, stats = self.session, self.stats
        self.begin()
        t0 = time.perf_counter()
        logits, stats.prompt_tokens = session.prefill(self.prompt)  # [V]
        stats.prefill_seconds = time.perf_counter() - t0
        t_decode = time.perf_counter()
        self._drafted = 0  # length of the last draft
        checked: list[tuple[int, np.ndarray]] = []  # with lookup: (drafted token, the logits after it), next first
        while True:
            step = self.take(logits)
            yield step
            if stats.stop_reason:
                return
            token = step.token
            if checked and checked[0][0] == token:  # the sampler drew the guessed token: its logits are computed
                logits = checked.pop(0)[1]
                stats.accepted += 1
            elif self.lookup is not None:
                if checked:  # a guess was wrong: forget it and everything guessed after it
                    session.rewind(session.cache.length - len(checked))
                self.lookup.update(self._drafted, self._drafted - len(checked))
                logits, checked = self.guess_and_check(token)
            elif session.cache.length < session.capacity:
                logits = session.step(token)  # [V]
            else:
                # The context is full: start again from the most recent half. With learned
                # positions the kept tokens move to positions 0.., so they are recomputed, not shifted.
                keep = self.history[-max(1, session.capacity // 2) :]
                logits, _ = session.prefill(keep)  # [V]
                stats.slides += 1
            stats.decode_seconds = time.perf_counter() - t_decode

    def guess_and_check(self, token: int) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
        """Lookup decoding: feed `token` and the tokens guessed to follow it in one pass. Returns the
        logits after `token` [V] and, for each guess, (guess, the logits after it [V])."""
        session = self.session
        # Room: the cache's free positions after `token`, and no guess past the token budget.
        room = min(session.capacity - session.cache.length - 1, self.max_new_tokens - self.stats.new_tokens - 1)
        draft = self.lookup.draft(self.history, room)
        self._drafted = len(draft)
        self.stats.drafted += len(draft)
        rows = session.verify([token, *draft])  # [1 + K, V]
        return rows[0], list(zip(draft, rows[1:]))

    def flush(self) -> str:
        """Text decoded but not yet released (held for a stop string or an incomplete character);
        for a generation that ends early, e.g. on Ctrl-C."""
        if not hasattr(self, "_stream"):
            return ""
        text, self._pending = self._pending + self._stream.flush(), ""
        return text


def with_chosen(
    choice: Choice, logits: np.ndarray, sampler: Sampler, history: list[int], allowed: np.ndarray | None = None
) -> Choice:
    """The choice with the chosen token among its candidates: appended after the top N (with its
    probabilities) when a filter-free draw or a repetition penalty picked one outside them."""
    if choice.token in choice.top_ids:
        return choice
    p_model = ops.softmax(logits.astype(np.float32))[choice.token]  # the token's probability at T=1, no filters
    ids, probs = sampler.candidates(logits, history, allowed=allowed)  # no random draw: the stream is not disturbed
    p_final = probs[ids == choice.token].sum()
    return replace(
        choice,
        top_ids=np.append(choice.top_ids, choice.token),  # [N+1]
        p_model=np.append(choice.p_model, np.float32(p_model)),
        p_final=np.append(choice.p_final, np.float32(p_final)),
        allowed=None if choice.allowed is None else np.append(choice.allowed, True),  # it was drawn: allowed
    )


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
