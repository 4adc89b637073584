"""`generate --samples B`: B continuations of one prompt decoded as one batch, against one.

Runs engine/batch.py's Samples as `tfcli generate --samples B` does (a Session on --threads
threads, the prompt pass once, then the batch's row-by-row decode steps), for B = 1 and 4 in
interleaved rounds in one process. Every sample draws exactly --new-tokens tokens (temperature
0.8, its own seed, no EOS, no stop string). Prints per B the decode time (the batch's steps after
the shared prompt pass) and the whole run, median (range), and their ratio to one sample: the
target of issue 31 is 4 samples in at most 1.5x the time of one.

    python benchmarks/samples.py -m smollm2 --rounds 5 --new-tokens 48
    python benchmarks/samples.py -m /work/files/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tfcli  # noqa: E402,F401  # before NumPy: it sets how long OpenBLAS's idle threads spin (tfcli/__init__.py)

from tfcli.engine.batch import Samples  # noqa: E402
from tfcli.engine.generate import Session  # noqa: E402
from tfcli.engine.sampling import Sampler, SamplingParams  # noqa: E402
from tfcli.engine.threads import set_blas_threads  # noqa: E402
from tfcli.store import load  # noqa: E402

PROMPT = "Once upon a time, in a small village by the sea,"


def run(lm, workers: int, samples: int, new: int) -> tuple[float, float]:
    """One `generate --samples` run: (decode seconds, whole seconds)."""
    ids = lm.tokenizer.encode(PROMPT)
    session = Session(lm.model, capacity=len(ids) + new, workers=workers)
    samplers = [Sampler(SamplingParams(temperature=0.8, seed=i)) for i in range(samples)]
    batch = Samples(session, lm.tokenizer, ids, samplers, new)
    t0 = time.perf_counter()
    for _ in batch:
        pass
    return batch.totals.decode_seconds, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2", help="a model name, folder or GGUF file")
    ap.add_argument("--samples", default="1,4", help="batch sizes to compare, the first being the reference")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    counts = [int(c) for c in args.samples.split(",")]
    set_blas_threads(args.threads)
    lm = load(args.model)
    run(lm, args.threads, max(counts), 8)  # warm-up: first-call costs (RoPE tables, BLAS threads, compiled kernels)
    decode: dict[int, list[float]] = {c: [] for c in counts}
    whole: dict[int, list[float]] = {c: [] for c in counts}
    for r in range(args.rounds):
        for c in counts:
            d, w = run(lm, args.threads, c, args.new_tokens)
            decode[c].append(d)
            whole[c].append(w)
            print(f"round {r + 1}: {c} sample(s): decode {d:.2f} s, whole {w:.2f} s", file=sys.stderr)
    one_d, one_w = statistics.median(decode[counts[0]]), statistics.median(whole[counts[0]])
    print(f"\n{args.model}, {args.threads} threads, {args.new_tokens} new tokens per sample, median of {args.rounds} interleaved rounds\n")
    print(f"| samples | decode (median, range) | decode / {counts[0]} | whole run | whole / {counts[0]} | new tokens/s (all samples) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for c in counts:
        d, w = statistics.median(decode[c]), statistics.median(whole[c])
        cells = [f"{d:.2f} s ({min(decode[c]):.2f}-{max(decode[c]):.2f})", f"{d / one_d:.2f}x", f"{w:.2f} s", f"{w / one_w:.2f}x", f"{c * args.new_tokens / w:.1f}"]
        print(f"| {c} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
