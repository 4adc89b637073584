"""The waits tests/test_progress.py and test_progress_experiments.py do not run: neurons' pass over a
long text (a spinner with what it does), convert's bytes and data pull's copy (bars), each on a
terminal's stderr and never in a pipe or on stdout (cli/progress.py, issue 49 item 2)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import TINY_LLAMA

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def terminal(monkeypatch):
    from tfcli.cli.console import err

    monkeypatch.setattr(err, "_force_terminal", True)  # stderr taken for a terminal: the display is drawn
    monkeypatch.setattr(err, "is_interactive", True)


@pytest.fixture
def slow_neurons(monkeypatch):
    """neurons' pass taken as long (threshold 0) and made to last 0.5 s, as a long text's does."""
    from tfcli.cli import neurons, progress

    real = neurons._report
    monkeypatch.setattr(progress, "LONG_SECONDS", 0.0)
    monkeypatch.setattr(neurons, "_report", lambda *a, **kw: (time.sleep(0.5), real(*a, **kw))[1])


NEURONS = ["neurons", "To be, or not to be", "--block", "0", "-m", "shakespeare"]
SAID = "the neurons of block 0: a pass over 19 tokens"


def test_neurons_long_pass_shows_a_spinner_at_a_terminal(cli, terminal, slow_neurons):
    r = cli(*NEURONS)
    assert r.exit_code == 0, r.stderr
    assert SAID in r.stderr and SAID not in r.stdout


def test_neurons_in_a_pipe_shows_nothing(cli, slow_neurons):
    r = cli(*NEURONS)
    assert r.exit_code == 0 and "a pass over" not in r.stderr, r.stderr


@pytest.mark.parametrize("at_terminal", [True, False], ids=["terminal", "pipe"])
def test_convert_shows_its_bytes_at_a_terminal_only(cli, request, tmp_path, at_terminal):
    if at_terminal:
        request.getfixturevalue("terminal")
    r = cli("convert", TINY_LLAMA, tmp_path / "tiny.gguf", "--quantize", "q8_0")
    assert r.exit_code == 0, r.stderr
    assert ("writing the GGUF" in r.stderr) is at_terminal and "writing the GGUF" not in r.stdout


@pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").is_file(), reason="../shared/data is not here")
@pytest.mark.parametrize("at_terminal", [True, False], ids=["terminal", "pipe"])
def test_data_pull_shows_its_copy_at_a_terminal_only(cli, request, at_terminal):
    if at_terminal:
        request.getfixturevalue("terminal")
    r = cli("data", "pull", "shakespeare", "--from", SHARED / "tinyshakespeare.txt")
    assert r.exit_code == 0, r.stderr
    assert ("copying tinyshakespeare.txt" in r.stderr) is at_terminal and r.stdout == ""
