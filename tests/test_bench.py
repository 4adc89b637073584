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


def test_bench_depth_decodes_after_a_context_of_that_many_tokens(cli, monkeypatch):
    """--depth N, as llama-bench -d N: every timed decode step runs with N positions and more held
    (the context filled once, the runs after the first only recompute its last token)."""
    from tfcli.engine import generate
    from tfcli.engine.families import load_config
    from tfcli.engine.kvcache import kv_bytes
    from tfcli.store.registry import resolve

    held, real = [], generate.Session.step

    def step(self, token):
        held.append(self.cache.length)
        return real(self, token)

    monkeypatch.setattr(generate.Session, "step", step)
    r = cli("bench", "--prompts", "8", "-n", "4", "--runs", "2", "--depth", "100", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["decode_depth"] == 100 and len(doc["decode_runs"]) == 2 and doc["decode_tps"] > 0
    assert held == [100, 101, 102, 103] * 2
    config = load_config(resolve("shakespeare") / "config.json")
    assert doc["kv_bytes"] == kv_bytes(config, 104, doc["kv_type"])
    held.clear()
    doc = json.loads(cli("bench", "--prompts", "8", "-n", "2", "--runs", "1", "--json").stdout)
    assert doc["decode_depth"] == 16 and held == [16, 17]  # without --depth: after a 16-token prompt, as before


def test_bench_depth_must_fit_the_context(cli):
    r = cli("bench", "-m", "tang", "--depth", "100", "-n", "64")
    assert r.exit_code == 2 and "context is 128 tokens" in r.stderr and "--depth" in r.stderr
    r = cli("bench", "-m", "tang", "--depth", "-1")
    assert r.exit_code == 2 and "--depth must be 0 or more" in r.stderr
