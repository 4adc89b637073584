"""Signals and standard streams at the edges of a run: Ctrl-C while the command line is still
loading, a stdout closed from the start. (A reader that went away, Ctrl-C during a generation and
a full disk: test_bad_streams.py.) Every subprocess has a timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from badinput import ROOT, assert_one_line, subprocess_env, tfcli_command
from conftest import TINY_GPT2

# Ctrl-C arriving while `module` is being imported: a finder that raises KeyboardInterrupt there,
# then tfcli started as `python -m tfcli` starts it.
_INTERRUPT_AT_IMPORT = """
import runpy, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv = ["tfcli", *ARGS]
runpy.run_module("tfcli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    "module, args",
    [("typer", ["params"]), ("rich.console", ["--help"]), ("tfcli.cli.params", ["params"]), ("numpy", ["generate", "-m", str(TINY_GPT2), "Hi"]),
     ("tfcli.engine.tokenizer", ["tokenize", "-m", str(TINY_GPT2), "Hi"]), ("tfcli.store.registry", ["models"])],
    ids=["typer", "rich", "command-module", "numpy-in-a-command", "engine-in-a-command", "store"],
)  # fmt: skip
def test_ctrl_c_while_loading_is_one_line_and_130(tmp_path, module, args):
    script = f"MODULE = {module!r}\nARGS = {args!r}\n" + _INTERRUPT_AT_IMPORT
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, env=subprocess_env(tmp_path), cwd=ROOT, timeout=60)
    assert r.returncode == 130, r.stderr
    assert r.stderr.decode().strip().splitlines()[-1] == "error: interrupted" and b"Traceback" not in r.stderr, r.stderr


def test_a_real_ctrl_c_while_the_command_line_loads(tmp_path):
    """A real SIGINT once the command line's modules are loading (python -X importtime reports each
    import as it ends: the signal is sent when Typer's or Rich's first one does)."""
    for trigger in (b"typer.core", b"rich.console", b"click", b"tfcli.cli.console"):
        p = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "tfcli", "params", "--preset", "gpt2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(tmp_path), cwd=ROOT)
        seen = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            seen += line
            if not line or trigger in line:
                break
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        err = b"".join(line for line in (seen + err).splitlines(keepends=True) if not line.startswith(b"import time:"))
        assert p.returncode in (0, 130), (trigger, p.returncode, err)
        assert b"Traceback" not in err, (trigger, err)
        if p.returncode == 130:
            assert err.strip().splitlines()[-1] == b"error: interrupted", err


@pytest.mark.parametrize(
    "args, code",
    [(["--version"], 1), (["params", "--preset", "gpt2", "--json"], 1), (["explore", "-m", TINY_GPT2, "Hi", "-o", "-"], 1),
     (["explore", "-m", TINY_GPT2, "Hi", "-o", "PAGE"], 0), (["attn", "-m", TINY_GPT2, "Hi", "--json"], 1)],
    ids=["version", "json", "explore-to-stdout", "explore-to-a-file", "attn-json"],
)  # fmt: skip
def test_a_closed_stdout_is_said_when_something_would_be_lost(tmp_path, args, code):
    """`tfcli ... >&-`: what would go to stdout is lost, so the run says so (exit 1); a command
    whose output is a file it writes has lost nothing (exit 0)."""
    page = tmp_path / "page.html"
    args = [page if a == "PAGE" else a for a in args]
    r = subprocess.run(tfcli_command(*args), preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE, env=subprocess_env(tmp_path), cwd=ROOT, timeout=60)
    if code == 1:
        assert_one_line(r.stderr, r.returncode, 1, b"the standard output is closed (>&-)")
    else:
        assert r.returncode == 0 and b"Traceback" not in r.stderr and page.read_bytes().startswith(b"<!doctype html>"), r.stderr
