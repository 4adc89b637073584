"""tfcli --help and each command's help: every command listed without importing it, summaries of a
line or two, paragraphs wrapped at 80 columns, and a help example that trips no warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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



def test_help_at_80_columns(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("--help")
    commands = [line for line in r.stdout.splitlines() if re.match(r"^│ [a-z]+ +\S", line)]
    names = [line.split()[1] for line in commands]
    assert names.index("score") == names.index("generate") + 1  # next to generate, not last
    rows = r.stdout.split("Commands")[1]
    for name in ("explore", "tokenize", "score"):  # a summary of a line or two, not the whole docstring
        block = re.search(rf"│ {name} .*?(?=\n│ [a-z]+ |\n╰)", rows, re.S).group(0)
        assert block.count("\n") <= 1, block
    r = cli("generate", "--help")
    assert "…" not in r.stdout and "--repetition-penalty" in r.stdout and "--repeat-penalty" in r.stdout
    r = cli("explore", "--help")
    text = r.stdout.split("Examples")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert all(len(line) >= 60 for line in lines[1:-1]), lines  # paragraphs wrapped to the width, not ragged


@pytest.mark.slow
def test_the_lens_help_example_does_not_trip_the_sink_warning(cli, smollm2_folder):
    from tfcli.cli.lens import lens

    example = next(line for line in lens.__doc__.splitlines() if "--compare" in line).split("--compare")[1].split(" -m ")[0]
    texts = re.findall(r'"([^"]*)"', example)
    r = cli("lens", "-m", smollm2_folder, "--compare", *texts)  # the model of the example: " Tower" alone is one token there
    assert r.exit_code == 0 and "warning" not in r.stderr, r.stderr
