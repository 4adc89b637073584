"""`tfcli score` with whole windows run several to a pass against one window per pass, interleaved.

    python benchmarks/score.py [MODEL] [--file TEXT] [--chars 40000] [--window 128] [--rounds 3]

MODEL defaults to the shipped `tang` (TFCLI_HOME is honoured), TEXT to the README's own text.
Each round scores the first --chars characters in non-overlapping windows both ways, in turn (the
order alternates between rounds): one window per forward pass through a KV cache, as before, and
whole windows as independent sequences of one pass (engine/score.py, kvcache.Sequences). Printed:
wall and CPU seconds per way (min-max over the rounds), the ratio of the medians, and the two
losses, which must agree to float32 rounding.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="tang")
    ap.add_argument("--file", type=Path, default=ROOT / "README.md")
    ap.add_argument("--chars", type=int, default=40000)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from tfcli.engine import score as sc
    from tfcli.store import load

    lm = load(args.model)
    ids = lm.tokenizer.prompt(args.file.read_text(encoding="utf-8")[: args.chars])
    together = sc.MAX_WINDOWS
    times: dict[str, list[tuple[float, float]]] = {"one window per pass": [], "windows together": []}
    loss = {}
    for r in range(args.rounds):
        for name in list(times) if r % 2 == 0 else list(times)[::-1]:
            sc.MAX_WINDOWS = 1 if name == "one window per pass" else together
            wall, cpu = time.perf_counter(), time.process_time()
            s = sc.score(lm.model, ids, args.window, args.window)
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
            loss[name] = s.nats_per_token
    print(f"{args.model} · {len(ids):,} tokens · windows of {args.window} · {args.rounds} rounds, interleaved")
    for name, t in times.items():
        w, c = [a for a, _ in t], [b for _, b in t]
        print(f"  {name:20} wall {min(w):.2f}-{max(w):.2f} s (median {statistics.median(w):.2f}) · CPU {min(c):.2f}-{max(c):.2f} s · {loss[name]:.6f} nats/token")
    (one, both) = ([statistics.median(x[i] for x in t) for t in times.values()] for i in (0, 1))
    print(f"  one/together: wall {one[0] / one[1]:.2f}x, CPU {both[0] / both[1]:.2f}x; losses differ by {abs(loss['one window per pass'] - loss['windows together']):.1e}")


if __name__ == "__main__":
    main()
