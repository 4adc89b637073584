"""Long runs show their progress on a terminal's stderr, counted in their own unit; a short run shows
nothing, --json stays clean, and where stderr is not a terminal (a pipe, a log) progress writes
nothing at all: one rule for every command (cli/progress.py)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def always_progress(monkeypatch):
    from tfcli.cli import progress

    monkeypatch.setattr(progress, "LONG_SECONDS", 0.0)  # every run counts as long: the first unit is said


@pytest.fixture
def terminal(monkeypatch):
    from tfcli.cli.console import err

    monkeypatch.setattr(err, "_force_terminal", True)  # stderr taken for a terminal: the display is drawn
    monkeypatch.setattr(err, "is_interactive", True)


@pytest.mark.parametrize("args, said", [
    (["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e"], "patching 1 of 5 residual indices"),
    (["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "--site", "mlp"], "patching 1 of 4 blocks"),
    (["ablate", "ROMEO:"], "ablating 1 of 4 blocks"),
    (["heads", "ROMEO:"], "reading 1 of 12 blocks (3 passes)"),
    (["steer", "ROMEO:", "--toward", "love", "--away", "hate", "--layer", "1", "-n", "3", "-t", "0"], "generating 1 of 6 tokens"),
    (["ablate", "ROMEO:", "--lang", "zh"], "消融：第 1 / 4 个块"),
])  # fmt: skip
def test_long_experiments_count_their_work_on_a_terminal(cli, always_progress, terminal, args, said):
    r = cli(*args, "-m", "shakespeare")
    assert r.exit_code == 0, r.stderr
    assert said in r.stderr
    assert said not in r.stdout


@pytest.mark.parametrize("args", [
    ["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e"],
    ["heads", "ROMEO:"],
    ["lens", "ROMEO: a long text"],
    ["bench", "--prompts", "8", "-n", "4", "--runs", "1"],
])  # fmt: skip
def test_a_pipe_gets_no_progress(cli, always_progress, args):
    r = cli(*args, "-m", "shakespeare")
    assert r.exit_code == 0, r.stderr
    for word in ("patching", "reading", "lens ", "rows", "loading the model", "decoding", "residual indices"):
        assert word not in r.stderr, word


def test_a_short_run_says_nothing_of_progress(cli):
    r = cli("ablate", "ROMEO:", "-m", "shakespeare")
    assert r.exit_code == 0 and "of 4 blocks" not in r.stderr


def test_the_progress_json_stays_clean(cli, always_progress):
    r = cli("ablate", "ROMEO:", "-m", "shakespeare", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["answer"]["text"] == "\n"
