"""--quantize: a float32 (or float16) folder's matrices turned into GGUF blocks at load, for the
commands where speed and memory count (generate, chat, score, serve, bench)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer


class Kind(str, Enum):
    q8_0 = "q8_0"
    q4_0 = "q4_0"


Quantize = Annotated[
    Optional[Kind],
    typer.Option(
        "--quantize",
        help="Turn a folder's matrices into GGUF blocks at load and run them quantized, as a GGUF file runs: "
        "q8_0 (8 bits and a scale per 32 weights, 3.8x smaller than float32) or q4_0 (4 bits, 7.1x).",
        show_default=False,
    ),
]


def apply(lm, kind: Kind | None):
    """The loaded model with its matrices quantized (a model that already is, a GGUF, is refused)."""
    if kind is None:
        return lm
    from tfcli.engine.errors import UsageError
    from tfcli.engine.quantized import quantize_weights

    from .console import warn

    if lm.model.quantized():
        raise UsageError(f"{lm.name} is already quantized (a GGUF file runs as its blocks)", "drop --quantize")
    quantize_weights(lm.model, kind.value)
    why = kernels_ready()
    if why:
        warn(why)
    return lm


def kernels_ready() -> str | None:
    """Load the compiled kernels now, saying once on stderr when they have to be compiled (a first
    run); the one-line reason they cannot run (the NumPy path runs), or None."""
    from tfcli.engine.fast import prepare

    from .console import note
    from .progress import Waiting

    what = "compiling the kernels for this CPU (once; later runs load them)"
    waiting = Waiting(what)

    def compiling() -> None:  # called by prepare only when they have to be compiled
        waiting.start()
        if not waiting.on_terminal:  # a log says why the wait, once
            note(what, wrap=True)

    try:
        return prepare(compiling)
    finally:
        if waiting.t0:  # they were compiled (or tried): the spinner goes, the time stays
            seconds = waiting.stop()
            note(f"compiling the kernels took {seconds:.1f} s" if seconds < 10
                 else f"compiling the kernels took {seconds:.0f} s", wrap=True)
