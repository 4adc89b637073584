"""Progress of a long experiment on stderr, counted in its own work unit: "patching 12 of 31
residual indices". One rule for every command that can run over ~2 s (patch, ablate, steer, heads;
lens has its estimate and bar in cli/lens.py): nothing is said for a short run; after the first unit,
a run estimated to take LONG_SECONDS or more shows a line that counts the units, redrawn in place at
a terminal and written every PLAIN_EVERY seconds to a pipe or a file, so a log shows it is alive.

    with Counted("patching", "residual indices", "修补", "个残差位置") as step:
        run_patch(..., progress=step)         # step(done, total) after each unit

The analysis functions only call step(done, total): they never print (STYLE.md).
"""

from __future__ import annotations

import time

LONG_SECONDS = 2.0  # a run estimated shorter than this stays silent
PLAIN_EVERY = 5.0  # seconds between two lines when stderr is not a terminal


class Counted:
    def __init__(self, verb: str, unit: str, verb_zh: str = "", unit_zh: str = "", zh: bool = False):
        self.verb, self.unit = (verb_zh or verb, unit_zh or unit) if zh else (verb, unit)
        self.zh = zh
        self.t0 = self.last = 0.0
        self.shown = False
        self.live = None

    def text(self, done: int, total: int) -> str:
        if self.zh:
            return f"{self.verb}：第 {done:,} / {total:,} {self.unit}"
        return f"{self.verb} {done:,} of {total:,} {self.unit}"

    def __enter__(self):
        self.t0 = self.last = time.perf_counter()
        return self.step

    def step(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if not self.shown:
            if done <= 0 or done >= total or (now - self.t0) * total / done < LONG_SECONDS:
                return
            self.shown = True
            self._start(done, total)
            self.last = now
            return
        if self.live is not None:
            self.live.update(self._line(done, total))
        elif now - self.last >= PLAIN_EVERY and done < total:
            self._plain(done, total)
            self.last = now

    def _line(self, done: int, total: int):
        from rich.text import Text

        return Text(self.text(done, total), style="dim")

    def _start(self, done: int, total: int) -> None:
        from .console import err

        if err.is_terminal:
            from rich.live import Live

            self.live = Live(self._line(done, total), console=err, transient=True, refresh_per_second=4)
            self.live.start()
        else:
            self._plain(done, total)

    def _plain(self, done: int, total: int) -> None:
        from .console import note

        note(self.text(done, total))

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
