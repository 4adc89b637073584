"""Shell completion: the options, what it completes, and which shell's script it prints."""

from __future__ import annotations

import sys

import pytest


def test_completion_options(cli):
    r = cli("--help")
    assert "--install-completion" in r.stdout and "--show-completion" in r.stdout
    r = cli("--show-completion", "bash")
    assert r.exit_code == 0 and "complete" in r.stdout and "_TFCLI_COMPLETE" in r.stdout


def test_completion_completes_commands_and_options(tmp_path):
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TFCLI_HOME=str(tmp_path), _TFCLI_COMPLETE="complete_bash")
    words = {"tfcli sh": "1", "tfcli generate --te": "2"}
    got = {w: subprocess.run([sys.executable, "-m", "tfcli"], env=env | {"COMP_WORDS": w, "COMP_CWORD": c}, capture_output=True, text=True).stdout.split() for w, c in words.items()}
    assert got == {"tfcli sh": ["show"], "tfcli generate --te": ["--temperature", "--temp", "--template"]}



@pytest.mark.parametrize("shell, marker", [("bash", "complete -o"), ("zsh", "#compdef tfcli"), ("fish", "complete --command tfcli")])
def test_the_named_shell_wins(cli, shell, marker):
    r = cli("--show-completion", shell)
    assert r.exit_code == 0, r.stderr
    assert marker in r.stdout and "_TFCLI_COMPLETE" in r.stdout


def test_completion_with_no_shell_among_the_parents(cli, monkeypatch):
    import typer._completion_shared as shared

    monkeypatch.setattr(shared, "_get_shell_name", lambda: None)  # CI, docker exec: no shell to find
    monkeypatch.delenv("SHELL", raising=False)
    r = cli("--show-completion", "bash")
    assert r.exit_code == 0 and "_TFCLI_COMPLETE" in r.stdout
    r = cli("--show-completion")
    assert r.exit_code == 2 and "no shell found" in r.stderr and "tfcli --show-completion bash" in r.stderr
    monkeypatch.setenv("SHELL", "/usr/bin/zsh")
    assert "#compdef tfcli" in cli("--show-completion").stdout
    r = cli("--show-completion", "tcsh")
    assert r.exit_code == 2 and "'tcsh' is not a shell tfcli completes" in r.stderr
