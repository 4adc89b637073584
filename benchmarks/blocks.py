"""A decode step with the compiled blocks (engine/fast/blocks.py: every block in one compiled call)
against the same step with the blocks run step by step in Python and NumPy around the same
compiled products and attention (model.Transformer.block), alternating in one process.

After a prompt of --prompt tokens, --steps greedy steps on each, for --rounds rounds; prints ms per
step (median and range) and the ratio, and whether the two chose the same tokens.

    python benchmarks/blocks.py -m smollm2 -m gemma3
    python benchmarks/blocks.py -m /work/files/SmolLM2-135M-Instruct.Q4_1.gguf --prompt 512
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

from tfcli.engine.fast.run.fast_executor import Fast, on_kernels  # noqa: E402
from tfcli.engine.fast.run.kernel_products import prepare  # noqa: E402
from tfcli.engine.threads import set_blas_threads  # noqa: E402
from tfcli.store import load  # noqa: E402

from quant import cpu  # noqa: E402  # benchmarks/quant.py, beside this script

TEXT = "The history of the river is the history of the city that grew along its banks. " * 200


class StepByStep(Fast):
    """The fast executor without its compiled blocks: each block as model.Transformer.block writes it."""

    def blocks(self, model, first, x, cache, positions):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="a model name, folder or GGUF file (repeatable); default smollm2")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_blas_threads(args.threads)
    print(f"CPU: {cpu()}; {args.threads} threads; prompt {args.prompt} tokens, {args.steps} steps a turn, {args.rounds} rounds\n")
    print("| model | compiled blocks, ms a step | step by step, ms a step | step by step / compiled | same tokens |")
    print("|---|---:|---:|---:|---|")
    for name in args.model or ["smollm2"]:
        lm = load(name)
        model = lm.model
        if not on_kernels(model):
            print(f"| {name} | (not on the kernels: no compiled blocks) | | | |")
            continue
        prepare()
        ids = np.array(lm.tokenizer.encode(TEXT)[: args.prompt])
        runs = {"compiled": Fast(args.threads), "step by step": StepByStep(args.threads)}
        prompt = model.new_cache(args.prompt + args.steps + 8)
        first = int(np.argmax(model.forward(ids, prompt, run=runs["compiled"])))
        times: dict[str, list[float]] = {k: [] for k in runs}
        chosen: dict[str, list[int]] = {}
        for _ in range(args.rounds):
            for key, run in runs.items():
                cache = prompt.copy()
                tok, got = first, []
                model.forward(np.array([tok]), cache.copy(), run=run)  # warm: the program, the buffers
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    tok = int(np.argmax(model.forward(np.array([tok]), cache, run=run)))
                    got.append(tok)
                times[key].append((time.perf_counter() - t0) / args.steps * 1e3)
                chosen[key] = got
        a, b = times["compiled"], times["step by step"]
        ratios = [y / x for x, y in zip(a, b)]
        same = "yes" if chosen["compiled"] == chosen["step by step"] else "no (8-bit activations: a near-tie can go either way)"
        print(f"| {name} | {statistics.median(a):.2f} ({min(a):.2f}-{max(a):.2f}) | {statistics.median(b):.2f} ({min(b):.2f}-{max(b):.2f}) | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {same} |")  # fmt: skip


if __name__ == "__main__":
    main()
