"""Progress on stderr while a command works (cli/progress.py): at a terminal only, for `score`, and
a spinner with the seconds for the kernels' first compile; nothing in a pipe; Ctrl-C leaves the
terminal as it was.

The commands run for real in a process of their own, under a pseudo-terminal (pexpect) or with
pipes. The threshold that makes a run "long" (LONG_SECONDS, 2 s) is set to 0 in that process, so
that the 2,000-token score counts as long on any machine, however fast or busy.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

ROOT = Path(__file__).resolve().parents[1]
# The real entry point, the threshold (first argument) set in the process before the command runs.
RUN = "import sys; from tfcli.cli import progress; progress.LONG_SECONDS = float(sys.argv.pop(1)); from tfcli.start import main; main()"
WORDS = "the king and queen of love shall speak to thee my lord what is this night good sweet heart".split()


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "PYTHONPATH": str(ROOT), "TFCLI_HOME": str(tmp_path / "home"), "COLUMNS": "80", "TERM": "xterm"}


@pytest.fixture
def long_text(tmp_path) -> Path:
    """About 2,000 tokens of the shipped Shakespeare model (a token a character)."""
    rng = random.Random(0)
    path = tmp_path / "long.txt"
    path.write_text(" ".join(rng.choice(WORDS) for _ in range(420)), encoding="utf-8")
    return path


def _pty(env, *args: str, timeout: float = 120):
    """Run a command with stdout to a file and stderr on a pseudo-terminal -> (stderr as the terminal got it, exit status)."""
    import shlex

    out = Path(env["TFCLI_HOME"]).parent / "stdout.txt"
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-c", RUN, *args]) + f" > {shlex.quote(str(out))}"
    child = pexpect.spawn("/bin/sh", ["-c", command], env=env, encoding="utf-8", timeout=timeout, dimensions=(24, 80))
    child.expect(pexpect.EOF)
    child.close()
    return child.before, child.exitstatus, out.read_text(encoding="utf-8")


def test_score_of_2000_tokens_shows_progress_at_a_terminal(env, long_text):
    stderr, status, stdout = _pty(env, "0", "score", "--file", str(long_text))
    assert status == 0, stderr
    assert "shakespeare: 2,015 tokens scored" in stdout
    assert "scoring" in stderr and " of 2,015 tokens" in stderr and "tokens ·" in stderr and " s" in stderr  # done of total, and the seconds
    assert "scoring" not in stdout
    assert stderr.count("\x1b[?25l") == stderr.count("\x1b[?25h") >= 1  # the cursor hidden while it runs, shown again


def test_score_in_a_pipe_shows_no_progress(env, long_text):
    r = subprocess.run([sys.executable, "-c", RUN, "0", "score", "--file", str(long_text)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "tokens scored" in r.stdout
    assert "scoring" not in r.stderr and "scoring" not in r.stdout and "\x1b" not in r.stderr


def test_ctrl_c_during_score_clears_the_line_and_shows_the_cursor(env, tmp_path):
    rng = random.Random(1)
    path = tmp_path / "longer.txt"
    path.write_text(" ".join(rng.choice(WORDS) for _ in range(2400)), encoding="utf-8")  # ~12,000 tokens: long enough to stop
    child = pexpect.spawn(sys.executable, ["-c", RUN, "0", "score", "--file", str(path)], env=env, encoding="utf-8", timeout=120, dimensions=(24, 80))
    child.expect("scoring")
    seen = child.before + child.after
    child.sendintr()  # at once: the line is being drawn for the first time (Counted keeps the display before starting it)
    child.expect(pexpect.EOF)
    child.close()
    seen += child.before
    assert child.exitstatus == 130 or child.signalstatus is not None
    assert "Traceback" not in seen
    assert seen.rfind("\x1b[?25h") > seen.rfind("\x1b[?25l")  # the cursor shown again after the interrupt


def _waiting_code(seconds: float) -> str:
    """kernels_ready() with a compile that takes `seconds` (prepare replaced by one that calls its
    on_compile and sleeps): what the first quantized run shows while the kernels compile."""
    return (
        "import time; from tfcli.engine.fast.run import kernel_products as quantized\n"
        f"def prepare(on_compile=None):\n    on_compile(); time.sleep({seconds}); return None\n"
        "quantized.prepare = prepare\n"
        "from tfcli.cli.quantize import kernels_ready; kernels_ready()\n"
    )


def test_the_first_compile_shows_a_spinner_with_the_seconds_at_a_terminal(env):
    child = pexpect.spawn(sys.executable, ["-c", _waiting_code(2.4)], env=env, encoding="utf-8", timeout=60, dimensions=(24, 80))
    child.expect(pexpect.EOF)
    child.close()
    seen = child.before
    assert child.exitstatus == 0, seen
    assert "compiling the kernels for this CPU" in seen and "· 1 s" in seen and "· 2 s" in seen  # the seconds go on
    assert re.search(r"compiling the kernels took [2-9]\.\d s", seen)


def test_the_first_compile_in_a_pipe_says_so_in_two_lines(env):
    r = subprocess.run([sys.executable, "-c", _waiting_code(0.3)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == "compiling the kernels for this CPU (once; later runs load them)" and len(lines) == 2
    assert re.fullmatch(r"compiling the kernels took \d\.\d s", lines[1]) and "\x1b" not in r.stderr
