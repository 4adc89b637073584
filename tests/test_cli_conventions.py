"""The conventions scripts and users rely on: --version, a bare `tfcli`, flags shown as flags, the
environment documented, values converted, one-line messages, and other tools' command names."""

from __future__ import annotations

import re

import pytest

import tfcli


def test_version(cli):
    for flag in ("--version", "-V"):
        r = cli(flag)
        assert r.exit_code == 0 and r.stdout.strip() == f"tfcli {tfcli.__version__}"


def test_bare_tfcli_prints_the_help_and_succeeds(cli):
    r = cli()
    assert r.exit_code == 0, r.stderr
    assert "Usage: tfcli" in r.stdout and "generate" in r.stdout and r.stderr == ""


def test_environment_variables_are_documented(cli):
    text = cli("--help").stdout
    for name in ("TFCLI_HOME", "TFCLI_THREADS", "TFCLI_FONT", "NO_COLOR", "XDG_CACHE_HOME"):
        assert name in text


def _commands():
    from tfcli.cli import app
    import typer.main

    return sorted(typer.main.get_group(app).commands)


@pytest.mark.parametrize("command", [None, *_commands()])
def test_flags_are_shown_as_flags(cli, command):
    r = cli(*([command] if command else []), "--help")
    assert r.exit_code == 0, r.stderr
    assert "<bool>" not in r.stdout
    # and options that take a value still say what it is
    if command == "generate":
        assert re.search(r"--max-tokens\s+-n\s+<int>", r.stdout)


def test_bad_values_keep_one_line_messages(cli):
    r = cli("generate", "--top-k", "x")
    assert r.exit_code == 2 and "'x' is not a valid integer" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("generate", "-t", "warm")
    assert r.exit_code == 2 and "'warm' is not a valid float" in r.stderr and len(r.stderr.strip().splitlines()) == 1  # -t takes a list
    r = cli("params", "--mlp", "relu")
    assert r.exit_code == 2 and "'relu' is not one of 'gelu', 'swiglu'" in r.stderr


def test_values_are_converted(cli):
    r = cli("generate", "-n", "3", "-t", "0", "--top-k", "5", "--stop", "x", "--stop", "y", "To be")
    assert r.exit_code == 0, r.stderr
    r = cli("params", "--preset", "gpt2", "--mlp", "swiglu")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("typed, meant", [("run", "generate"), ("list", "models"), ("help", "--help")])
def test_other_tools_command_names_suggest_tfclis(cli, typed, meant):
    r = cli(typed)
    assert r.exit_code == 2 and f"did you mean 'tfcli {meant}'?" in r.stderr and r.stderr.count("\n") == 1
