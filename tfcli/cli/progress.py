"""Progress on stderr while a command works, one helper for every wait over about 2 seconds.

Counted: work counted in its own units, "scoring 1,024 of 2,000 tokens · 3 s" (score, patch, ablate,
steer, heads). Nothing is said for a short run; after the first unit, a run estimated to take
LONG_SECONDS or more shows a line that counts the units and the seconds so far, redrawn in place at
a terminal (and cleared when the run ends or Ctrl-C stops it). Where stderr is not a terminal,
the experiments (log=True) write the line every PLAIN_EVERY seconds, so that a log shows it is
alive; the others say nothing there.

    with Counted("patching", "residual indices", "修补", "个残差位置") as step:
        run_patch(..., progress=step)         # step(done, total) after each unit

Waiting: a wait of unknown length (the kernels' first compile): a spinner and the seconds so far,
on a terminal only.

The analysis and engine functions only call step(done, total): they never print (STYLE.md).
"""

from __future__ import annotations

import time

LONG_SECONDS = 2.0  # a run estimated shorter than this stays silent
PLAIN_EVERY = 5.0  # seconds between two lines when stderr is not a terminal


def elapsed(seconds: float) -> str:
    """12 s, 3 min 05 s."""
    seconds = int(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class _Live:
    """What a Live display redraws: text() asked again at every refresh, so the seconds go on
    between two steps; with a spinner in front, for a wait that counts nothing."""

    def __init__(self, text, spinner: bool = False):
        from rich.spinner import Spinner

        self.text, self.spinner = text, Spinner("dots", style="cyan") if spinner else None

    def __rich__(self):
        from rich.text import Text

        line = Text(self.text(), style="dim")
        if self.spinner is None:
            return line
        return Text.assemble(self.spinner.render(time.monotonic()), " ", line)


def _live(renderable):
    """A Live display on stderr, cleared when stopped, not started yet (the caller keeps it first,
    so that a Ctrl-C in the middle of start() still finds it to stop); None where stderr is not a
    terminal."""
    from rich.live import Live

    from .console import err

    if not err.is_terminal:
        return None
    return Live(renderable, console=err, transient=True, refresh_per_second=4)


class Counted:
    def __init__(self, verb: str, unit: str, verb_zh: str = "", unit_zh: str = "", zh: bool = False, *, log: bool = True):
        self.verb, self.unit = (verb_zh or verb, unit_zh or unit) if zh else (verb, unit)
        self.zh, self.log = zh, log
        self.t0 = self.last = 0.0
        self.done = self.total = 0
        self.shown = False
        self.live = None

    def text(self, done: int | None = None, total: int | None = None) -> str:
        done, total = self.done if done is None else done, self.total if total is None else total
        spent = elapsed(time.perf_counter() - self.t0)
        if self.zh:
            return f"{self.verb}：第 {done:,} / {total:,} {self.unit} · {spent}"
        return f"{self.verb} {done:,} of {total:,} {self.unit} · {spent}"

    def __enter__(self):
        self.t0 = self.last = time.perf_counter()
        return self.step

    def step(self, done: int, total: int) -> None:
        now = time.perf_counter()
        self.done, self.total = done, total
        if not self.shown:
            if done <= 0 or done >= total or (now - self.t0) * total / done < LONG_SECONDS:
                return
            self.shown = True
            self.live = _live(_Live(self.text))
            if self.live is not None:
                self.live.start(refresh=True)  # drawn now, not at the first refresh
            elif self.log:
                self._plain()
            self.last = now
            return
        if self.live is None and self.log and now - self.last >= PLAIN_EVERY and done < total:
            self._plain()
            self.last = now

    def _plain(self) -> None:
        from .console import note

        note(self.text())

    def __exit__(self, *exc) -> None:  # Ctrl-C too: the line is cleared, the terminal left as it was
        if self.live is not None:
            self.live.stop()
            self.live = None


class Waiting:
    """A wait that counts nothing: a spinner, what is done and the seconds so far, on a terminal's
    stderr only. start() and stop() (or `with`); stop() returns the seconds waited."""

    def __init__(self, what: str):
        self.what, self.t0, self.live = what, 0.0, None

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.live = _live(_Live(lambda: f"{self.what} · {elapsed(time.perf_counter() - self.t0)}", spinner=True))
        if self.live is not None:
            self.live.start(refresh=True)

    @property
    def on_terminal(self) -> bool:
        return self.live is not None

    def stop(self) -> float:
        if self.live is not None:
            self.live.stop()
            self.live = None
        return time.perf_counter() - self.t0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
