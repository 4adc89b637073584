"""Every view at 80 columns, as Rich draws whenever the output is piped: no line wider than the
terminal, no number or row label cut short with '…', no trailing spaces in a pipe."""

from __future__ import annotations

import re

import pytest
from rich.cells import cell_len

from conftest import TINY_GPT2, TINY_LLAMA

WIDTH = 80


@pytest.fixture
def cli80(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))  # as a terminal of 80 columns (Rich reads it on every print)
    return cli


def fits(text: str) -> list[str]:
    """The lines that break the rules: too wide, '…' next to a digit or a '%', trailing spaces."""
    bad = []
    for line in text.splitlines():
        if cell_len(line) > WIDTH or re.search(r"\d…|…\d|…%", line) or line != line.rstrip():
            bad.append(line)
    return bad


def test_geometry(cli80):
    r = cli80("geometry", "-m", "tang")
    assert r.exit_code == 0, r.stderr
    assert fits(r.stdout) == [] and "…" not in r.stdout
    table = [line for line in r.stdout.splitlines() if line.startswith(("random ", "tokens", "centred"))]
    assert len(table) >= 9 and all(re.search(r"\d+\.\d\d° +\d+\.\d\d°", line) for line in table[:9])  # whole angles
    assert "180°" in r.stdout and "12,288" in r.stdout


def test_generate_show_probs_with_a_temperature_list(cli80):
    r = cli80("generate", "ROMEO:", "--show-probs", "5", "-t", "0.2,1,2", "-n", "2", "--seed", "1")
    assert r.exit_code == 0, r.stderr
    shown = [line for line in r.stderr.splitlines() if "tok/s" not in line]  # the statistics are one line each, for scripts
    assert fits("\n".join(shown)) == [], r.stderr
    rows = [line for line in r.stderr.splitlines() if "%" in line and "'" in line]
    assert rows and all(len(re.findall(r"\d+(?:\.\d)?%", line)) == 3 for line in rows)  # three whole percentages a row
    assert r.stderr.count("top-k 40") == 1  # the shared knobs said once, not in every panel's header


def test_lens_compare(cli80):
    r = cli80("lens", "-m", TINY_LLAMA, "--compare", " be", "to be", "not to be", "or not to be")
    assert r.exit_code == 0, r.stderr
    assert fits(r.stdout) == [], r.stdout
    headers = [line for line in r.stdout.splitlines() if line.startswith("resid")]
    assert len(headers) >= 2 and all("…" not in h for h in headers)
    assert "D reads" in r.stdout and "C·D" in r.stdout  # what does not fit goes on into another table
    assert re.search(r"^0 emb ", r.stdout, re.M)


def test_lens_position(cli80):
    r = cli80("lens", "-m", TINY_GPT2, "hello there", "--position", "-1")
    assert r.exit_code == 0, r.stderr
    assert fits(r.stdout) == [], r.stdout
    head = next(line for line in r.stdout.splitlines() if line.startswith("resid"))
    assert head.split() == ["resid", "#1", "#2", "#3", "#4", "#5", "bits"]
    rows = [line for line in r.stdout.splitlines() if re.match(r"^(0 emb|\s+\d+) ", line)]
    assert len(rows) == 4 and all(re.search(r"\d+\.\d$", line) for line in rows)  # bits, whole


@pytest.mark.parametrize("args", [
    ["lens", "-m", TINY_GPT2, "hello there"],
    ["attn", "To be, or not", "-m", TINY_GPT2, "--head", "all"],
    ["neurons", "hello there", "--block", "0", "-m", TINY_GPT2],
    ["embed", "neighbors", "a", "-m", TINY_LLAMA],
    ["params", "--preset", "gpt3"],
])
def test_piped_tables_have_no_trailing_spaces(cli80, args):
    r = cli80(*args)
    assert r.exit_code == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if line != line.rstrip()] == []


# --- every command's help and default output ------------------------------------------------------


def _commands():
    """Every command path of the app, groups' subcommands included: ['generate'], ['features', 'train'], ..."""
    from typer.main import get_command

    from tfcli.cli import app

    def walk(cmd, path, ctx):
        yield path
        if hasattr(cmd, "list_commands"):  # a group (typer's own click): its commands, loaded if lazy
            for name in cmd.list_commands(ctx):
                yield from walk(cmd.get_command(ctx, name), [*path, name], ctx)

    root = get_command(app)
    return list(walk(root, [], root.make_context("tfcli", [], resilient_parsing=True)))


def cut_or_wide(text: str) -> list[str]:
    """Lines wider than 80 columns, or with a word cut short by '…' (Rich's mark for what did not fit)."""
    return [line for line in text.splitlines() if cell_len(line) > WIDTH or re.search(r"[\w-]…", line)]


def test_every_help_fits_80_columns(cli80):
    """Every --help at 80 columns: whole flag names and words, no line past the edge."""
    paths = _commands()
    assert len(paths) >= 27 and ["serve"] in paths and ["features", "train"] in paths
    for path in paths:
        r = cli80(*path, "--help")
        assert r.exit_code == 0, (path, r.stderr)
        assert cut_or_wide(r.stdout) == [] and "…" not in r.stdout, (path, cut_or_wide(r.stdout))
    flags = re.findall(r"--[a-z][a-z-]+", cli80("serve", "--help").stdout)
    assert {"--max-body", "--api-key", "--parallel"} <= set(flags)  # whole, not '--max-b…'


# What each command prints by default, on the shipped or the tiny test models. Not here: chat, which
# needs a model with a chat template; serve, pull, rm, convert, train, explore, whose output is a
# server, the store, or a file (each announced in one line on stderr); bench, whose run takes ~12 s
# (a fixed table: test_bench covers it).
DEFAULT_OUTPUTS = [
    ["generate", "ROMEO:", "-n", "5", "--seed", "1"],
    ["score", "To be, or not to be, that is the question."],
    ["score", "To be, or not to be, that is the question.", "--text"],
    ["tokenize", "To be, or not to be"],
    ["tokenize", "今天天气很好", "-m", "tang"],
    ["params"],
    ["params", "-m", "tang"],
    ["params", "--preset", "smollm2-135m"],
    ["params", "--lang", "zh"],
    ["attn", "To be, or not"],
    ["attn", "--demo"],
    ["attn", "--show-mask", "the cat sat on the mat"],
    ["attn", "--steps", "To be, or not to be, that is the question"],
    ["attn", "--steps", "今天天气很好", "-m", "tang", "--lang", "zh"],
    ["models"],
    ["show", "tang"],
    ["lens", "To be, or not to be"],
    ["embed", "neighbors", "king"],
    ["neurons", "To be, or not to be", "--block", "0"],
    ["geometry"],
    ["patch", "hello world", "hello wirld", "--answer", "d", "--wrong", "x", "-m", TINY_LLAMA],
    ["ablate", "To be, or not to be"],
    ["steer", "To be", "--toward", "love", "--away", "hate", "--block", "1", "-n", "5", "-t", "0"],
    ["heads", "To be, or not to be"],
    ["data"],
    ["data", "--lang", "zh"],
    ["tokenize", "今天天气很好", "-m", "tang", "--lang", "zh"],
    ["score", "床前明月光，疑是地上霜。", "-m", "tang", "--text", "--lang", "zh"],
]


@pytest.mark.parametrize("args", DEFAULT_OUTPUTS, ids=[" ".join(a[:2]) for a in DEFAULT_OUTPUTS])
def test_every_default_output_fits_80_columns(cli80, args):
    r = cli80(*args)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip()
    shown = r.stdout.split("\n", 1)[1] if "--text" in args else r.stdout  # the text itself keeps its own lines (soft wrap)
    assert cut_or_wide(shown) == [], cut_or_wide(shown)
    assert [line for line in r.stdout.splitlines() if line != line.rstrip()] == []


COST_ROWS = ("N: weights per token", "attention FLOPs per token", "forward FLOPs per token", "training FLOPs per token",
             *(f"weights in {d}" for d in ("fp32", "fp16", "int8", "int4")), "KV cache per token, fp32", "KV cache per token, fp16",
             "KV cache per token, q8_0", "one head's pattern", "… a block's heads, fp32", "… all blocks' heads")  # fmt: skip


@pytest.mark.parametrize("args", [["params"], ["params", "-m", "tang"], ["params", "--preset", "smollm2-135m"]])
def test_params_cost_rows_keep_their_names_whole(cli80, args):
    """Each row of 'What a token costs' names itself on one line: no name goes on under itself."""
    table = cli80(*args).stdout.split("What a token costs")[1].split("FLOPs count")[0]
    width = table.splitlines()[2].index("formula") - 1  # the name column, up to the formula's
    names = [line[:width].strip() for line in table.splitlines()[4:]]
    names = [n for n in names if n]
    assert all(n in COST_ROWS or re.fullmatch(r"… for [\d,]+ tokens", n) for n in names), names
    kv = [n for n in names if n.startswith("KV cache per token")]  # fp32, fp16, and q8_0 where Dh allows it
    assert kv[:2] == ["KV cache per token, fp32", "KV cache per token, fp16"]
    assert len(names) == len(COST_ROWS) - 3 + 2 * len(kv)  # each cache's row and its "… for T tokens"


def test_score_colour_legend_fits_80_columns(cli80, monkeypatch):
    from tfcli.cli.views import heatmap

    monkeypatch.setattr(heatmap, "uses_colour", lambda console: True)  # the colour view's layout, drawn without colour
    r = cli80("score", "To be, or not to be", "--text")
    legend = [line for line in r.stdout.splitlines() if "probability" in line]
    assert len(legend) == 1 and legend[0].endswith("dim: not scored") and cell_len(legend[0]) <= WIDTH, r.stdout
