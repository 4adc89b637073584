"""How long the experiments take on a real model, against one forward pass measured in the same run.

    python benchmarks/experiments.py [MODEL] [--rounds 3] [--threads N]

MODEL is a model name or folder (default smollm2; TFCLI_HOME is honoured; 'tfcli pull smollm2'
first). Each round times, in this process: one forward pass over the clean text (the unit), then
`patch` over the 9-token pair (residual stream, heads, MLPs), `ablate` over every head and MLP,
and `heads` (attribution and the four detectors). Printed: each one's wall time (min-max over the
rounds, median; and the process's CPU seconds, which a busy machine inflates less) and its
median as a multiple of the forward pass. Target (issue): patch, ablate
and heads each well under 20 s on 2 cores.
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

CLEAN = "The Eiffel Tower is in the city of"
CORRUPT = "The Colosseum is in the city of"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="smollm2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()

    from tfcli.analysis.experiments.ablate import ablate
    from tfcli.analysis.experiments.heads import attribute, detect
    from tfcli.analysis.experiments.patch import patch
    from tfcli.engine.fast import FAST
    from tfcli.engine.threads import set_blas_threads
    from tfcli.store import load

    set_blas_threads(args.threads)
    lm = load(args.model)
    model, tok = lm.model, lm.tokenizer
    clean, corrupt = tok.prompt(CLEAN), tok.prompt(CORRUPT)
    import numpy as np

    jobs = {
        "forward pass (unit)": lambda: model.forward(np.asarray(clean), model.new_cache(len(clean)), run=FAST),
        "patch --site resid": lambda: patch(model, clean, corrupt, "resid", run=FAST),
        "patch --site heads": lambda: patch(model, clean, corrupt, "heads", run=FAST),
        "patch --site mlp": lambda: patch(model, clean, corrupt, "mlp", run=FAST),
        "ablate": lambda: ablate(model, clean, run=FAST),
        "heads": lambda: (attribute(model, clean, run=FAST), detect(model, clean, tok, run=FAST)),
    }
    jobs["forward pass (unit)"]()  # warm: the mapped weights paged in, the RoPE tables made
    times: dict[str, list[float]] = {name: [] for name in jobs}
    cpu: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(args.rounds):
        for name, job in jobs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            job()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    unit = statistics.median(times["forward pass (unit)"])
    print(f"{lm.name} · {len(clean)} tokens · {args.threads} threads · {cpu_name()} · {args.rounds} rounds")
    for name, ts in times.items():
        print(f"  {name:<22} {min(ts):7.3f}-{max(ts):.3f} s (median {statistics.median(ts):.3f} s, CPU {statistics.median(cpu[name]):.2f} s)"
              f" = {statistics.median(ts) / unit:6.0f} forward passes")


if __name__ == "__main__":
    main()
