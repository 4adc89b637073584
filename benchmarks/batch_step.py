"""One decode step of 1, 4 and 8 sequences at different positions, as `tfcli serve` runs it.

Two executors, alternating in one process: the batched kernels (`Fast(batch=True)`; `tfcli serve
--no-batch-invariant`) and the row-by-row one (`fast.executor.RowByRow`, the default of `tfcli
serve`). On a model the compiled kernels run (a quantized GGUF file), both take a step through the
compiled blocks (fast/blocks.py): each product reads its weights once for all the rows, and each
row's attention and its steps between two products run on the pool's threads, a row's numbers the
same bits as alone. On the NumPy path they differ: OpenBLAS's products of several rows (fast/ops.py's
`few_rows`) against every row's own vector-matrix product on each block of weights while it is in
cache (`each_row`). The sequences' prompts are 9, 13, 17, ... 37 tokens long (SmolLM2's tokens),
and the 1-row step is the shortest. Prints ms per step (median and range), the ratio of 4 and 8
rows to 1, and whether each row's logits equal, bit for bit, those of its sequence decoding alone.

`--products` times instead each quantized product of a step alone (one block's matrices, then
the unembedding), on one thread, for 1 and 4 rows of x: microseconds (the best of several
repeats), the ratio, and the multiply-adds a second each achieves, the figures that say whether
a step of 4 rows is bound by reading the weights (1 row) or by the arithmetic (4 rows).

    python benchmarks/batch_step.py -m smollm2 --repeats 12
    python benchmarks/batch_step.py -m smollm2 --products
    python benchmarks/batch_step.py -m /work/files/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tfcli  # noqa: E402,F401  # before NumPy: it sets how long OpenBLAS's idle threads spin (tfcli/__init__.py)

import numpy as np  # noqa: E402

from tfcli.engine.fast.run.fast_executor import FAST, Fast  # noqa: E402
from tfcli.engine.generate import Session  # noqa: E402
from tfcli.engine.fast.run.fast_executor import RowByRow
from tfcli.engine.slots import Slots  # noqa: E402
from tfcli.engine.threads import set_blas_threads  # noqa: E402
from tfcli.store import load  # noqa: E402

ROWS = (1, 4, 8)


def products(model, repeats: int) -> None:
    """Each quantized product of a step (block 0's, the unembedding) timed alone on one thread, 1 and 4 rows."""
    from tfcli.engine.fast.run.kernel_products import product
    from tfcli.engine.formats import GGMLType
    from tfcli.engine.quantized import Quantized

    layer = model.layers[0]
    named = [("qkv", getattr(layer, "w_qkv", None)), ("attn out", getattr(layer, "wo", None)),
             ("mlp in", getattr(layer.mlp, "w_in", None)), ("mlp out", getattr(layer.mlp, "w_out", None)),
             ("unembedding", model.unembedding)]
    rng = np.random.default_rng(0)
    print(f"one thread, its CPU time, best of {repeats} repeats; GMAC/s: multiply-adds a second, T x K x N / time\n")
    print("| product | type | K x N | 1 row (us) | 4 rows (us) | 4 rows / 1 | GMAC/s, 1 row | GMAC/s, 4 rows |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    step = {1: 0.0, 4: 0.0}
    for name, w in named:
        if not isinstance(w, Quantized):
            continue
        K, N = w.shape  # [in, out]
        xs = {T: rng.standard_normal((T, K)).astype(np.float32) for T in (1, 4)}  # [T, K]
        reps = max(1, int(2e7 // (K * N)))  # about 20 M multiply-adds a timing
        times: dict[int, list[float]] = {1: [], 4: []}
        for _ in range(repeats + 1):  # 1 and 4 rows in turn; the thread's CPU time, which others' load does not count
            for T, x in xs.items():
                t0 = time.thread_time()
                for _ in range(reps):
                    product(x, w, threads=1)
                times[T].append((time.thread_time() - t0) / reps)
        best = {T: min(t[1:]) for T, t in times.items()}  # the first round warms the kernels and the copy
        for T in best:
            step[T] += best[T] * (1 if name == "unembedding" else len(model.layers))
        kinds = "+".join(GGMLType(t).name for t in sorted(w.types))
        print(f"| {name} | {kinds} | {K} x {N} | {best[1] * 1e6:.0f} | {best[4] * 1e6:.0f} | {best[4] / best[1]:.2f}x "
              f"| {K * N / best[1] / 1e9:.1f} | {4 * K * N / best[4] / 1e9:.1f} |")
    print(f"\nall of a step's products, one thread: {step[1] * 1e3:.1f} ms for 1 row, {step[4] * 1e3:.1f} ms for 4 "
          f"({step[4] / step[1]:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", default="smollm2", help="a model name, folder or GGUF file (or -m)")
    ap.add_argument("-m", "--model", default=None, help="a model name, folder or GGUF file, e.g. -m FILE.gguf")
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--products", action="store_true", help="time each quantized product alone, 1 and 4 rows")
    args = ap.parse_args()
    args.model = args.model or args.name
    set_blas_threads(2)
    lm = load(args.model)
    model = lm.model
    if args.products:
        return products(model, args.repeats)
    sessions = [Session(model, capacity=512, workers=2) for _ in range(max(ROWS))]
    for i, s in enumerate(sessions):  # prompts of different lengths: each row at its own position
        s.prefill(lm.tokenizer.encode(f"Story number {i}:" + " once upon a time" * (i + 1)))
    helper = sessions[0].run.helper
    runs = {"batched kernels": Fast(2, helper, batch=True), "row by row": RowByRow(2, helper)}

    def step(name: str, rows: int) -> tuple[float, np.ndarray]:
        caches = [s.cache for s in sessions[:rows]]
        lengths = [c.length for c in caches]
        t0 = time.perf_counter()
        with runs[name].around_step(rows):  # as the server runs it (serve/batcher.py)
            logits = model.forward(np.arange(100, 100 + rows), Slots(caches), all_logits=True, run=runs[name])  # [B, V]
        seconds = time.perf_counter() - t0
        for c, n in zip(caches, lengths):
            c.length = n  # the step is undone: every repeat runs at the same positions
        return seconds * 1e3, logits

    alone = []  # [B, V]: each sequence decoding its token alone, as tfcli generate does
    for i, s in enumerate(sessions):
        n = s.cache.length
        alone.append(model.forward(np.array([100 + i]), s.cache, run=FAST)[-1])
        s.cache.length = n
    times: dict[tuple[str, int], list[float]] = {}
    for r in range(args.repeats + 2):
        for name in runs:
            for rows in ROWS:
                ms, _ = step(name, rows)
                if r >= 2:  # two warm-up rounds
                    times.setdefault((name, rows), []).append(ms)
    print(f"{args.model}, 2 threads, {args.repeats} steps each, alternating; ms per decode step, median (range)\n")
    print("| executor | " + " | ".join(f"{r} row{'s' if r > 1 else ''}" for r in ROWS) + " | 4 rows / 1 | 8 rows / 1 | each row = alone |")
    print("|---|" + "---:|" * (len(ROWS) + 3))
    for name in runs:
        med = {r: statistics.median(times[(name, r)]) for r in ROWS}
        cells = [f"{med[r]:.1f} ({min(times[(name, r)]):.0f}-{max(times[(name, r)]):.0f})" for r in ROWS]
        same = all(np.array_equal(step(name, r)[1], np.stack(alone[:r])) for r in ROWS)
        print(f"| {name} | " + " | ".join(cells) + f" | {med[4] / med[1]:.2f}x | {med[8] / med[1]:.2f}x | {'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
