"""tfcli bench: how fast a model runs on this machine, and how close that is to the hardware limit."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .console import note, out
from .lang import say, zh


def bench(
    model: options.Model = None,
    prompt_tokens: Annotated[
        Optional[str],
        typer.Option("--prompts", help="Prompt lengths to time the prompt pass with, comma-separated. (default: "
                                       "16,128,512, the longer ones cut to the model's context)", show_default=False),
    ] = None,
    new_tokens: Annotated[Optional[int], typer.Option("--new-tokens", "-n", help="Tokens to decode per run. (default: "
                                                                                 "128, or what the context has room "
                                                                                 "for)", show_default=False)] = None,
    runs: Annotated[int, typer.Option("--runs", help="Runs per figure; the median is reported.")] = 3,
    depth: Annotated[
        Optional[int],
        typer.Option("--depth", "-d", help="Decode after a context of this many tokens, as llama-bench -d (JSON: "
                                           "decode_depth). (default: 16)", show_default=False),
    ] = None,
    threads: options.Threads = None,
    kv_type: options.KvTypeOption = None,
    as_json: options.Json = False,
    lang: options.LangOption = None,
) -> None:
    """Measure load time, prompt (prefill) and decode speed, peak memory, and the roofline.

    Decoding reads every weight once per token, so memory bandwidth caps it at
    bandwidth / weight bytes tokens per second: the 'ceiling' below, measured on this machine.

    Example:

      tfcli bench -m smollm2 --runs 3

      tfcli bench -m gemma3 --prompts 512 --depth 4096 --json

      tfcli bench -m tang --lang zh
    """
    from tfcli.engine import bench as engine_bench
    from tfcli.engine.families import load_config

    options.chinese(lang)
    n_threads = options.apply_threads(threads)
    folder = options.model_folder(model)
    n_ctx = load_config(folder / "config.json").n_ctx  # the shape only: bench.run loads (and times) the model
    prompts, new_tokens = _sizes(engine_bench, n_ctx, prompt_tokens, new_tokens, runs, depth)
    from tfcli.engine.threads import available_cpus, busy_cpus

    before = busy_cpus()
    r = _measure(engine_bench, folder, prompts, new_tokens, runs, n_threads, kv_type.value if kv_type else None, depth)
    after = busy_cpus()
    busy = max(
        (n for n in (before, after) if n is not None), default=None
    )  # other processes' running tasks, at the start and the end
    fraction = r.decode_tps / r.ceiling_tps if r.ceiling_tps else 0.0
    name = model or "shakespeare"
    if as_json:
        from .json import emit

        emit(
            {
                "model": name,
                **r.__dict__,
                "prompts": prompts,
                "new_tokens": new_tokens,
                "runs": runs,
                "ceiling_fraction": fraction,
                "threads": n_threads,
                "busy_cores": busy,
            }
        )
        return
    _render(name, n_threads, r, new_tokens, runs, fraction, _formats(folder))
    if busy:
        cores = available_cpus()
        held = min(busy, cores)
        note(
            say(
                f"other processes held {held} of the {cores} cores during the run: the speeds and the fraction of the "
                "ceiling"
                " are lower than this machine gives when idle",
                f"运行期间其他进程占用了 {cores} 个核心中的 {held} 个：速度和占上限的比例都低于这台机器空闲时的水平",
            ),
            wrap=True,
        )


def _sizes(
    engine_bench, n_ctx: int, prompt_tokens: str | None, new_tokens: int | None, runs: int, depth: int | None = None
) -> tuple[list[int], int]:
    """--prompts, --new-tokens and --depth, checked against each other and the model's context."""
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
    if depth is not None and depth < 0:
        raise UsageError(f"--depth must be 0 or more, not {depth}")
    start = engine_bench.DECODE_PROMPT if depth is None else max(depth, 1)
    if max(prompts) > n_ctx or start + new_tokens > n_ctx:
        what = "--depth" if depth is not None else str(start)
        raise UsageError(
            f"the model's context is {n_ctx} tokens",
            f"use --prompts and --new-tokens that fit ({what} + new tokens <= {n_ctx})",
        )
    return prompts, new_tokens


def _formats(folder) -> str:
    """The weights' formats and the bytes of each, as a run holds them ('Q4_1 66.4 MB', 'Q8_0 30.1 MB', a line each)."""
    from tfcli.engine.checkpoint import open_tensors
    from tfcli.numbers import size

    from .show import _weights

    w = _weights(open_tensors(folder))
    if w["in_place"]:  # a GGUF: its blocks, as the file has them
        return "\n".join(
            f"{g['format']} {size(g['bytes'])}" for g in w["formats"]
        )  # a format a line: never a number apart from its unit
    stored = _word("stored", formats=", ".join(g["format"] for g in w["formats"]))
    return f"F32 {size(w['held_bytes'])} ({stored})" if not zh() else f"F32 {size(w['held_bytes'])}（{stored}）"


# The rows of the table, English and Chinese.
_ROWS = {
    "title": ("tfcli bench: {name}, {threads}", "tfcli bench：{name}，{threads}"),
    "measure": ("measure", "测量"), "value": ("value", "数值"),
    "load": ("load", "加载"), "first": ("load to first token", "加载到第一个词元"),
    "prefill": ("prefill, {n}-token prompt", "预填充，{n} 个词元的提示"),
    "decode": ("decode, {n} tokens after {depth} (median of {runs})",
               "解码 {n} 个词元，接在 {depth} 个之后（{runs} 次的中位数）"),
    "peak": ("peak memory", "内存峰值"), "parts": ("(weights {w}, KV cache {kv})", "（权重 {w}，KV 缓存 {kv}）"),
    "held": ("weights as held", "运行时权重"), "bandwidth": ("memory read bandwidth", "内存读带宽"),
    "ceiling": ("decode ceiling = weights / bandwidth", "解码上限 = 带宽 / 权重"),
    "fraction": ("decode as a fraction of the ceiling", "解码占上限的比例"),
    "stored": ("stored as {formats}", "存储为 {formats}"),
}  # fmt: skip


def _word(key: str, **values) -> str:
    return _ROWS[key][zh()].format(**values)


def _render(name: str, n_threads: int, r, new_tokens: int, runs: int, fraction: float, formats: str) -> None:
    from rich.table import Table

    from tfcli.numbers import size

    threads = f"{n_threads} 个线程" if zh() else f"{n_threads} thread{'s' if n_threads != 1 else ''}"
    t = Table(title=_word("title", name=name, threads=threads), title_justify="left")
    t.add_column(_word("measure"))
    t.add_column(_word("value"), justify="right")
    t.add_row(_word("load"), f"{r.load_s:.3f} s")
    t.add_row(_word("first"), f"{r.first_token_s:.3f} s")
    for n, tps in r.prefill_tps.items():
        t.add_row(_word("prefill", n=n), f"{tps:,.0f} tok/s")
    t.add_row(_word("decode", n=new_tokens, runs=runs, depth=r.decode_depth), f"{r.decode_tps:,.1f} tok/s")
    kv = f"{r.kv_type} {size(r.kv_bytes)}"  # the KV cache's numbers and bytes: f16 1.2 MB
    t.add_row(_word("peak"), f"{size(r.peak_rss)}\n{_word('parts', w=size(r.weight_bytes), kv=kv)}")
    t.add_row(_word("held"), formats)
    t.add_row(_word("bandwidth"), f"{size(r.bandwidth)}/s")
    t.add_row(_word("ceiling"), f"{r.ceiling_tps:,.1f} tok/s")
    t.add_row(_word("fraction"), f"[bold]{fraction:.0%}[/]")
    out.print(t)


def _measure(engine_bench, folder, prompts, new_tokens, runs, n_threads, kv_type=None, depth=None):
    """engine bench.run with its stages shown (a bench takes tens of seconds): a spinner, the stage
    and the seconds at a terminal (cli/progress.py), nothing in a pipe."""
    from .progress import Waiting

    with Waiting(_stage("tfcli bench")) as waiting:
        return engine_bench.run(
            folder, prompts, new_tokens, runs, workers=n_threads, stage=lambda text: waiting.update(_stage(text)),
            kv_type=kv_type, depth=depth,
        )


# The engine's stages (engine/bench.py), in Chinese under --lang zh.
_STAGES_ZH = [
    (r"loading the model", "加载模型"),
    (r"prompt pass, (\d+) tokens \(run (\d+) of (\d+)\)", r"提示前向，\1 个词元（第 \2 / \3 次）"),
    (r"decoding (\d+) tokens \(run (\d+) of (\d+)\)", r"解码 \1 个词元（第 \2 / \3 次）"),
    (r"filling a context of (\d+) tokens", r"填充 \1 个词元的上下文"),
    (r"memory read bandwidth", "测内存读带宽"),
]


def _stage(text: str) -> str:
    import re

    if zh():
        for pattern, cn in _STAGES_ZH:
            text = re.sub(f"^{pattern}$", cn, text)
    return text + "..."
