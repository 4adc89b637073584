"""The engine thread: requests join one decode step as they arrive and leave it as they finish.

Every request becomes a `Job` of rows (one per prompt and choice). The one thread that runs the
model loops: it admits waiting jobs while the batch has room (each row's prompt pass fills its own
KVCache; the short prompts of jobs that arrive together share one pass), and steps its rows as
`generate --samples` does (engine/batch.py, Batch): every row draws its next token from its logits
with its own sampler, seed, stop strings and budget, and the rows
still going run as one decode step over `Slots` (engine/slots.py), each at its own position. A
finished or cancelled row leaves the batch: it is not listed in the next step. HTTP handlers never
touch the model: they submit jobs and receive `Event`s through the job's `emit`, which is called on
this thread.

The waiting line is bounded: a job that finds it full is refused at once (`Busy`, a 503), so that
a burst is answered, never left to hang.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from tfcli.engine import batch
from tfcli.engine.errors import TfcliError
from tfcli.engine.fast import FAST, Fast, RowByRow
from tfcli.engine.fast.run.kernel_products import FEW_ROWS
from tfcli.engine.generate import Generation, Session, prefill_together
from tfcli.engine.grammar import Grammar
from tfcli.engine.kvcache import KVCache
from tfcli.engine.loader import LoadedModel
from tfcli.engine.sampling import Sampler, SamplingParams
from tfcli.engine.score import log_softmax
from tfcli.engine.slots import Slots

from .events import Done, Echoed, Event, Failed, Finished, Token, TokenLogprob
from .promptcache import PromptCache

log = logging.getLogger("tfcli.serve")

PROMPT_CHUNK = 256  # prompt positions per pass: a longer prompt is run a part at a time, between decode steps
# Seconds an idle engine waits for the requests being read and checked, so that prompts that came together share a pass.
GATHER = 0.003


class Busy(Exception):
    """The waiting line is full, or the server is stopping."""


@dataclass
class Job:
    prompts: list[list[int]]
    params: list[SamplingParams]  # one per row: row i is prompt i // n, choice i
    n: int
    max_tokens: int  # 0: only the prompt (echo with logprobs)
    emit: Callable[[Event], None]
    stop: tuple[str, ...] = ()
    eos_ids: tuple[int, ...] = ()
    logprobs: int | None = None  # top N with each token's log-probability; None: none
    echo_logprobs: bool = False  # the prompt's log-probabilities too
    grammar: Grammar | None = None  # every row follows it (engine/grammar.py), each from its own start
    cancelled: bool = False  # set by the handler when its client goes away
    open_rows: int = 0
    cached_tokens: int | None = None  # prompt tokens the prompt cache gave (None: no prompt cache)

    @property
    def rows(self) -> int:
        return len(self.prompts) * self.n if self.max_tokens > 0 else 0


@dataclass(eq=False)
class Row(batch.Row):
    """A row of the batch (its generation and logits) and the job and choice it answers."""

    job: Job
    choice: int
    cache: KVCache | None = None  # its own keys and values (kept in the prompt cache when it ends)


@dataclass
class Arrival:
    """A request being read and checked (Batcher.arriving)."""

    done: bool = False


@dataclass
class Call:
    fn: Callable[[], object]
    future: Future = field(default_factory=Future)


class Batcher:
    def __init__(
        self,
        lm: LoadedModel,
        workers: int = 1,
        max_rows: int = 8,
        queue: int = 16,
        invariant: bool = True,
        prompt_cache: int = 0,
    ):
        self.lm, self.model = lm, lm.model
        self.prompts = PromptCache(prompt_cache)  # bytes; 0: off
        self.max_rows, self.queue = max_rows, queue
        self.run = Fast(workers)  # prompt passes; its helper thread, if any, is shared with the steps
        # invariant: each row's numbers those of the sequence alone, whatever its company (fast.executor.RowByRow)
        step_run = RowByRow(workers, self.run.helper) if invariant else Fast(workers, self.run.helper, batch=True)
        self.batch = batch.Batch(self.model, Slots([]), step_run)  # the rows decoding, each through its own KVCache
        self.workers = workers
        self.waiting: deque[Job] = deque()
        self.calls: deque[Call] = deque()
        # admitted jobs whose prompts are being run, a part's positions per turn
        self.filling: deque[tuple[Job, Iterator[None]]] = deque()
        self.ran = 0  # prompt positions run in this turn of the loop
        self.changed = threading.Condition()
        self.stopping = False
        self.steps = 0  # decode steps run (for tests and the benchmark)
        self.coming = 0  # requests being read and checked (arriving()), not yet submitted
        self.thread = threading.Thread(target=self._loop, name="tfcli-engine", daemon=True)

    @property
    def rows(self) -> list[Row]:
        return self.batch.rows

    def start(self) -> None:
        self.thread.start()

    @contextmanager
    def arriving(self) -> Iterator[Arrival]:
        """Around an HTTP handler's reading and checking of a request, up to its submit(job, arrival):
        an idle engine with a job to start waits for such requests (GATHER at most), so that
        requests sent together start together, their prompts in one pass."""
        arrival = Arrival()
        with self.changed:
            self.coming += 1
        try:
            yield arrival
        finally:
            with self.changed:
                self._arrived(arrival)

    def _arrived(self, arrival: Arrival | None) -> None:
        if arrival is not None and not arrival.done:  # under self.changed
            arrival.done = True
            self.coming -= 1
            self.changed.notify()

    def submit(self, job: Job, arrival: Arrival | None = None) -> None:
        with self.changed:
            self._arrived(arrival)
            if self.stopping:
                raise Busy("the server is stopping")
            if len(self.waiting) >= self.queue:
                raise Busy(f"{len(self.waiting)} requests are waiting already")
            self.waiting.append(job)
            self.changed.notify()

    def call(self, fn: Callable[[], object]) -> Future:
        """Run fn on the engine thread between two steps (the explorer's passes use the model too)."""
        c = Call(fn)
        with self.changed:
            if self.stopping:
                raise Busy("the server is stopping")
            if len(self.waiting) + len(self.calls) >= self.queue:
                raise Busy("the waiting line is full")
            self.calls.append(c)
            self.changed.notify()
        return c.future

    def cancel(self, job: Job) -> None:
        with self.changed:
            job.cancelled = True
            self.changed.notify()

    def stop(self, timeout: float = 5.0) -> None:
        """Refuse new jobs, end the running ones (finish_reason "abort") and the waiting ones."""
        with self.changed:
            self.stopping = True
            self.changed.notify()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    @property
    def load(self) -> dict:
        load = {"running": self._used(), "waiting": len(self.waiting), "max_rows": self.max_rows, "queue": self.queue}
        if self.prompts:
            load["prompt_cache"] = self.prompts.figures()
        return load

    def _used(self) -> int:
        """Rows decoding, and the rows of the jobs whose prompts are still being run."""
        return len(self.rows) + sum(job.rows for job, _ in self.filling)

    def _loop(self) -> None:
        while True:
            with self.changed:
                while not (self.waiting or self.rows or self.filling or self.calls or self.stopping):
                    self.changed.wait()
                if (
                    self.waiting and self.coming and not (self.rows or self.filling)
                ):  # more are on their way: start them together
                    self.changed.wait_for(lambda: not self.coming or self.stopping, GATHER)
                if self.stopping:
                    self._end_all()
                    return
                calls = list(self.calls)
                self.calls.clear()
            for c in calls:
                if c.future.set_running_or_notify_cancel():
                    try:
                        c.future.set_result(c.fn())
                    except BaseException as e:  # noqa: BLE001 - handed to the waiting handler
                        c.future.set_exception(e)
            # Prompt positions run this turn: up to one part's, then a decode step, so that a long prompt does not
            # stall the others; jobs that arrive meanwhile are admitted too, so that prompts that came together
            # start together.
            self.ran = 0
            while self.ran < PROMPT_CHUNK:
                admit = self._admit()
                self._begin(admit)
                self.filling = deque(f for f in self.filling if not f[0].cancelled)
                if self.filling:
                    self._guarded([self.filling[0][0]], self._fill)
                elif not admit:
                    break
            self.batch.keep(lambda r: not r.job.cancelled)  # a client that left frees its rows now
            if self.rows:
                self._guarded({id(r.job): r.job for r in self.rows}.values(), self._step)

    def _admit(self) -> list[Job]:
        """The waiting jobs that fit in the batch now, first come first; a job larger than the whole
        batch when nothing else runs."""
        with self.changed:
            admit, used = [], self._used()
            while (
                not self.stopping
                and self.waiting
                and (used + self.waiting[0].rows <= self.max_rows or (used == 0 and not admit))
            ):
                job = self.waiting.popleft()
                admit.append(job)
                used += job.rows
            return admit

    def _begin(self, admit: list[Job]) -> None:
        """Admitted jobs start. Their short prompts, two or more, in one pass where it gives each the
        numbers of its pass alone (generate.prefill_together: every weight read once for all); their
        rows join the batch at once. The other jobs' prompts are run a part at a time (_start)."""
        together, rows = [], 0
        for job in admit:
            n = sum(len(ids) for ids in job.prompts)
            cached = self.prompts and any(
                self.prompts.longest(ids)[0] for ids in job.prompts
            )  # its own pass, from the prefix kept
            if job.max_tokens > 0 and not job.echo_logprobs and not cached and rows + n <= FEW_ROWS:
                together.append(job)
                rows += n
        if sum(len(job.prompts) for job in together) < 2 or not self.run.rows_apart(self.model, rows):
            together = []
        for job in admit:
            if not any(job is j for j in together):
                self.filling.append((job, self._start(job)))
        if together:
            self._guarded(together, self._prefill_together, together)

    def _prefill_together(self, jobs: list[Job]) -> None:
        """The jobs' prompts in one pass (each through a session of its own), then their rows join."""
        sessions = [self._session(job, ids) for job in jobs for ids in job.prompts]
        prompts = [ids for job in jobs for ids in job.prompts]
        logits = prefill_together(sessions, prompts)  # [B, V]
        if logits is None:
            raise RuntimeError("the prompts could not share a pass")  # rows_apart said they could
        self.ran += sum(len(ids) for ids in prompts)
        i = 0
        for job in jobs:
            new = []
            for p, ids in enumerate(job.prompts):
                new += self._choices(job, p, sessions[i], ids, logits[i])
                i += 1
            self._join(job, new)

    def _guarded(self, jobs, fn, *args) -> None:
        """Run fn; if it fails, the jobs involved fail (a 400 for a known error) and the loop goes on."""
        try:
            fn(*args)
        except TfcliError as e:
            self._fail(jobs, Failed(str(e), 400))
        except Exception as e:  # noqa: BLE001 - a bug must not stop the server; it is logged with its traceback
            log.error("engine error: %s\n%s", e, traceback.format_exc())
            self._fail(jobs, Failed(f"internal error: {type(e).__name__}: {e}", 500))

    def _fail(self, jobs, event: Failed) -> None:
        failed = {id(j) for j in jobs}
        self.batch.keep(lambda r: id(r.job) not in failed)
        self.filling = deque(f for f in self.filling if id(f[0]) not in failed)
        for j in jobs:
            j.cancelled = True
            j.emit(event)
            j.emit(Finished())

    def _fill(self) -> None:
        """Run the next part of the first filling job's prompts; once they are all run, its rows decode."""
        job, parts = self.filling[0]
        if next(parts, StopIteration) is StopIteration:
            self.filling.popleft()

    def _start(self, job: Job) -> Iterator[None]:
        """The prompt passes of a job's rows, a part of at most PROMPT_CHUNK tokens per turn (it
        yields between two parts): each prompt once, its cache copied for each choice."""
        new: list[tuple[Row, KVCache]] = []  # each row and its own cache
        for p, ids in enumerate(job.prompts):
            if p:
                yield
            session = self._session(job, ids)
            if job.echo_logprobs:
                logits, echoed = yield from self._prompt_pass(session, ids, job.logprobs or 0)
                job.emit(Echoed(p, list(ids), echoed))
            elif job.max_tokens > 0:
                self._reuse(job, session, ids)
                start = len(session.tokens)  # positions the prompt cache gave, else 0
                for end in range(start + PROMPT_CHUNK, len(ids) + PROMPT_CHUNK, PROMPT_CHUNK):
                    if end > start + PROMPT_CHUNK:
                        yield
                    logits, ran = session.prefill(ids[:end])  # [V]; the cache holds the part before already
                    self.ran += ran
            if job.max_tokens > 0:
                new += self._choices(job, p, session, ids, logits)
        self._join(job, new)

    def _reuse(self, job: Job, session: Session, ids: list[int]) -> None:
        """The session starts from the longest prefix of ids the prompt cache holds, if any."""
        if not self.prompts:
            return
        cache, n = self.prompts.take(ids, session.capacity)
        if cache is not None:
            session.cache, session.tokens = cache, list(ids[:n])
        job.cached_tokens = (job.cached_tokens or 0) + n

    def _session(self, job: Job, ids: list[int]) -> Session:
        """A new session for a prompt of the job, on the engine's executor."""
        session = Session(
            self.model, capacity=max(len(ids), len(ids) + job.max_tokens - 1)
        )  # the last token is never fed back
        session.run, session.workers = self.run, self.workers
        return session

    def _choices(
        self, job: Job, p: int, session: Session, ids: list[int], logits: np.ndarray
    ) -> list[tuple[Row, KVCache]]:
        """Prompt p's rows, a choice each, from its logits after the prompt [V]; each row with its own
        cache (the prompt's, copied for the choices after the first)."""
        new = []
        for j in range(job.n):
            i = p * job.n + j
            cache = session.cache if j == 0 else session.cache.copy()
            constraint = None if job.grammar is None else job.grammar.start()
            gen = Generation(
                session,
                self.lm.tokenizer,
                ids,
                Sampler(job.params[i]),
                job.max_tokens,
                stop=job.stop,
                eos_ids=job.eos_ids,
                constraint=constraint,
            )
            gen.begin()
            new.append((Row(gen=gen, logits=logits, job=job, choice=i, cache=cache), cache))
        return new

    def _join(self, job: Job, new: list[tuple[Row, KVCache]]) -> None:
        """The job's rows join the batch (a job with none, only its prompt's log-probabilities, is done)."""
        job.open_rows = len(new)
        for row, cache in new:
            self.batch.join(row, cache)
        if not new:
            job.emit(Finished())

    def _prompt_pass(self, session: Session, ids: list[int], top_n: int):
        """The prompt through the session's cache with every position's logits, as `tfcli score`
        computes them (chunks of the same size, float64 log-sum-exp), yielding between two chunks.
        Returns (logits after the last [V], per token: None for the first, then its
        log-probability and the top N)."""
        tokens = np.asarray(ids)
        out: list[TokenLogprob | None] = [None]
        session.cache.reset()
        for a in range(0, len(ids), PROMPT_CHUNK):
            if a:
                yield
            rows = self.model.forward(tokens[a : a + PROMPT_CHUNK], session.cache, all_logits=True, run=FAST)  # [t, V]
            self.ran += len(rows)
            last = rows[-1]
            lp = log_softmax(rows)  # [t, V]
            for r in range(len(rows)):
                target = a + r + 1
                if target < len(ids):
                    out.append(_token_logprob(lp[r], int(tokens[target]), top_n))
        session.tokens = list(ids)
        return last, out

    def _step(self) -> None:
        """Each row draws a token (a finished row leaves); the rows still going run one decode step together."""
        for r, step in self.batch.draw():
            lp = (
                _token_logprob(log_softmax(r.logits[None])[0], step.token, r.job.logprobs)
                if r.job.logprobs is not None
                else None
            )
            r.job.emit(Token(r.choice, step.token, step.text, lp))
            reason = r.gen.stats.stop_reason
            if reason:
                self._close(r, "length" if reason == "max tokens" else "stop")
        if self.batch.rows:
            self.batch.step()
            self.steps += 1

    def _close(self, r: Row, reason: str) -> None:
        if (
            self.prompts and r.cache is not None and r.choice % r.job.n == 0
        ):  # a prompt's first choice: its prompt and answer kept
            self.prompts.keep(r.gen.history, r.cache)
        r.job.emit(Done(r.choice, reason, r.gen.stats.new_tokens))
        r.job.open_rows -= 1
        if r.job.open_rows == 0:
            r.job.emit(Finished())

    def _end_all(self) -> None:
        for r in self.rows:
            if not r.job.cancelled:
                tail = r.gen.flush()
                if tail:
                    r.job.emit(Token(r.choice, -1, tail, None))
                self._close(r, "abort")
        self.batch.keep(lambda r: False)
        for job in [job for job, _ in self.filling] + list(self.waiting):
            job.emit(Failed("the server is stopping", 503))
            job.emit(Finished())
        self.waiting.clear()
        self.filling.clear()
        for c in self.calls:
            c.future.cancel()
        self.calls.clear()


def _token_logprob(lp: np.ndarray, token: int, top_n: int) -> TokenLogprob:
    """A token's log-probability and the top N of the row lp [V]."""
    top: list[tuple[int, float]] = []
    if top_n > 0:
        ids = np.argpartition(-lp, top_n - 1)[:top_n]
        ids = ids[np.argsort(-lp[ids], kind="stable")]  # [N] most likely first
        top = [(int(i), float(lp[i])) for i in ids]
    return TokenLogprob(token, float(lp[token]), top)
