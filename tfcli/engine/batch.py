"""Several continuations of one prompt at once: a KV cache for B sequences, and their generation.

A decode step reads every weight once and does little arithmetic with each, so B sequences cost
barely more than one when their B new tokens go through each matrix product as one [B, D] matrix
(Transformer.decode_batch). The prompt pass is shared: it runs once, and its keys and values are
copied into every sequence's part of the batch cache. Each sequence then samples with its own
sampler (its own settings and random stream) and stops on its own EOS, stop string or length;
a finished sequence leaves the batch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .config import ModelConfig
from .errors import UsageError
from .generate import Generation, Session, Step
from .kvcache import BATCH_HINT, BatchCache
from .memory import check_allocation
from .sampling import Sampler
from .fast.executor import RowByRow
from .tokenizer import Tokenizer



def batch_bytes(config: ModelConfig, rows: int, capacity: int) -> int:
    """Memory a batch of `rows` sequences of `capacity` positions needs: their KV caches, and a
    step's largest temporaries (the [B, V] logits and softmax, the [B, 2F] MLP activations)."""
    return rows * (config.kv_cache_bytes(capacity) + 4 * (3 * config.vocab_size + 3 * 2 * config.d_ff))


def check_batch(config: ModelConfig, rows: int, capacity: int) -> None:
    """Refuse a batch that does not fit in memory before anything of it is allocated."""
    if rows < 1:
        raise UsageError(f"{{samples}} must be at least 1, not {rows}")
    check_allocation(batch_bytes(config, rows, capacity), f"{rows:,} samples of {capacity:,} positions", BATCH_HINT)


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
        self,
        session: Session,
        tokenizer: Tokenizer,
        prompt: list[int],
        samplers: list[Sampler],
        max_new_tokens: int,
        stop: tuple[str, ...] = (),
        eos_ids: tuple[int, ...] = (),
        show_top: int = 0,
    ):
        if not samplers:
            raise UsageError("{samples} must be at least 1, not 0")
        self.session = session
        # One Generation per sample: it checks the prompt and budget, and turns logits into steps.
        self.runs = [
            Generation(session, tokenizer, prompt, s, max_new_tokens, stop=stop, eos_ids=eos_ids, show_top=show_top) for s in samplers
        ]
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens
        self.totals = Totals(samples=len(samplers))

    def __iter__(self) -> Iterator[list[tuple[int, Step]]]:
        session, totals, runs = self.session, self.totals, self.runs
        model = session.model
        capacity = len(self.prompt) + self.max_new_tokens - 1  # the last token is never fed back
        check_batch(model.config, len(runs), capacity)
        for run in runs:
            run.begin()
        t0 = time.perf_counter()
        logits, totals.prompt_tokens = session.prefill(self.prompt)  # [V]
        totals.prefill_seconds = time.perf_counter() - t0
        for run in runs:
            run.stats.prompt_tokens, run.stats.prefill_seconds = totals.prompt_tokens, totals.prefill_seconds
        run = RowByRow(session.workers, session.run.helper)  # each sample's numbers those it gets alone; the session's helper thread, if any
        cache = BatchCache(model.config, len(runs), capacity)
        cache.fill(session.cache)
        live = list(range(len(runs)))  # sample index of each row of the batch
        rows = np.broadcast_to(logits, (len(runs), len(logits)))  # [B, V]: every sample starts from the prompt's logits
        t_decode = time.perf_counter()
        while True:
            tokens, still, steps = [], [], []
            for row, i in enumerate(live):
                step = runs[i].take(rows[row])
                totals.new_tokens += 1
                steps.append((i, step))
                if not runs[i].stats.stop_reason:
                    tokens.append(step.token)
                    still.append(row)
            yield steps
            if not still:
                return
            if len(still) < len(live):
                cache.keep(still)
                live = [live[row] for row in still]
            with run.around_step(len(live)):
                rows = model.decode_batch(np.asarray(tokens), cache, run, session.hooks)  # [B, V]
            totals.steps += 1
            totals.decode_seconds = time.perf_counter() - t_decode
            for i in live:
                runs[i].stats.decode_seconds = totals.decode_seconds

    def flush(self, i: int) -> str:
        return self.runs[i].flush()
