"""Draw the loss curves of several `tfcli train` runs on one PNG (the README's mask experiment).

    python tools/train_curves.py RUN_FOLDER[=LABEL] ... --png docs/train-mask.png [--title TEXT]

Each run's trainer_state.json gives its training loss (running mean of 10 steps) and its
validation losses; the curves of all runs share the axes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tfcli.cli.views.curve import Series, smoothed, write_png  # noqa: E402

COLOURS = [((31, 119, 180), (120, 170, 220)), ((214, 39, 40), (240, 140, 140)), ((44, 160, 44), (140, 210, 140))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run folders, each optionally =LABEL")
    p.add_argument("--png", required=True)
    p.add_argument("--title", default="loss (nats per token)")
    a = p.parse_args()
    series = []
    for i, spec in enumerate(a.runs):
        folder, _, label = spec.partition("=")
        state = json.loads((Path(folder) / "trainer_state.json").read_text())
        label = label or Path(folder).name
        dark, light = COLOURS[i % len(COLOURS)]
        train = smoothed(state["losses"])
        series.append(Series(f"{label}: train", train.steps, train.values, light))
        series.append(Series(f"{label}: validation", [s for s, _ in state["evals"]], [v for _, v in state["evals"]], dark))
    write_png(Path(a.png), series, a.title)


if __name__ == "__main__":
    main()
