"""What a hook costs: decode steps with no hooks, with one hook at one site, and with a recorder
at every site, interleaved in one run.

    python benchmarks/sites.py [MODEL] [--rounds 5] [--steps 32] [--threads 1]

MODEL defaults to smollm2 (TFCLI_HOME is honoured). Each round decodes --steps greedy tokens after
the same 16-token prompt in each of three ways, in turn: no hooks (what generation runs), one
identity hook at `resid_post` of the middle block, and a Recorder(residual=True) (every block's
`resid_mid` and `resid_post`). Printed: milliseconds per step (min-max over the rounds, median)
and each median as a ratio to the no-hook one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="smollm2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import numpy as np

    from tfcli.engine.generate import Session
    from tfcli.engine.inspect import Recorder
    from tfcli.engine.sites import Hooks
    from tfcli.engine.threads import set_blas_threads
    from tfcli.store import load

    set_blas_threads(args.threads)
    lm = load(args.model)
    model = lm.model
    prompt = np.random.default_rng(0).integers(0, model.config.vocab_size, 16).tolist()
    kinds = {
        "no hooks": lambda: None,
        "one hook, one site": lambda: Hooks().add("resid_post", lambda v, s: None, model.config.n_layer // 2),
        "recorder, every block": lambda: Recorder(residual=True),
    }

    def steps(hooks) -> float:
        s = Session(model, len(prompt) + args.steps + 1, hooks=hooks)
        logits, _ = s.prefill(prompt)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            logits = s.step(int(np.argmax(logits)))
        return (time.perf_counter() - t0) / args.steps * 1000

    steps(None)  # warm
    ms: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for name, make in kinds.items():
            ms[name].append(steps(make()))
    base = statistics.median(ms["no hooks"])
    print(f"{lm.name} · {args.steps} decode steps · {args.threads} thread(s) · {args.rounds} rounds, interleaved")
    for name, xs in ms.items():
        print(f"  {name:<22} {min(xs):6.2f}-{max(xs):.2f} ms/step (median {statistics.median(xs):.2f}) = {statistics.median(xs) / base:.3f}x")


if __name__ == "__main__":
    main()
