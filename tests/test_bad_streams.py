"""Where the output goes: --json alone on stdout, no colour codes off a terminal or with NO_COLOR,
a reader that went away, a terminal that cannot show the text, Ctrl-C."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from badinput import ROOT, Env, assert_one_line, edit_config, subprocess_env, tfcli_command
from conftest import TINY_GPT2, TINY_LLAMA

# --- output hygiene ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["params", "--preset", "gpt2", "--json"],
        ["params", "--list-presets", "--json"],
        ["params", "--from", TINY_LLAMA, "--json"],
        ["tokenize", "-m", TINY_GPT2, "Hello, world", "--json"],
        ["attn", "--demo", "--json"],
        ["attn", "--show-mask", "the cat sat", "--pattern", "sliding:2", "--json"],
        ["attn", "-m", TINY_GPT2, "To be, or not", "--head", "all", "--json"],
        ["models", "--json"],
        ["bench", "-m", TINY_GPT2, "--prompts", "4", "--new-tokens", "4", "--runs", "1", "--json"],
    ],
    ids=lambda a: "-".join(str(x) for x in a[:2]),
)
def test_json_output_is_only_json(cli, monkeypatch, args):
    from tfcli.engine import bench

    monkeypatch.setattr(bench, "measure_read_bandwidth", lambda: 1e10)  # the 1 GB bandwidth probe is not the point here
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    json.loads(r.stdout)  # the whole of stdout, and nothing else


def test_json_with_a_warning_keeps_the_warning_off_stdout(cli, tmp_path):
    m = Env(tmp_path, None).model()
    weights = load_file(m / "model.safetensors")
    weights["extra.weight"] = np.zeros((2,), np.float32)
    save_file(weights, m / "model.safetensors")
    r = cli("attn", "-m", m, "Hello", "--json")
    assert r.exit_code == 0 and r.stderr.startswith("warning: ")
    json.loads(r.stdout)


# Commands whose output Rich colours on a terminal: a table, --show-probs bars on stderr, a heatmap, an error line.
_COLOURFUL = [
    ["params", "--preset", "gpt2"],
    ["generate", "-m", str(TINY_GPT2), "Hello", "-n", "3", "--seed", "0", "--show-probs", "2"],
    ["attn", "-m", str(TINY_GPT2), "To be", "--head", "all"],
    ["generate", "-m", "nope", "Hello"],
]
# Runs several commands in one Python process (the real entry point and error boundary), with the
# process's own stdout and stderr, whatever they are.
_RUN_ALL = """
import sys
from tfcli.cli import app
for args in ARGS:
    try:
        app(args, prog_name="tfcli")
    except SystemExit:
        pass
"""


def _run_all(commands: list[list[str]]) -> list[str]:
    return [sys.executable, "-c", _RUN_ALL.replace("ARGS", repr(commands))]


def test_no_colour_codes_when_output_is_not_a_terminal(tmp_path):
    """Pipes and no NO_COLOR: Rich sees no terminal and writes plain text."""
    r = subprocess.run(_run_all(_COLOURFUL), capture_output=True, env=subprocess_env(tmp_path, TERM="xterm-256color"), cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"model (T=1)" in r.stderr and b"error: unknown model 'nope'" in r.stderr and b"Embedding" in r.stdout
    assert b"\x1b" not in r.stdout + r.stderr


def _run_in_a_terminal(cmd: list[str], env: dict[str, str]) -> bytes:
    """Run cmd with stdout and stderr on a pseudo-terminal; everything it wrote."""
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other end closed
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    p.wait(timeout=10)
    os.close(master)
    return out


@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
def test_no_colour_codes_on_a_terminal_with_NO_COLOR(tmp_path, no_color):
    commands = [_COLOURFUL[0], _COLOURFUL[3]]
    env = subprocess_env(tmp_path, TERM="xterm-256color", COLUMNS="120") | ({"NO_COLOR": "1"} if no_color else {})
    out = _run_in_a_terminal(_run_all(commands), env)
    assert b"Embedding" in out and b"unknown model 'nope'" in out
    # NO_COLOR (no-color.org) turns colour off; bold and dim, which are not colour, may stay.
    assert bool(_colour_codes(out)) is not no_color  # without NO_COLOR the check can fail: Rich does colour


def _colour_codes(out: bytes) -> list[bytes]:
    """SGR escape sequences that set a colour: 30-37, 38;..., 40-47, 48;..., 90-97, 100-107."""
    found = []
    for params in re.findall(rb"\x1b\[([0-9;]*)m", out):
        codes = [int(c) for c in params.split(b";") if c]
        if any(30 <= c <= 49 or 90 <= c <= 107 for c in codes):
            found.append(params)
    return found


@pytest.mark.parametrize(
    "args",
    [["params", "--preset", "gpt3"], ["tokenize", "-m", TINY_GPT2, "Hello", "--json"], ["generate", "-m", TINY_GPT2, "Hello", "-n", "20"],
     ["--help"], ["--version"], ["generate", "--help"], ["params", "--help"], [], ["-V"], ["attn", "--demo"], ["models", "--json"]],
    ids=["rich-table", "json", "generated-text", "help", "version", "generate-help", "params-help", "bare", "V", "attn-demo", "models-json"],
)  # fmt: skip
def test_a_reader_that_went_away_ends_quietly(tmp_path, args):
    """`tfcli ... | head`: the pipe's reader is gone before the first write. Exit 0, nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run(tfcli_command(*args), stdout=write_end, stderr=subprocess.PIPE, env=subprocess_env(tmp_path), cwd=ROOT, timeout=60)
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr) == (0, b"")


def test_a_terminal_that_cannot_show_the_text_gets_replacements(tmp_path):
    """An ASCII-only stdout (a Latin-1 locale does the same with Chinese): '?' instead of a traceback."""
    env = subprocess_env(tmp_path, PYTHONIOENCODING="ascii")
    r = subprocess.run(tfcli_command("tokenize", "-m", TINY_GPT2, "café 今天"), capture_output=True, env=env, cwd=ROOT, timeout=60)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    assert b"?" in r.stdout


@pytest.fixture(scope="module")
def long_context_gpt2(tmp_path_factory) -> Path:
    """The tiny GPT-2 with 4,096 learned positions (random), so that a generation can run for seconds."""
    m = tmp_path_factory.mktemp("long") / "long-gpt2"
    shutil.copytree(TINY_GPT2, m)
    weights = load_file(m / "model.safetensors")
    weights["transformer.wpe.weight"] = np.random.default_rng(0).normal(0, 0.02, (4096, 64)).astype(np.float32)
    save_file(weights, m / "model.safetensors")
    return edit_config(m, n_positions=4096)


def test_ctrl_c_exits_130_keeping_the_text_and_the_statistics(tmp_path, long_context_gpt2):
    """A real SIGINT, sent once text has started to arrive on stdout."""
    p = subprocess.Popen(
        tfcli_command("generate", "-m", long_context_gpt2, "Once upon a time", "-n", "4000", "--seed", "1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(tmp_path), cwd=ROOT,
    )  # fmt: skip
    try:
        ready, _, _ = select.select([p.stdout], [], [], 60)
        assert ready, "no output within 60 s"
        first = os.read(p.stdout.fileno(), 4096)
        time.sleep(0.1)  # a few more tokens; the whole generation takes seconds
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    out, err = (first + rest).decode(), err.decode()
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert len(out.strip()) > 0 and out.endswith("\n")  # the partial text, ended by a newline
    stats = err.strip().splitlines()[-1]
    assert "stopped: interrupted" in stats and " new · " in stats, err
    new = int(stats.split(" new")[0].split("·")[-1].strip())
    assert 0 < new < 4000


def test_ctrl_c_during_a_two_thread_batch_exits_130_at_once(tmp_path, long_context_gpt2):
    """--samples on two threads: the helper thread finishes its half and the process exits 130."""
    p = subprocess.Popen(
        tfcli_command("generate", "-m", long_context_gpt2, "Once upon a time", "-n", "4000", "--samples", "8", "--threads", "2", "--seed", "1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(tmp_path), cwd=ROOT,
    )  # fmt: skip
    try:
        time.sleep(2)  # loaded (0.05 s), and decoding the batch: 8 x 4,000 tokens take about 8 s on 2 cores (3 took 3.7 s, finishing before the signal)
        assert p.poll() is None, "the batch ended before the signal"
        p.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = p.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert b"Traceback" not in err and waited < 5, (waited, err)


# --- errors from the OS, worded by us ---------------------------------------------------------------


_WRITERS = [
    ["params", "--preset", "gpt2"],
    ["params", "--list-presets", "--json"],
    ["tokenize", "-m", str(TINY_GPT2), "Hello"],
    ["generate", "-m", str(TINY_GPT2), "Hello", "-n", "3"],
    ["attn", "--demo"],
    ["models"],
    ["models", "--json"],
]


@pytest.mark.parametrize("args", _WRITERS, ids=lambda a: "-".join(a[:2]))
def test_stdout_on_a_full_disk_is_one_line(tmp_path, args):
    """`tfcli ... > /dev/full`: every write fails with ENOSPC. One line naming the output, exit 1."""
    with open("/dev/full", "wb") as full:
        r = subprocess.run(tfcli_command(*args), stdout=full, stderr=subprocess.PIPE, env=subprocess_env(tmp_path), cwd=ROOT, timeout=60)
    assert_one_line(r.stderr, r.returncode, 1, b"no space left on the output", b"send the output elsewhere")


def test_chat_on_a_full_disk_is_one_line(tmp_path):
    m = Env(tmp_path, None).chat_model()
    with open("/dev/full", "wb") as full:
        r = subprocess.run(tfcli_command("chat", "-m", m, "-n", "3"), input=b"Hello\n", stdout=full, stderr=subprocess.PIPE, env=subprocess_env(tmp_path), cwd=ROOT, timeout=60)
    assert_one_line(r.stderr, r.returncode, 1, b"no space left on the output")


@pytest.mark.parametrize(
    "closed, args, code",
    [
        (1, ["generate", "-m", str(TINY_GPT2), "Hello", "-n", "3"], 1),
        (1, ["params", "--preset", "gpt2"], 1),
        (0, ["generate", "-m", str(TINY_GPT2), "-", "-n", "3"], 2),
        (0, ["chat", "-m", "CHAT", "-n", "3"], 0),
        (2, ["generate", "-m", str(TINY_GPT2), "Hello", "-n", "3"], 0),
    ],
    ids=["stdout-generate", "stdout-params", "stdin-generate", "stdin-chat", "stderr-generate"],
)  # fmt: skip
def test_a_closed_standard_stream_is_no_traceback(tmp_path, closed, args, code):
    """`tfcli generate hi >&-` / `<&-` / `2>&-`: a closed stream reads as empty and writes go nowhere.
    A closed stdin gives an empty prompt (exit 2, one line) or ends a chat; a closed stdout, whose
    output would be lost, one line and exit 1 (as `cat file >&-` does); a closed stderr a clean run."""
    args = [str(Env(tmp_path, None).chat_model()) if a == "CHAT" else a for a in args]
    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    streams[("stdin", "stdout", "stderr")[closed]] = None
    r = subprocess.run(tfcli_command(*args), preexec_fn=lambda: os.close(closed), env=subprocess_env(tmp_path), cwd=ROOT, timeout=60, **streams)
    err = r.stderr or b""
    assert r.returncode == code, err
    assert b"Traceback" not in err and b"AttributeError" not in err, err
    if code == 2:
        assert_one_line(err, r.returncode, 2, b"the prompt is empty")
    if code == 1:
        assert_one_line(err, r.returncode, 1, b"the standard output is closed", b"send it to a file")
