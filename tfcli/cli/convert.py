"""tfcli convert: turn a llama.cpp GGUF file into a model folder tfcli (and transformers) can load."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from tfcli.engine.errors import TfcliError

from .console import err, note, out

# What each stage of the engine's progress(stage, done, total) calls is shown as.
_STAGES = {
    "wait": "waiting for another pull of this model",
    "download": "downloading",
    "extract": "extracting the GGUF",
    "convert": "dequantizing to float32",
}


def convert(
    gguf_file: Annotated[Path, typer.Argument(help="The .gguf file (llama.cpp format) of a Llama or Qwen2 model.", show_default=False)],
    out_dir: Annotated[Path, typer.Argument(help="The folder to create: model.safetensors, config.json, tokenizer.json ...", show_default=False)],
    force: Annotated[bool, typer.Option("--force", "-f", help="Replace OUT_DIR if it exists (only once the new folder is complete).")] = False,
) -> None:
    """Dequantize a Llama, Qwen2, Qwen3, Gemma 3 or Phi-3 GGUF file into a Hugging Face-style folder of float32 weights.

    The folder holds model.safetensors, config.json, generation_config.json, tokenizer.json,
    tokenizer_config.json (with the chat template, also in chat_template.jinja) and
    tfcli-manifest.json (sha256 of every file). It is written next to OUT_DIR and renamed into place
    at the end, so a failure, Ctrl-C (exit 130) or SIGTERM (exit 143) leaves nothing half-written.
    An existing OUT_DIR must be empty; --force replaces one only if it holds a model tfcli wrote
    and nothing else (never the GGUF, never files of yours). Weight types: F32, F16, BF16,
    Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and the k-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (as in Q4_K_M files).

    Examples:

      tfcli convert SmolLM2-135M-Instruct.Q4_1.gguf smollm2

      tfcli generate -m ./smollm2 "The capital of France is" -t 0
    """
    from tfcli.store.gguf import convert as convert_gguf

    t0 = time.perf_counter()
    from tfcli.numbers import size

    with sigterm_unwinds(), progress_bars() as progress:
        result = convert_gguf(gguf_file, out_dir, replace=force, progress=progress)
    types = ", ".join(f"{n} {name}" for name, n in sorted(result.types.items(), key=lambda kv: -kv[1]))
    note(
        f"{result.n_params:,} parameters ({types} tensors) -> {size(result.nbytes)} of float32 "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    out.print(str(result.path), soft_wrap=True, markup=False)


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


@contextmanager
def progress_bars():
    """Rich progress bars on stderr, one per stage, driven by the engine's progress(stage, done, total).

    The display starts with the first report, so that a command failing before any work shows only its error.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bars = Progress(SpinnerColumn(), TextColumn("{task.description:<26}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(), console=err)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if not tasks:
            bars.start()
        if stage not in tasks:
            for task in tasks.values():  # a new stage means the previous ones are over
                bars.update(task, completed=bars.tasks[task].total or 0)
            tasks[stage] = bars.add_task(_STAGES.get(stage, stage), total=total or None)
        bars.update(tasks[stage], completed=done, total=total or None)

    try:
        yield update
    finally:
        if tasks:
            bars.stop()
