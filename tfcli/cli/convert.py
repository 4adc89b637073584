"""tfcli convert: turn a llama.cpp GGUF file into a model folder tfcli (and transformers) can load,
or a model folder into a GGUF file (--quantize) that llama.cpp, transformers and tfcli run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tfcli.engine.errors import TfcliError

from .console import note, out

# What each stage of the engine's progress(stage, done, total) calls is shown as.
_STAGES = {
    "wait": "waiting for another pull of this model",
    "download": "downloading",
    "extract": "extracting the GGUF",
    "convert": "dequantizing to float32",
    "quantize": "writing the GGUF",
}


class Kind(str, Enum):
    q8_0 = "q8_0"
    q4_0 = "q4_0"
    f16 = "f16"
    f32 = "f32"


def convert(
    source: Annotated[str, typer.Argument(help="A .gguf file (llama.cpp format) to turn into a folder; with --quantize, a model folder or name to write as a GGUF.", show_default=False)],
    target: Annotated[Path, typer.Argument(help="The folder to create (model.safetensors, config.json, tokenizer.json ...); with --quantize, the .gguf file to write.", show_default=False)],
    quantize: Annotated[
        Optional[Kind],
        typer.Option(
            "--quantize",
            help="Write SOURCE (a model folder) as the GGUF file TARGET, its matrices in this type: q8_0 (8 bits and a scale per 32 weights), "
            "q4_0 (4 bits), f16 or f32. Norms and biases stay f32.",
            show_default=False,
        ),
    ] = None,
    merge_lora: Annotated[Optional[Path], typer.Option(
        "--merge-lora", help="Write SOURCE (a model folder, name or GGUF file) with this LoRA adapter merged into its "
        "weights as the float32 folder TARGET (what peft's merge_and_unload saves).", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Replace TARGET if it exists (only once the new one is complete).")] = False,
) -> None:
    """Dequantize a GGUF file into a Hugging Face-style folder of float32 weights, or (--quantize) write a folder as a GGUF file. Llama, Qwen2, Qwen3, Gemma 3 and Phi-3 files become folders; Llama and Qwen2 folders (float32, float16 or bf16) become GGUF files.

    The folder holds model.safetensors, config.json, generation_config.json, tokenizer.json,
    tokenizer_config.json (with the chat template, also in chat_template.jinja) and
    tfcli-manifest.json (sha256 of every file). It is written next to TARGET and renamed into place
    at the end, so a failure, Ctrl-C (exit 130) or SIGTERM (exit 143) leaves nothing half-written.
    An existing TARGET folder must be empty; --force replaces one only if it holds a model tfcli wrote
    and nothing else (never the GGUF, never files of yours). Weight types: F32, F16, BF16,
    Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and the k-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (as in Q4_K_M files).

    With --quantize TYPE, SOURCE is a model folder (or a model name) and TARGET a .gguf file,
    written as llama.cpp's convert_hf_to_gguf.py writes the model: its hyperparameters, its
    byte-level BPE tokenizer and chat template, the tensors under llama.cpp's names. The matrices
    are quantized as llama.cpp's quantizers do it; a matrix whose rows are not whole blocks of 32
    is written in F16 (said on stderr). The file, too, appears only once complete; an existing
    TARGET is replaced only with --force.

    Examples:

      tfcli convert SmolLM2-135M-Instruct.Q4_1.gguf smollm2

      tfcli generate -m ./smollm2 "The capital of France is" -t 0

      tfcli convert ./smollm2 smollm2.q8_0.gguf --quantize q8_0

      tfcli generate -m smollm2.q8_0.gguf "The capital of France is" -t 0

      tfcli convert smollm2 smollm2-tuned --merge-lora my-adapter
    """
    if merge_lora is not None:
        return _merge_lora(source, target, merge_lora, force, quantize)
    if quantize is not None:
        return _to_gguf(source, target, quantize.value, force)
    if target.suffix.lower() == ".gguf" and not source.lower().endswith(".gguf"):
        from tfcli.engine.errors import UsageError

        raise UsageError(f"writing the GGUF file {target} needs --quantize", "give the weight type: --quantize q8_0, q4_0, f16 or f32")
    from tfcli.store.gguf import convert as convert_gguf

    t0 = time.perf_counter()
    from tfcli.numbers import size

    with sigterm_unwinds(), progress_bars() as progress:
        result = convert_gguf(Path(source), target, replace=force, progress=progress)
    types = ", ".join(f"{n} {name}" for name, n in sorted(result.types.items(), key=lambda kv: -kv[1]))
    note(
        f"{result.n_params:,} parameters ({types} tensors) -> {size(result.nbytes)} of float32 "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    out.print(str(result.path), soft_wrap=True, markup=False)


def _to_gguf(source: str, target: Path, kind: str, force: bool) -> None:
    """SOURCE (a model folder, or a name tfcli resolves) written as the GGUF file TARGET."""
    from tfcli.engine.errors import UsageError
    from tfcli.numbers import size
    from tfcli.store.gguf.write import write_gguf
    from tfcli.store.registry import resolve

    if source.lower().endswith(".gguf") and Path(source).is_file():
        raise UsageError(
            f"{source} is a GGUF file already; --quantize writes a GGUF from a model folder",
            f"widen it to a folder first: tfcli convert {source} DIR; then tfcli convert DIR {target} --quantize {kind}",
        )
    t0 = time.perf_counter()
    folder = Path(source) if Path(source).is_dir() else resolve(source)  # a folder here, else a model name
    with sigterm_unwinds(), progress_bars() as progress:
        result = write_gguf(folder, target, kind, replace=force, progress=progress)
    if result.widened:
        n = len(result.widened)
        note(f"{n} {'matrix' if n == 1 else 'matrices'} written in F16: their rows of {result.row:,} weights are not whole blocks of 32 ({result.widened[0]}, ...)")
    types = ", ".join(f"{n} {name}" for name, n in sorted(result.types.items(), key=lambda kv: -kv[1]))
    note(f"{result.n_params:,} parameters ({types} tensors) -> {size(result.nbytes)} of GGUF in {time.perf_counter() - t0:.1f} s")
    out.print(str(result.path), soft_wrap=True, markup=False)


def _merge_lora(source: str, target: Path, adapter: Path, force: bool, quantize) -> None:
    """SOURCE with the adapter merged, written as the model folder TARGET (engine/train/lora.py)."""
    from tfcli.engine.errors import UsageError
    from tfcli.engine.train.folder import write_files
    from tfcli.engine.train.lora import merged_folder_files

    from .options import model_folder

    if quantize is not None or target.suffix.lower() == ".gguf":
        folder = target.with_suffix("")
        raise UsageError("--merge-lora writes a model folder, not a GGUF file",
                         f"merge into {folder}, then: tfcli convert {folder} {target} --quantize q8_0")  # fmt: skip
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not force)):
        raise UsageError(f"{target} already exists", "give another TARGET, or --force to write the merged model in it")
    t0 = time.perf_counter()
    files = merged_folder_files(model_folder(source), adapter)
    with sigterm_unwinds():
        write_files(target, files)
    note(f"{source} with {adapter} merged -> {target} in {time.perf_counter() - t0:.1f} s")
    out.print(str(target), soft_wrap=True, markup=False)


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
