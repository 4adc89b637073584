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
