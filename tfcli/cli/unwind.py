"""Long writes that a signal must not leave half done: SIGTERM unwinds as Ctrl-C does, and the
stages of a pull or a conversion as bars on a terminal. Shared by convert, pull and data."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tfcli.engine.errors import TfcliError

_STAGES = {
    "wait": "waiting for another pull of this model",
    "download": "downloading",
    "extract": "extracting the GGUF",
    "convert": "dequantizing to float32",
    "quantize": "writing the GGUF",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised wherever the process is, so that it unwinds and cleans up exactly as Ctrl-C does."""


class TerminatedError(TfcliError):
    exit_code = 143  # 128 + SIGTERM, what a shell reports for a process ended by it


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within the block, SIGTERM (`kill PID`, a container stopping, a CI timeout) unwinds like Ctrl-C:
    half-written folders are removed on the way out. Without it, Python dies on the spot and leaves
    them. A second SIGTERM while cleaning up is ignored, so that the clean-up finishes."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except Terminated:
        raise TerminatedError("terminated (SIGTERM); nothing half-written was left behind") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def progress_bars():
    """Bars on a terminal's stderr, one per stage, driven by the engine's progress(stage, done, total)
    (cli/progress.py's Bars: nothing where stderr is not a terminal)."""
    from .progress import Bars

    return Bars(_STAGES)
