"""Batched samples and lookup decoding against plain decoding, interleaved in one run.

    python benchmarks/decoding.py [MODEL] [--rounds 3] [--new-tokens 128] [--lookup-tokens 256] [--threads N] [--only batch|lookup]

MODEL is a model name or folder (default smollm2, float32; TFCLI_HOME is honoured). Every
measurement is paired with plain decoding in the same round, and the rounds alternate the order,
so that a machine whose load changes during the run slows both sides alike; each ratio is quoted
as the range over the rounds and their median.

batch: N = 1, 2, 4, 8 continuations of one prompt (temperature 0.8, sample i with seed i, EOS
ignored so every sample makes --new-tokens tokens), wall time of the whole generation (the shared
prompt pass included) against one sample decoded plainly right before or after it. Target: 4 samples at most 1.6x the time
of 1 (2.5x the tokens per second).

lookup: greedy chat replies, up to --lookup-tokens (256) or the end of the reply, to a prompt that asks to
repeat a paragraph with light edits and to one with nothing to repeat; tokens per second of
--lookup against plain decoding, and the fraction of drafted tokens accepted. The two outputs are
checked equal token for token. Targets: >= 1.8x on the repetitive prompt, >= 0.95x on the other.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARAGRAPH = (
    "The old lighthouse stood at the end of the rocky point, where the river met the sea. For more than a "
    "hundred years its keepers had climbed the narrow stairs every evening to light the lamp, and every "
    "morning they had written the weather, the ships and the tides into a thick leather book. When the light "
    "was finally automated, the last keeper left the book on the table in the kitchen, where it stayed."
)
REPETITIVE = "Repeat the following paragraph, changing only 'lighthouse' to 'tower' and 'keepers' to 'wardens':\n\n" + PARAGRAPH
PLAIN = "Write a short story about a fox who learns to play the violin in a small mountain village."


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}x (median {statistics.median(values):.2f}x)"


def bench_batch(lm, rounds: int, new_tokens: int, sizes: list[int], threads: int) -> None:
    from tfcli.engine.batch import Samples
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.sampling import Sampler, SamplingParams

    ids = lm.tokenizer.prompt("Once upon a time, in a small village by the sea, there lived")
    params = lambda i: SamplingParams(temperature=0.8, seed=i)  # noqa: E731

    def plain() -> float:
        t = time.perf_counter()
        gen = Generation(Session(lm.model, len(ids) + new_tokens, workers=threads), lm.tokenizer, ids, Sampler(params(0)), new_tokens)
        assert sum(1 for _ in gen) == new_tokens
        return time.perf_counter() - t

    def batch(n: int) -> float:
        t = time.perf_counter()
        run = Samples(Session(lm.model, len(ids) + new_tokens, workers=threads), lm.tokenizer, ids, [Sampler(params(i)) for i in range(n)], new_tokens)
        for _ in run:
            pass
        assert run.totals.new_tokens == n * new_tokens
        return time.perf_counter() - t

    plain_times: dict[int, list[float]] = {n: [] for n in sizes}
    batch_times: dict[int, list[float]] = {n: [] for n in sizes}
    plain()  # warm up: page in the weights, grow the RoPE tables
    for r in range(rounds):
        for n in sizes:  # each batch next to a plain run, the order alternating
            first_plain = (r + n) % 2 == 0
            if first_plain:
                plain_times[n].append(plain())
            batch_times[n].append(batch(n))
            if not first_plain:
                plain_times[n].append(plain())
        print(f"  round {r + 1}: " + ", ".join(f"N={n} {batch_times[n][-1]:.2f} s (plain {plain_times[n][-1]:.2f} s)" for n in sizes), flush=True)
    print(f"\nbatched samples, {new_tokens} new tokens each: time of N samples / time of 1 plain sample next to it ({rounds} rounds),")
    print("and best time / best plain time (the least disturbed runs):")
    for n in sizes:
        ratios = [b / p for b, p in zip(batch_times[n], plain_times[n])]
        best = min(batch_times[n]) / min(plain_times[n])
        print(f"  N={n}: time {spread(ratios)}, tokens/s {spread([n / x for x in ratios])}; best {best:.2f}x time, {n / best:.2f}x tokens/s")


def bench_lookup(lm, rounds: int, budget: int, threads: int) -> None:
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.lookup import Drafter
    from tfcli.engine.sampling import Sampler, SamplingParams

    def run(text: str, lookup: bool):
        ids = lm.tokenizer.encode(lm.chat.render([{"role": "user", "content": text}], add_generation_prompt=True))
        gen = Generation(Session(lm.model, len(ids) + budget, workers=threads), lm.tokenizer, ids, Sampler(SamplingParams(temperature=0)), budget,
                         eos_ids=lm.chat_eos_ids(), lookup=Drafter() if lookup else None)  # fmt: skip
        t = time.perf_counter()
        tokens = [s.token for s in gen]
        return tokens, time.perf_counter() - t - gen.stats.prefill_seconds, gen.stats

    for name, text in (("repetitive", REPETITIVE), ("no repeats", PLAIN)):
        run(text, False)  # warm up
        speedups, rates = [], []
        for r in range(rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {flag: run(text, flag) for flag in order}
            (plain_tokens, plain_s, _), (look_tokens, look_s, stats) = got[False], got[True]
            assert look_tokens == plain_tokens, "lookup changed the output"
            speedups.append(plain_s / look_s)
            rates.append(stats.accepted / max(1, stats.drafted))
            print(f"  {name} round {r + 1}: {len(plain_tokens)} tokens, plain {len(plain_tokens) / plain_s:.1f} tok/s, "
                  f"lookup {len(look_tokens) / look_s:.1f} tok/s, {stats.accepted}/{stats.drafted} drafted accepted", flush=True)  # fmt: skip
        print(f"lookup on the {name} prompt: decode speed {spread(speedups)} of plain; accepted {min(rates):.0%}-{max(rates):.0%} of drafted\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="smollm2", help="a model name or folder (default smollm2)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--sizes", default="1,2,4,8")
    p.add_argument("--lookup-tokens", type=int, default=256, help="longest reply in the lookup runs")
    p.add_argument("--threads", type=int, default=None, help="BLAS threads (default: the idle cores)")
    p.add_argument("--only", choices=("batch", "lookup"))
    args = p.parse_args()

    from tfcli.engine.errors import TfcliError
    from tfcli.engine.threads import auto_threads, set_blas_threads
    from tfcli.store import load

    threads = args.threads or auto_threads()
    set_blas_threads(threads)
    try:
        lm = load(args.model)
    except TfcliError as e:
        sys.exit(f"error: {e}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {threads} BLAS threads, "
          f"load average {os.getloadavg()[0]:.2f} at the start; model {lm.name} ({lm.model.weight_bytes() / 1e6:,.0f} MB of weights)")  # fmt: skip
    t0 = time.perf_counter()
    if args.only in (None, "batch"):
        bench_batch(lm, args.rounds, args.new_tokens, [int(x) for x in args.sizes.split(",")], threads)
    if args.only in (None, "lookup"):
        print()
        bench_lookup(lm, args.rounds, args.lookup_tokens, threads)
    print(f"done in {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
