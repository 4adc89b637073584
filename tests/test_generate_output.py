"""What generate writes where: the prompt then its continuation on stdout, at a terminal and piped
alike (a piped prompt too, a slow writer's waited for), the statistics on a line of their own on
stderr, and what they say."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_piped_generate_never_glues_its_statistics_to_the_text():
    """`echo ROMEO: | tfcli generate ... 2>&1 | cat`, 20 times: the statistics start a line of their
    own every time (once in seven runs they followed the text on its last line)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")} | {"NO_COLOR": "1"}
    cmd = [sys.executable, "-m", "tfcli", "generate", "-n", "8", "--seed", "1"]
    outputs = []
    for _ in range(10):  # two at a time: 20 runs
        procs = []
        for _ in range(2):
            r, w = os.pipe()  # the prompt waits in the pipe, as `echo ROMEO: |` leaves it
            os.write(w, b"ROMEO:\n")
            os.close(w)
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=r, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            os.close(r)
        outputs += [p.communicate(timeout=60)[0].decode() for p in procs]
    for text in outputs:
        stats = [line for line in text.splitlines() if "prompt tokens" in line]
        assert len(stats) == 1 and stats[0].startswith("7 prompt tokens"), text



def _env(tmp_path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TFCLI_HOME=str(tmp_path))


@pytest.mark.parametrize("extra", [[], ["--show-probs", "2"]], ids=["streamed", "show-probs"])
def test_piped_generate_shows_the_prompt_then_its_continuation(cli, extra):
    r = cli("generate", "ROMEO:", "-n", "5", "-t", "0", *extra)
    assert r.exit_code == 0, r.stderr
    alone = cli("generate", "ROMEO:", "-n", "5", "-t", "0", "--json").stdout
    import json

    assert r.stdout == "ROMEO:" + json.loads(alone)["text"] + "\n"


def test_a_prompt_piped_in_is_shown_too_and_no_prompt_shows_none(cli):
    piped = cli("generate", "-n", "5", "-t", "0", input="ROMEO:")
    assert piped.exit_code == 0 and piped.stdout.startswith("ROMEO:")
    bare = cli("generate", "-n", "5", "-t", "0")  # a newline starts it: nothing to show before the text
    assert bare.exit_code == 0 and not bare.stdout.startswith("ROMEO:") and "1 prompt token ·" in bare.stderr


def test_each_sample_of_a_list_is_a_whole_text(cli):
    r = cli("generate", "ROMEO:", "-t", "0.2,0.8,1.5", "-n", "5", "--seed", "1")
    assert r.exit_code == 0, r.stderr
    blocks = r.stdout.split("── sample ")[1:]
    assert len(blocks) == 3 and all(b.split("──\n", 1)[1].startswith("ROMEO:") for b in blocks)  # piped: one after another


def test_a_list_fits_side_by_side_in_80_columns():
    from tfcli.cli.views.generate import side_by_side

    assert side_by_side(3, 80) and not side_by_side(4, 80)  # the README's -t 0.2,0.8,1.5 at a terminal of 80


def test_the_help_says_the_prompt_is_shown(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    help_text = " ".join(cli("generate", "--help").stdout.split())
    assert "stdout holds the prompt and then its continuation" in help_text and "piped" in help_text


def test_a_slow_writers_prompt_is_waited_for(tmp_path):
    """`(sleep 1.5; echo ROMEO:) | tfcli generate`: the wait is said, and the prompt that arrives
    after it is used, not dropped. The prompt is written once tfcli has said it waits (on a loaded
    machine its start-up alone can outlast a fixed sleep)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "tfcli", "generate", "-n", "3", "-t", "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path), cwd=ROOT,
    )  # fmt: skip
    said: list[bytes] = []

    def read_until_the_wait_is_said() -> None:
        while not said or (said[-1] and b"waiting for the prompt" not in said[-1]):
            said.append(p.stderr.readline())

    reader = threading.Thread(target=read_until_the_wait_is_said, daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert said and b"waiting for the prompt piped to stdin" in said[-1], said  # the wait was said
    out, err = p.communicate(b"ROMEO:", timeout=60)
    assert p.returncode == 0, err
    assert b"6 prompt tokens" in err and out.startswith(b"ROMEO:")


def test_an_empty_pipe_starts_from_a_newline(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tfcli", "generate", "-n", "3", "-t", "0"], input=b"", capture_output=True, env=_env(tmp_path), cwd=ROOT, timeout=60)
    assert r.returncode == 0 and b"1 prompt token \xc2\xb7" in r.stderr



def test_one_prompt_token(cli):
    r = cli("generate", "R", "-n", "2", "-t", "0")
    assert "1 prompt token ·" in r.stderr and "1 prompt tokens" not in r.stderr


def test_stopped_by_a_full_context_says_so(cli):
    r = cli("generate", "ROMEO:", "-t", "0")  # shakespeare's context: 256 tokens
    assert r.exit_code == 0, r.stderr
    assert "stopped: context full" in r.stderr
    r = cli("generate", "ROMEO:", "-t", "0", "-n", "5")
    assert "stopped: max tokens" in r.stderr


def test_a_prompt_piped_in_without_a_dash_is_used(cli, tmp_path):
    import os
    import subprocess
    import sys

    piped = cli("generate", "-n", "5", "-t", "0", input="ROMEO:")
    dashed = cli("generate", "-", "-n", "5", "-t", "0", input="ROMEO:")
    assert piped.exit_code == 0 and piped.stdout == dashed.stdout and "6 prompt tokens" in piped.stderr
    assert "1 prompt token ·" in cli("generate", "-n", "5", "-t", "0").stderr  # nothing piped: a newline, as before
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TFCLI_HOME=str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "tfcli", "generate", "-n", "3", "-t", "0"], input="ROMEO:", env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "6 prompt tokens" in run.stderr  # a real pipe
    run = subprocess.run([sys.executable, "-m", "tfcli", "generate", "-n", "3", "-t", "0"], stdin=subprocess.DEVNULL, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "1 prompt token ·" in run.stderr
