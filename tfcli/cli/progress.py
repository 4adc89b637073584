"""Progress on stderr while a command works, one helper for every wait over about 2 seconds.

One rule for every command: progress is for a person at a terminal. It is drawn on stderr, redrawn
in place and cleared when the work ends or Ctrl-C stops it; where stderr is not a terminal (a
pipe, a file, a CI log) it writes nothing, so that a log holds the results, the warnings and a
command's one-off notes (what a long wait is, the figures at its end), never a ticking counter.

Counted: work counted in its own units, "scoring 1,024 of 2,000 tokens · 3 s" (score, patch, ablate,
steer, heads, lens). Nothing is shown for a short run; after the first unit, a run estimated to take
LONG_SECONDS or more shows a line that counts the units and the seconds so far.

    with Counted("patching", "residual indices", "修补", "个残差位置") as step:
        run_patch(..., progress=step)         # step(done, total) after each unit

Waiting: a wait of unknown length (the kernels' first compile, bench's stages, a long pass): a
spinner, what is being done and the seconds so far, shown once the wait passes `after` seconds.

Bars: work counted in bytes, a bar per stage (convert, pull).

Under --lang zh (cli/lang.py) each speaks Chinese.

The analysis and engine functions only call step(done, total): they never print (STYLE.md).
"""

from __future__ import annotations

import time

LONG_SECONDS = 2.0  # a run estimated shorter than this stays silent


def elapsed(seconds: float) -> str:
    """12 s, 3 min 05 s."""
    seconds = int(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class _Live:
    """What a Live display redraws: text() asked again at every refresh, so the seconds go on
    between two steps; with a spinner in front, for a wait that counts nothing."""

    def __init__(self, text, spinner: bool = False, after: float = 0.0):
        from rich.spinner import Spinner

        self.text, self.spinner = text, Spinner("dots", style="cyan") if spinner else None
        self.shown_at = time.monotonic() + after  # a wait shorter than `after` shows nothing

    def __rich__(self):
        from rich.text import Text

        if time.monotonic() < self.shown_at:
            return Text("")
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
    def __init__(self, verb: str, unit: str, verb_zh: str = "", unit_zh: str = "", zh: bool | None = None,
                 estimate=None):
        """`estimate(seconds)`, if given, is told once, after the first unit, how long the whole run
        will take (lens: a run of more than 10 s says so first, whatever stderr is)."""
        from .lang import zh as speaks_zh

        zh = speaks_zh() if zh is None else zh
        self.verb, self.unit = (verb_zh or verb, unit_zh or unit) if zh else (verb, unit)
        self.zh, self.estimate = zh, estimate
        self.t0 = 0.0
        self.done = self.total = 0
        self.decided = False
        self.live = None

    def text(self, done: int | None = None, total: int | None = None) -> str:
        done, total = self.done if done is None else done, self.total if total is None else total
        spent = elapsed(time.perf_counter() - self.t0)
        if self.zh:
            return f"{self.verb}：第 {done:,} / {total:,} {self.unit} · {spent}"
        return f"{self.verb} {done:,} of {total:,} {self.unit} · {spent}"

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self.step

    def step(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        if self.decided or done <= 0 or done >= total:
            return
        self.decided = True  # after the first unit: how long the whole run will take
        seconds = (time.perf_counter() - self.t0) * total / done
        if self.estimate is not None:
            self.estimate(seconds)
        if seconds >= LONG_SECONDS:
            self.live = _live(_Live(self.text))
            if self.live is not None:
                self.live.start(refresh=True)  # drawn now, not at the first refresh

    def __exit__(self, *exc) -> None:  # Ctrl-C too: the line is cleared, the terminal left as it was
        if self.live is not None:
            self.live.stop()
            self.live = None


class Waiting:
    """A wait that counts nothing: a spinner, what is done and the seconds so far, on a terminal's
    stderr only, once the wait has lasted `after` seconds. start() and stop() (or `with`); update()
    says the next stage; stop() returns the seconds waited."""

    def __init__(self, what: str, after: float = 0.0):
        self.what, self.after, self.t0, self.live = what, after, 0.0, None

    def start(self) -> None:
        self.t0 = time.perf_counter()
        text = lambda: f"{self.what} · {elapsed(time.perf_counter() - self.t0)}"  # noqa: E731
        self.live = _live(_Live(text, spinner=True, after=self.after))
        if self.live is not None:
            self.live.start(refresh=True)

    def update(self, what: str) -> None:
        self.what = what
        if self.live is not None:
            self.live.refresh()  # a stage shorter than a refresh is shown all the same

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


class Bars:
    """Bars on a terminal's stderr, one per stage, driven by progress(stage, done, total) in bytes:
    `with Bars({"download": "downloading"}) as progress: work(progress=progress)`. The display starts
    with the first report, so that a command failing before any work shows only its error."""

    def __init__(self, names: dict[str, str]):
        self.names, self.bars, self.tasks = names, None, {}

    def __enter__(self):
        from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from .console import err

        if err.is_terminal:
            description = TextColumn("{task.description:<26}")
            columns = (SpinnerColumn(), description, BarColumn(), DownloadColumn(), TimeElapsedColumn())
            self.bars = Progress(*columns, console=err)
        return self.update

    def update(self, stage: str, done: int, total: int) -> None:
        bars = self.bars
        if bars is None:
            return
        if not self.tasks:
            bars.start()
        if stage not in self.tasks:
            for task in self.tasks.values():  # a new stage means the previous ones are over
                bars.update(task, completed=bars.tasks[task].total or 0)
            self.tasks[stage] = bars.add_task(self.names.get(stage, stage), total=total or None)
        bars.update(self.tasks[stage], completed=done, total=total or None)

    def __exit__(self, *exc) -> None:
        if self.bars is not None and self.tasks:
            self.bars.stop()
