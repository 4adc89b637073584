"""Everyday use, fourth round (issue 35): one test per class of trouble a learner met.

- long experiments say their progress on stderr, counted in their own unit;
- ablation's colours show small effects (a per-grid symmetric log scale, said in a legend);
- a line on stderr never shares a line with the text on stdout (`2>&1 | cat`);
- tokenize shows an unknown character's own bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def always_progress(monkeypatch):
    from tfcli.cli import progress

    monkeypatch.setattr(progress, "LONG_SECONDS", 0.0)  # every run counts as long: the first unit is said


@pytest.mark.parametrize("args, said", [
    (["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e"], "patching 1 of 5 residual indices"),
    (["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "--site", "mlp"], "patching 1 of 4 blocks"),
    (["ablate", "ROMEO:"], "ablating 1 of 4 blocks"),
    (["heads", "ROMEO:"], "reading 1 of 12 blocks (3 passes)"),
    (["steer", "ROMEO:", "--toward", "love", "--away", "hate", "--layer", "1", "-n", "3", "-t", "0"], "generating 1 of 6 tokens"),
    (["ablate", "ROMEO:", "--lang", "zh"], "消融：第 1 / 4 个块"),
])  # fmt: skip
def test_long_experiments_count_their_work_on_stderr(cli, always_progress, args, said):
    r = cli(*args, "-m", "shakespeare")
    assert r.exit_code == 0, r.stderr
    assert said in r.stderr
    assert said not in r.stdout


def test_a_short_run_says_nothing_of_progress(cli):
    r = cli("ablate", "ROMEO:", "-m", "shakespeare")
    assert r.exit_code == 0 and "of 4 blocks" not in r.stderr


def test_the_progress_json_stays_clean(cli, always_progress):
    r = cli("ablate", "ROMEO:", "-m", "shakespeare", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["answer"]["text"] == "\n"


def test_ablation_colours_show_small_effects_and_say_their_scale():
    from tfcli.cli.views.experiments import legend, shade

    top = 11.35  # block 0's MLP in the issue; head 1.4 at -1.11 and MLP 11 at -4.11 looked like +0.00
    for small in (-1.11, -4.11, -0.5):
        assert shade(small, top, log=True) <= -0.3  # a third of the way to full blue, at least
    assert shade(-0.01, top, log=True) > -0.05  # noise stays near the grey of 0
    assert shade(-top, top, log=True) == -1.0 and shade(2.0, top, log=True) > 0
    assert shade(-1.11, top) > -0.1  # what the linear scale did
    assert "log scale" in legend(top, True) and "11.35" in legend(top, True)
    assert "对数刻度" in legend(top, True, zh=True)


def test_the_ablation_grid_in_colour_has_a_legend(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from tfcli.cli import app
    from tfcli.cli.views import inside

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path))
    monkeypatch.setattr(inside, "uses_colour", lambda console: True)
    r = CliRunner().invoke(app, ["ablate", "ROMEO:", "-m", "shakespeare"])
    assert r.exit_code == 0, r.stderr
    assert "colour: blue negative, red positive; log scale" in r.stdout


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


def test_tokenize_shows_an_unknown_characters_own_bytes(cli):
    r = cli("tokenize", "-m", "shakespeare", "今a", "--json")
    rows = json.loads(r.stdout)["tokens"]
    assert rows[0]["text"] == "<unk>" and rows[0]["bytes"] == "e4 bb 8a" and rows[0]["unknown"] == "今"
    assert rows[1] == {"id": rows[1]["id"], "text": "a", "bytes": "61", "piece": "a"}
    table = cli("tokenize", "-m", "shakespeare", "a今b").stdout
    assert "e4 bb 8a" in table and "3c 75 6e 6b 3e" not in table and "<unk> for '今'" in table


LAYER_WORD = __import__("re").compile(r"\blayers?\b|层")  # "layer" is never a block's name nor a residual index's


@pytest.mark.parametrize("args", [
    ["lens", "ROMEO:"], ["lens", "ROMEO:", "--position", "-1"], ["lens", "--compare", "ROMEO", "JULIET"],
    ["lens", "ROMEO:", "--lang", "zh"], ["lens", "--compare", "ROMEO", "JULIET", "--lang", "zh"],
    ["models"], ["show", "shakespeare"], ["params"], ["attn", "--explain"], ["attn", "--explain", "--lang", "zh"],
    ["embed", "similarity", "a", "b", "--resid", "2"], ["embed", "similarity", "a", "b", "--resid", "2", "--lang", "zh"],
    ["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e"], ["ablate", "ROMEO:"], ["heads", "ROMEO:"],
    ["steer", "ROMEO:", "--toward", "love", "--away", "hate", "--block", "1", "-n", "3", "-t", "0"],
])  # fmt: skip
def test_one_numbering_and_one_word_in_every_header(cli, args, tmp_path):
    """shakespeare has L = 4 blocks (0-3) and residual indices 0-4: what a command prints calls a
    block a block and a residual index a residual index, never a "layer"."""
    model = [] if args[0] in ("models", "show") else ["-m", "shakespeare"]
    r = cli(*args, *model)
    assert r.exit_code == 0, r.stderr
    said = r.stdout + r.stderr
    assert not LAYER_WORD.search(said), LAYER_WORD.search(said).group(0) + " in: " + said
    if args[0] in ("models", "show", "params") or args[:2] == ["lens", "ROMEO:"]:
        assert "4 blocks" in said or "4 个块" in said


def test_one_numbering_in_json(cli, tmp_path):
    L = 4
    lens = json.loads(cli("lens", "ROMEO:", "-m", "shakespeare", "--json").stdout)
    assert [e["resid"] for e in lens["layers"]] == [e["layer"] for e in lens["layers"]] == list(range(L + 1))  # "layer" kept for old readers
    assert json.loads(cli("params", "-m", "shakespeare", "--json").stdout)["shape"]["blocks"] == L
    assert json.loads(cli("show", "shakespeare", "--json").stdout)["shape"]["blocks"] == L
    patch = json.loads(cli("patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "-m", "shakespeare", "--json").stdout)
    assert [g["resid"] for g in patch["grid"]] == list(range(L + 1))
    mlp = json.loads(cli("patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "-m", "shakespeare", "--site", "mlp", "--json").stdout)
    assert [g["block"] for g in mlp["grid"]] == list(range(L))
    steer = json.loads(cli("steer", "ROMEO:", "--toward", "a", "--away", "b", "--block", "-1", "-n", "2", "-t", "0", "-m", "shakespeare", "--json").stdout)
    assert steer["block"] == steer["layer"] == L - 1
    old = json.loads(cli("steer", "ROMEO:", "--toward", "a", "--away", "b", "--layer", "2", "-n", "2", "-t", "0", "-m", "shakespeare", "--json").stdout)
    assert old["block"] == 2  # --layer: the older name of --block
    embed = json.loads(cli("embed", "similarity", "a", "b", "--resid", "-1", "-m", "shakespeare", "--json").stdout)
    assert embed["query"]["resid"] == embed["query"]["layer"] == L


def test_the_numbering_is_declared_once():
    from tfcli.cli import numbering

    from conftest import doc_text

    readme = doc_text()  # README.md and docs/
    assert readme.count("### Blocks and residual indices") == 1
    assert numbering.blocks(4) == "4 blocks" and numbering.blocks(1) == "1 block" and numbering.resid_name(0) == "0 emb"


def test_help_lists_every_command_without_importing_it():
    """`tfcli --help` and one command import only what they need (start-up, issue 35): the list
    of commands comes from cli.COMMANDS, whose summaries are the docstrings' first sentences."""
    from tfcli.cli import COMMANDS, command_info

    for name, summary in COMMANDS.items():
        assert command_info(name).short_help == summary, name
    code = "import sys; from tfcli.cli import app; print(sorted(m for m in sys.modules if m.startswith('tfcli.cli.') and m.count('.') == 2))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert not any(f"tfcli.cli.{name}'" in loaded for name in COMMANDS), loaded
    r = subprocess.run([sys.executable, "-m", "tfcli", "--help"], cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, COLUMNS="200", NO_COLOR="1"))
    for name, summary in COMMANDS.items():
        assert summary[:40] in r.stdout, name


def test_bench_says_when_other_processes_held_the_cores(cli, monkeypatch):
    from tfcli.engine import threads

    monkeypatch.setattr(threads, "busy_cpus", lambda: 1)
    r = cli("bench", "--prompts", "8", "--new-tokens", "4", "--runs", "1")
    assert r.exit_code == 0, r.stderr
    assert "other processes held 1 of the" in r.stderr
    monkeypatch.setattr(threads, "busy_cpus", lambda: 0)
    r = cli("bench", "--prompts", "8", "--new-tokens", "4", "--runs", "1", "--json")
    assert json.loads(r.stdout)["busy_cores"] == 0 and "other processes" not in r.stderr


def test_steer_says_what_it_saved_and_another_model_refuses_it(cli, tmp_path):
    path = tmp_path / "v.npz"
    r = cli("steer", "ROMEO:", "--toward", "love", "--away", "hate", "--block", "1", "-n", "2", "-t", "0", "-m", "shakespeare", "--save", path)
    assert r.exit_code == 0 and f"wrote {path}" in " ".join(r.stderr.split()) and "· seed" not in r.stdout  # greedy: no seed to tell
    r = cli("generate", "春", "-n", "2", "-m", "tang", "--steer", path)
    assert r.exit_code != 0 and "made on another model" in r.stderr
