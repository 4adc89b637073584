"""Measuring the engine: load, prefill and decode speed, peak memory, and the roofline.

Used by `tfcli bench` and by benchmarks/compare.py (which runs transformers beside it), so that
both report the same measurement.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .bandwidth import measure_read_bandwidth
from .generate import Session
from .kvcache import check_kv_type, kv_bytes
from .memory import proc_bytes


def prompt_ids(vocab: int, n: int) -> list[int]:
    """Deterministic token ids spread over the vocabulary, the same for every engine compared."""
    return [(i * 7919 + 13) % vocab for i in range(n)]


@dataclass
class BenchResult:
    load_s: float
    first_token_s: float  # load, a 4-token prompt pass and the choice of a token
    prefill_tps: dict[int, float] = field(default_factory=dict)  # prompt length -> tokens/s (median)
    decode_tps: float = 0.0  # median over runs
    decode_runs: list[float] = field(default_factory=list)
    decode_depth: int = 0  # positions the cache holds when the timed decode starts (llama-bench's -d)
    peak_rss: int = 0  # bytes, the process's high-water mark
    weight_bytes: int = 0  # float32 bytes of the model's weights (what each decode step reads)
    kv_bytes: int = 0  # the largest KV cache used
    kv_type: str = "f32"  # its numbers (kvcache.KV_TYPES)
    bandwidth: float = 0.0  # bytes/s, measured with a matrix-vector product
    ceiling_tps: float = 0.0  # bandwidth / weight_bytes


def peak_rss() -> int:
    """This process's peak resident memory, in bytes.

    VmHWM from /proc on Linux: ru_maxrss survives exec, so a child started by a process that once
    held 1 GB would report the parent's peak; VmHWM belongs to the new address space.
    """
    peak = proc_bytes("/proc/self/status", "VmHWM")
    if peak is not None:
        return peak
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux, bytes on macOS


DEFAULT_PROMPTS = (16, 128, 512)
DEFAULT_NEW_TOKENS = 128
DECODE_PROMPT = 16  # the prompt each decode run starts from (without --depth)


def default_sizes(n_ctx: int) -> tuple[list[int], int]:
    """Prompt lengths and decode length that fit a context of n_ctx: the usual ones, with the
    context itself in place of those longer than it (shakespeare's 256, tang's 128)."""
    prompts = sorted({min(n, n_ctx) for n in DEFAULT_PROMPTS})
    return prompts, max(1, min(DEFAULT_NEW_TOKENS, n_ctx - DECODE_PROMPT))


def run(
    folder: Path, prompts: list[int], new_tokens: int, runs: int, roofline: bool = True, workers: int = 1,
    stage: Callable[[str], None] | None = None, kv_type: str | None = None, depth: int | None = None,
) -> BenchResult:
    """Measure a model folder. `stage(text)`, if given, is told each step before it starts (the CLI
    shows it: a bench takes tens of seconds). `kv_type`: the KV cache's numbers (default: the model's).
    `depth`: decode after a context of this many tokens (llama-bench's -d: a decode step's attention
    reads every position held), filled once and kept between runs; default DECODE_PROMPT."""
    from .loader import load_folder

    tell = stage or (lambda text: None)
    tell("loading the model")
    t0 = time.perf_counter()
    lm = load_folder(folder)
    load_s = time.perf_counter() - t0
    vocab, net = lm.config.vocab_size, lm.model
    if kv_type:
        check_kv_type(lm.config, kv_type)  # a head size q8_0 cannot cut: one line, before any pass
    net.kv_type = kv_type or net.kv_type
    logits, _ = Session(net, capacity=4).prefill(prompt_ids(vocab, 4))
    int(np.argmax(logits))
    res = BenchResult(load_s=load_s, first_token_s=time.perf_counter() - t0)

    for n in prompts:
        times = []
        for i in range(runs):
            tell(f"prompt pass, {n} tokens (run {i + 1} of {runs})")
            s = Session(net, capacity=n, workers=workers)
            t = time.perf_counter()
            s.prefill(prompt_ids(vocab, n))
            times.append(time.perf_counter() - t)
        res.prefill_tps[n] = n / statistics.median(times)

    start = DECODE_PROMPT if depth is None else depth
    s = Session(net, capacity=start + new_tokens, workers=workers)
    if depth:
        tell(f"filling a context of {depth} tokens")
    for i in range(runs):
        tell(f"decoding {new_tokens} tokens (run {i + 1} of {runs})")
        # the first run fills the context; the next ones find it in the cache and run only its last token
        logits, _ = s.prefill(prompt_ids(vocab, max(start, 1)))
        tok = int(np.argmax(logits))
        t = time.perf_counter()
        for _ in range(new_tokens):
            tok = int(np.argmax(s.step(tok)))
        res.decode_runs.append(new_tokens / (time.perf_counter() - t))
    res.decode_tps = statistics.median(res.decode_runs)
    res.decode_depth = max(start, 1)
    res.peak_rss = peak_rss()
    res.kv_type = net.cache_type()
    res.kv_bytes = kv_bytes(lm.config, max(prompts + [start + new_tokens]), res.kv_type)
    res.weight_bytes = net.weight_bytes()
    if roofline:
        tell("memory read bandwidth")
        res.bandwidth = measure_read_bandwidth()
        res.ceiling_tps = res.bandwidth / res.weight_bytes
    return res
