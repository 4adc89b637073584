"""tfcli bench: how fast a model runs on this machine, and how close that is to the hardware limit."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Optional

import typer

from . import options
from .console import err, note, out


def bench(
    model: options.Model = None,
    prompt_tokens: Annotated[
        Optional[str],
        typer.Option("--prompts", help="Prompt lengths to time the prompt pass with, comma-separated. (default: 16,128,512, the longer ones cut to the model's context)", show_default=False),
    ] = None,
    new_tokens: Annotated[Optional[int], typer.Option("--new-tokens", "-n", help="Tokens to decode per run. (default: 128, or what the context has room for)", show_default=False)] = None,
    runs: Annotated[int, typer.Option("--runs", help="Runs per figure; the median is reported.")] = 3,
    threads: options.Threads = None,
    as_json: options.Json = False,
) -> None:
    """Measure load time, prompt (prefill) and decode speed, peak memory, and the roofline.

    Decoding reads every weight once per token, so memory bandwidth caps it at
    bandwidth / weight bytes tokens per second: the 'ceiling' below, measured on this machine.

    Example:

      tfcli bench -m smollm2 --runs 3
    """
    from tfcli.engine import bench as engine_bench
    from tfcli.engine.families import load_config

    n_threads = options.apply_threads(threads)
    folder = options.model_folder(model)
    n_ctx = load_config(folder / "config.json").n_ctx  # the shape only: bench.run loads (and times) the model
    prompts, new_tokens = _sizes(engine_bench, n_ctx, prompt_tokens, new_tokens, runs)
    from tfcli.engine.threads import available_cpus, busy_cpus

    before = busy_cpus()
    r = _measure(engine_bench, folder, prompts, new_tokens, runs, n_threads)
    after = busy_cpus()
    busy = max((n for n in (before, after) if n is not None), default=None)  # other processes' running tasks, at the start and the end
    fraction = r.decode_tps / r.ceiling_tps if r.ceiling_tps else 0.0
    name = model or "shakespeare"
    if as_json:
        from .json import emit

        emit({"model": name, **r.__dict__, "prompts": prompts, "new_tokens": new_tokens, "runs": runs, "ceiling_fraction": fraction, "threads": n_threads, "busy_cores": busy})
        return
    _render(name, n_threads, r, new_tokens, runs, fraction, _formats(folder))
    if busy:
        cores = available_cpus()
        note(f"other processes held {min(busy, cores)} of the {cores} cores during the run: the speeds and the fraction of the ceiling are lower than this machine gives when idle", wrap=True)


def _sizes(engine_bench, n_ctx: int, prompt_tokens: str | None, new_tokens: int | None, runs: int) -> tuple[list[int], int]:
    """--prompts and --new-tokens, checked against each other and the model's context."""
    from tfcli.engine.errors import UsageError

    default_prompts, default_new = engine_bench.default_sizes(n_ctx)
    if prompt_tokens is None:
        prompts = default_prompts
    else:
        try:
            prompts = [int(x) for x in prompt_tokens.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--prompts takes comma-separated token counts, not {prompt_tokens!r}") from None
    new_tokens = default_new if new_tokens is None else new_tokens
    if not prompts or min(prompts) < 1:
        raise UsageError("--prompts needs positive token counts")
    if new_tokens < 1 or runs < 1:
        raise UsageError("--new-tokens and --runs must be at least 1")
    start = engine_bench.DECODE_PROMPT
    if max(prompts) > n_ctx or start + new_tokens > n_ctx:
        raise UsageError(f"the model's context is {n_ctx} tokens", f"use --prompts and --new-tokens that fit ({start} + new tokens <= {n_ctx})")
    return prompts, new_tokens


def _formats(folder) -> str:
    """The weights' formats and the bytes of each, as a run holds them ('Q4_1 66.4 MB', 'Q8_0 30.1 MB', a line each)."""
    from tfcli.engine.checkpoint import open_tensors
    from tfcli.numbers import size

    from .show import _weights

    w = _weights(open_tensors(folder))
    if w["in_place"]:  # a GGUF: its blocks, as the file has them
        return "\n".join(f"{g['format']} {size(g['bytes'])}" for g in w["formats"])  # a format a line: never a number apart from its unit
    return f"F32 {size(w['held_bytes'])} (stored as {', '.join(g['format'] for g in w['formats'])})"


def _render(name: str, n_threads: int, r, new_tokens: int, runs: int, fraction: float, formats: str) -> None:
    from rich.table import Table

    t = Table(title=f"tfcli bench: {name}, {n_threads} thread{'s' if n_threads != 1 else ''}", title_justify="left")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_row("load", f"{r.load_s:.3f} s")
    t.add_row("load to first token", f"{r.first_token_s:.3f} s")
    for n, tps in r.prefill_tps.items():
        t.add_row(f"prefill, {n}-token prompt", f"{tps:,.0f} tok/s")
    t.add_row(f"decode, {new_tokens} tokens (median of {runs})", f"{r.decode_tps:,.1f} tok/s")
    from tfcli.numbers import size

    t.add_row("peak memory", f"{size(r.peak_rss)}\n(weights {size(r.weight_bytes)}, KV cache {size(r.kv_bytes)})")
    t.add_row("weights as held", formats)
    t.add_row("memory read bandwidth", f"{size(r.bandwidth)}/s")
    t.add_row("decode ceiling = weights / bandwidth", f"{r.ceiling_tps:,.1f} tok/s")
    t.add_row("decode as a fraction of the ceiling", f"[bold]{fraction:.0%}[/]")
    out.print(t)


def _measure(engine_bench, folder, prompts, new_tokens, runs, n_threads):
    """engine bench.run with its stages shown: a spinner line at a terminal, else one line per stage
    on stderr (a bench takes tens of seconds; a log should say where it is)."""
    t0 = time.perf_counter()
    if err.is_terminal:
        with err.status("tfcli bench") as status:
            return engine_bench.run(folder, prompts, new_tokens, runs, workers=n_threads, stage=lambda text: status.update(f"{text}..."))

    def stage(text: str) -> None:
        note(f"[{time.perf_counter() - t0:5.1f} s] {text}")
        sys.stderr.flush()

    return engine_bench.run(folder, prompts, new_tokens, runs, workers=n_threads, stage=stage)
