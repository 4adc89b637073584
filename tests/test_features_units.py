"""features train names its error alike in the bar and in the summary (issue 49 item 4): "MSE per
element" (每个元素的均方误差 under zh) in the model's units in both, so that the last step's figure
and the held-out one are of the same size (the trainer's own error is per vector, on scaled vectors:
shown as it is, it would be hundreds of times larger)."""

from __future__ import annotations

import re

import pytest


@pytest.mark.parametrize("lang, label", [("en", "MSE per element"), ("zh", "每个元素的均方误差")])
def test_the_bar_and_the_summary_say_the_same_error(cli, monkeypatch, tmp_path, lang, label):
    from tfcli.cli.console import err

    monkeypatch.setattr(err, "_force_terminal", True)  # the bar is drawn at a terminal only
    monkeypatch.setattr(err, "is_interactive", True)
    monkeypatch.setenv("COLUMNS", "120")
    text = tmp_path / "text.txt"
    text.write_text("ROMEO: But soft, what light through yonder window breaks? It is the east. " * 30, encoding="utf-8")
    r = cli("features", "train", text, "-o", tmp_path / "sae", "--steps", "30", "--batch-size", "64",
            "--buffer", "512", "--features", "32", "--lang", lang)  # fmt: skip
    assert r.exit_code == 0, r.stderr
    bar, summary = r.stderr.rsplit("held out:" if lang == "en" else "留出：", 1)
    in_bar = [float(v) for v in re.findall(rf"{label} ([\d.]+(?:e[+-]\d+)?) ·", bar)]
    (held_out,) = [float(v) for v in re.findall(rf"{label} ([\d.]+(?:e[+-]\d+)?)[;；]", summary)]
    assert in_bar, bar
    assert 0.5 < in_bar[-1] / held_out < 2, (in_bar[-1], held_out)
