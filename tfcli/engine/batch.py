"""Sequences decoding together: the stepping `generate --samples` and `tfcli serve` share.

A decode step reads every weight once and does little arithmetic with each, so B sequences cost
barely more than one when their B new tokens go through each matrix product as one [B, D] matrix
(Transformer.decode_batch). `Batch` steps such rows: each samples with its own sampler (its own
settings and random stream) and stops on its own EOS, stop string or length; a finished sequence
leaves the batch. Its cache says where the rows stand (kvcache.Cache): a BatchCache when they all
continue one prompt (`Samples`, below: the prompt pass runs once and its keys and values are
copied into every row), Slots when each has its own (serve/batcher.py: requests join and leave).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from .config import ModelConfig
from .errors import UsageError
from .executor import Plain
from .generate import Generation, Session, Step
from .kvcache import BATCH_HINT, BatchCache, BatchRows, KVCache, kv_bytes
from .memory import check_allocation
from .model import Transformer
from .sampling import Sampler
from .sites import Hooks
from .fast.run.fast_executor import RowByRow
from .tokenizer import Tokenizer


def batch_bytes(config: ModelConfig, rows: int, capacity: int, kv_type: str = "f32") -> int:
    """Memory a batch of `rows` sequences of `capacity` positions needs: their KV caches, and a
    step's largest temporaries (the [B, V] logits and softmax, the [B, 2F] MLP activations)."""
    return rows * (kv_bytes(config, capacity, kv_type) + 4 * (3 * config.vocab_size + 3 * 2 * config.d_ff))


def check_batch(config: ModelConfig, rows: int, capacity: int, kv_type: str = "f32") -> None:
    """Refuse a batch that does not fit in memory before anything of it is allocated."""
    if rows < 1:
        raise UsageError(f"{{samples}} must be at least 1, not {rows}")
    check_allocation(batch_bytes(config, rows, capacity, kv_type), f"{rows:,} samples of {capacity:,} positions",
                     BATCH_HINT)


@dataclass(eq=False)
class Row:
    """One sequence of a batch: its generation (sampler, stop rules, text stream) and the logits
    its next token is drawn from."""

    gen: Generation
    logits: np.ndarray  # [V]


class Batch:
    """Rows that decode together through one cache (BatchCache, Slots), row i of the cache being
    rows[i]. `draw` gives every row its next token; `step` runs the rows still going as one decode
    step, which gives each its next logits. `run`: the executor of the steps; RowByRow keeps a
    row's numbers those of its sequence alone, whatever its company (tests/test_batch.py)."""

    def __init__(self, model: Transformer, cache: BatchRows, run: Plain, hooks: Hooks | None = None):
        self.model, self.cache, self.run, self.hooks = model, cache, run, hooks
        self.rows: list[Row] = []

    def join(self, row: Row, cache: KVCache | None = None) -> None:
        """A row joins: with its own KVCache, which its prompt pass filled (a Slots batch), or as
        the next row the batch cache already holds (BatchCache.fill)."""
        if cache is not None:
            self.cache.add(cache)  # Slots.add
        self.rows.append(row)

    def keep(self, keep: Callable[[Row], bool]) -> None:
        """Only the rows for which keep(row) holds go on (a finished, cancelled or failed one leaves)."""
        kept = [i for i, r in enumerate(self.rows) if keep(r)]
        if len(kept) < len(self.rows):
            self.cache.keep(kept)
            self.rows = [self.rows[i] for i in kept]

    def draw(self) -> list[tuple[Row, Step]]:
        """Every row draws its next token from its logits; the rows that finish (EOS, a stop string,
        their budget) leave the batch. Returns each row with its step, in the batch's order."""
        drawn = [(r, r.gen.take(r.logits)) for r in self.rows]
        self.keep(lambda r: not r.gen.stats.stop_reason)
        return drawn

    def step(self) -> None:
        """The rows still going run one decode step together: each gets the logits after its last token."""
        tokens = np.array([r.gen.history[-1] for r in self.rows])  # [B]
        with self.run.around_step(len(self.rows)):
            logits = self.model.decode_batch(tokens, self.cache, self.run, self.hooks)  # [B, V]
        for r, row in zip(self.rows, logits):
            r.logits = row


@dataclass(eq=False)
class Sample(Row):
    index: int  # which sample of Samples


@dataclass
class Totals:
    """The whole batch: one shared prompt pass, then the decode steps of every sequence together."""

    prompt_tokens: int = 0
    new_tokens: int = 0  # over all samples
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    steps: int = 0  # batched forward passes after the prompt
    samples: int = 0

    @property
    def decode_tps(self) -> float:
        """New tokens per second of the batch's decode steps (each sample's first token comes from the prompt pass)."""
        steps = self.new_tokens - self.samples
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds > 0 else 0.0


class Samples:
    """N continuations of one prompt, one sampler each, decoded as one batch.

    Iterating yields, for each step of the batch, the (sample index, Step) of every sample still
    going. Sample i is what a Generation with samplers[i] alone gives (the batch changes
    no numbers: tests/test_batch.py).
    """

    def __init__(
        self, session: Session, tokenizer: Tokenizer, prompt: list[int], samplers: list[Sampler], max_new_tokens: int,
        stop: tuple[str, ...] = (), eos_ids: tuple[int, ...] = (), show_top: int = 0,
    ):
        if not samplers:
            raise UsageError("{samples} must be at least 1, not 0")
        self.session = session
        # One Generation per sample: it checks the prompt and budget, and turns logits into steps.
        self.runs = [
            Generation(session, tokenizer, prompt, s, max_new_tokens, stop=stop, eos_ids=eos_ids, show_top=show_top)
            for s in samplers
        ]
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens
        self.totals = Totals(samples=len(samplers))

    def __iter__(self) -> Iterator[list[tuple[int, Step]]]:
        session, totals, runs = self.session, self.totals, self.runs
        model = session.model
        capacity = len(self.prompt) + self.max_new_tokens - 1  # the last token is never fed back
        check_batch(model.config, len(runs), capacity, model.cache_type())
        for run in runs:
            run.begin()
        t0 = time.perf_counter()
        logits, totals.prompt_tokens = session.prefill(self.prompt)  # [V]
        totals.prefill_seconds = time.perf_counter() - t0
        for run in runs:
            run.stats.prompt_tokens, run.stats.prefill_seconds = totals.prompt_tokens, totals.prefill_seconds
        cache = BatchCache(model.config, len(runs), capacity, model.cache_type())
        cache.fill(session.cache)
        # RowByRow: each sample's numbers those it gets alone; on the session's helper thread, if any
        batch = Batch(model, cache, RowByRow(session.workers, session.run.helper), session.hooks)
        for i, gen in enumerate(runs):
            batch.join(Sample(gen, logits, i))  # every sample starts from the prompt's logits [V]
        t_decode = time.perf_counter()
        while True:
            drawn = batch.draw()
            totals.new_tokens += len(drawn)
            yield [(r.index, step) for r, step in drawn]
            if not batch.rows:
                return
            batch.step()
            totals.steps += 1
            totals.decode_seconds = time.perf_counter() - t_decode
            for r in batch.rows:
                r.gen.stats.decode_seconds = totals.decode_seconds

    def flush(self, i: int) -> str:
        return self.runs[i].flush()
