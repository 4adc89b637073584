"""Everyday habits, third round: reproducible samples, numbers written one way, summaries that add
up, and the small things a new user trips on. Each test fails without its fix."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA


# --- reproducible samples ------------------------------------------------------------------------


def _seed(stderr: str) -> int:
    return int(re.search(r"· seed (\d+)", stderr).group(1))


def test_a_sample_shows_its_seed_and_the_seed_gives_it_again(cli):
    r = cli("generate", "ROMEO:", "-n", "20")
    assert r.exit_code == 0, r.stderr
    seed = _seed(r.stderr)
    again = cli("generate", "ROMEO:", "-n", "20", "--seed", str(seed))
    assert again.stdout == r.stdout and _seed(again.stderr) == seed
    doc = json.loads(cli("generate", "ROMEO:", "-n", "5", "--seed", str(seed), "--json").stdout)
    assert doc["stats"]["seed"] == seed


def test_seed_minus_one_draws_a_seed(cli):
    r = cli("generate", "ROMEO:", "-n", "5", "--seed", "-1")
    assert r.exit_code == 0, r.stderr
    assert _seed(r.stderr) >= 0
    assert cli("generate", "ROMEO:", "-n", "5", "--seed", "-2").exit_code == 2


def test_greedy_has_no_seed_to_show(cli):
    r = cli("generate", "ROMEO:", "-n", "3", "-t", "0")
    assert r.exit_code == 0 and "seed" not in r.stderr
    assert json.loads(cli("generate", "ROMEO:", "-n", "3", "-t", "0", "--json").stdout)["stats"]["seed"] is None


# --- numbers -------------------------------------------------------------------------------------


def test_one_prompt_token(cli):
    r = cli("generate", "R", "-n", "2", "-t", "0")
    assert "1 prompt token ·" in r.stderr and "1 prompt tokens" not in r.stderr


def _floats(value):
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _floats(v)
    elif isinstance(value, list):
        for v in value:
            yield from _floats(v)


@pytest.mark.parametrize("args", [
    ["lens", "-m", TINY_GPT2, "hello there", "--json"],
    ["lens", "-m", TINY_LLAMA, "--compare", " be", "to be", "--json"],
    ["neurons", "hello there", "--block", "0", "-m", TINY_GPT2, "--neuron", "3", "--json"],
    ["embed", "neighbors", "a", "-m", TINY_LLAMA, "--json"],
    ["embed", "similarity", "a", "b", "-m", TINY_LLAMA, "--json"],
    ["geometry", "-m", TINY_GPT2, "--sample", "100", "--json"],
    ["score", "To be, or not to be", "--json"],
])
def test_json_floats_follow_one_policy(cli, args):
    """A float in --json is a float32's shortest decimal (at most 9 significant digits) or a figure
    to 4 significant digits: never a float64's 17 digits such as 0.5634812116622925."""
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    for x in _floats(json.loads(r.stdout)):
        assert x == float(f"{x:.9g}"), (x, args)


def test_sizes_are_written_one_way(cli):
    from tfcli import numbers

    for args in (["models"], ["show", "shakespeare"]):
        r = cli(*args)
        assert r.exit_code == 0, r.stderr
        sizes = re.findall(r"\d[\d.,]*\s?[kMG]?B\b", r.stdout)
        assert sizes and all(re.fullmatch(r"\d[\d.]* [kMG]B", s) for s in sizes), (args, sizes)  # "6.5 MB", never "6.5MB"
    assert numbers.size(539_600_000) == "540 MB" and numbers.size(6_500_000) == "6.5 MB"


# --- summaries that are true ---------------------------------------------------------------------


def test_a_heads_shares_never_add_past_100_percent(cli):
    from tfcli.analysis.attention import summarize

    # Token 1 looks at token 0, which is both the first and its previous token: counted once.
    t = 6
    w = np.eye(t, k=-1)
    w[0, 0] = 1
    w[2:, 0] = 0.3
    w[np.arange(2, t), np.arange(1, t - 1)] = 0.7
    s = summarize(w, 0, 0)
    assert s.to_first + s.to_previous + s.to_self <= 1 + 1e-9
    r = cli("attn", "-m", "tang", "今天天气很好", "--block", "0", "--head", "0")
    assert r.exit_code == 0, r.stderr
    shares = [int(x) for x in re.findall(r"(\d+)% to (?:the first token|the previous one|themselves)", r.stdout.replace("\n", " "))]
    assert len(shares) == 3 and sum(shares) <= 101  # rounding
    assert "Most attention goes to" not in r.stdout


def test_stopped_by_a_full_context_says_so(cli):
    r = cli("generate", "ROMEO:", "-t", "0")  # shakespeare's context: 256 tokens
    assert r.exit_code == 0, r.stderr
    assert "stopped: context full" in r.stderr
    r = cli("generate", "ROMEO:", "-t", "0", "-n", "5")
    assert "stopped: max tokens" in r.stderr


def test_the_readme_says_what_the_lens_reads_at_layer_0():
    from pathlib import Path

    from conftest import doc_text

    readme = doc_text()  # README.md and docs/
    assert "The embedding row reads the input token itself" not in readme
    assert "␣strugg" in readme


# --- shell completion ----------------------------------------------------------------------------


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


# --- habits --------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("typed, meant", [("run", "generate"), ("list", "models"), ("help", "--help")])
def test_other_tools_command_names_suggest_tfclis(cli, typed, meant):
    r = cli(typed)
    assert r.exit_code == 2 and f"did you mean 'tfcli {meant}'?" in r.stderr and r.stderr.count("\n") == 1


def test_show_mask_says_it_ignores_block_and_head(cli):
    r = cli("attn", "--show-mask", "the cat sat", "--block", "2")
    assert r.exit_code == 0 and "--block and --head are ignored" in r.stderr
    assert "ignored" not in cli("attn", "--show-mask", "the cat sat").stderr


def test_pytest_says_why_it_skips():
    import tomllib
    from pathlib import Path

    config = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert "-rs" in config["tool"]["pytest"]["ini_options"]["addopts"].split()


@pytest.mark.parametrize("args", [
    ["generate", "今天天气", "-n", "2"],
    ["attn", "今天天气"],
    ["tokenize", "今天"],
    ["lens", "今天天气"],
    ["score", "今天天气很好"],
])
def test_text_the_model_cannot_spell_is_said_once(cli, args):
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "cannot spell" in line]
    assert len(warnings) == 1 and "'今'" in warnings[0] and "-m tang" in warnings[0]
    assert "cannot spell" not in cli(*[a if a not in ("今天天气", "今天", "今天天气很好") else "To be" for a in args]).stderr


# --- help ----------------------------------------------------------------------------------------


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


def test_a_chinese_page_says_how_it_draws_chinese(cli, tmp_path):
    r = cli("explore", "-m", "tang", "今天天气很好", "--lang", "zh", "-o", tmp_path / "p.html")
    assert r.exit_code == 0 and "没有嵌入字体" in r.stderr  # --lang zh: said in Chinese
    r = cli("explore", "-m", "tang", "今天天气很好", "--lang", "en", "-o", tmp_path / "p.html")
    assert r.exit_code == 0 and "no font is embedded" in r.stderr
    assert "no font is embedded" not in cli("explore", "To be", "-o", tmp_path / "q.html").stderr


def test_the_pages_heatmap_axes_name_the_tokens():
    from pathlib import Path

    js = (Path(__file__).resolve().parent.parent / "tfcli" / "explore" / "page.js").read_text(encoding="utf-8")
    body = js[js.index("function drawHeatmap()") : js.index("function drawThumbs()")]
    assert body.count("clip(labels[i], 8)") == 1 and "rotate(-90" in body  # rows and columns: the tokens, not positions


def test_score_without_colour_shows_the_numbers(cli):
    r = cli("score", "To be, or not to be", "--text")  # the cli fixture sets NO_COLOR
    assert r.exit_code == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert re.search(r"\[(\d+%|<1%)\]", first) and "probability of each token:  ≥ 50%" not in r.stdout
    assert "[p%] after a token" in r.stdout
