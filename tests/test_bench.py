"""tfcli bench: its stages, defaults that fit the model, sizes that do not fit, and what it says of
cores other processes held."""

from __future__ import annotations

import json


def test_bench_with_no_arguments_fits_the_default_model_and_shows_its_stages(cli, monkeypatch):
    from tfcli.cli.console import err

    r = cli("bench", "--runs", "1", "--json")  # stderr is not a terminal: no progress there (cli/progress.py)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["model"] == "shakespeare" and doc["prompts"] == [16, 128, 256] and doc["new_tokens"] == 128
    assert "loading the model" not in r.stderr and "decoding" not in r.stderr
    monkeypatch.setattr(err, "_force_terminal", True)  # at a terminal: a spinner with each stage
    monkeypatch.setattr(err, "is_interactive", True)
    r = cli("bench", "--runs", "1", "--prompts", "16,32", "-n", "8", "--json")
    assert r.exit_code == 0, r.stderr
    stages = ["loading the model", "prompt pass, 16 tokens (run 1 of 1)", "prompt pass, 32 tokens (run 1 of 1)",
              "decoding 8 tokens (run 1 of 1)", "memory read bandwidth"]
    at = [r.stderr.find(s) for s in stages]
    assert -1 not in at and at == sorted(at), r.stderr  # each stage shown, in order


def test_bench_defaults_for_a_short_context(cli):
    doc = json.loads(cli("bench", "-m", "tang", "--runs", "1", "--json").stdout)
    assert doc["prompts"] == [16, 128] and doc["new_tokens"] == 112  # 16 + 112 = tang's 128


def test_bench_refuses_sizes_that_do_not_fit(cli):
    r = cli("bench", "-m", "tang", "--prompts", "512")
    assert r.exit_code == 2 and "context is 128 tokens" in r.stderr



def test_bench_says_when_other_processes_held_the_cores(cli, monkeypatch):
    from tfcli.engine import threads

    monkeypatch.setattr(threads, "busy_cpus", lambda: 1)
    r = cli("bench", "--prompts", "8", "--new-tokens", "4", "--runs", "1")
    assert r.exit_code == 0, r.stderr
    assert "other processes held 1 of the" in r.stderr
    monkeypatch.setattr(threads, "busy_cpus", lambda: 0)
    r = cli("bench", "--prompts", "8", "--new-tokens", "4", "--runs", "1", "--json")
    assert json.loads(r.stdout)["busy_cores"] == 0 and "other processes" not in r.stderr
