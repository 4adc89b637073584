"""tfcli lens over long texts (issue 34): its memory checked before the pass, its time estimated
and its progress shown on stderr when it is long, and --positions to ask for less."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import one_line_error

SHAKESPEARE = Path(__file__).parent.parent / "weights" / "shakespeare"
TEXT = "ROMEO: But soft, what light through yonder window breaks? " * 4  # 232 characters: 232 tokens


def test_a_long_lens_says_its_estimate_and_shows_progress(cli, monkeypatch):
    from tfcli.analysis import lens as analysis
    from tfcli.cli import lens

    monkeypatch.setattr(lens, "LONG_SECONDS", 0)  # every lens counts as long here
    monkeypatch.setattr(analysis, "CHUNK_ROWS", 64)
    r = cli("lens", "-m", SHAKESPEARE, TEXT, "--json")
    assert r.exit_code == 0, r.stderr
    assert "the lens reads" in r.stderr and "positions" in r.stderr and "about" in r.stderr and "--positions" in r.stderr
    assert len(json.loads(r.stdout)["layers"][0]["positions"]) == len(TEXT)


def test_positions_asks_for_less(cli):
    r = cli("lens", "-m", SHAKESPEARE, TEXT, "--json", "--positions", "-5:")
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)["layers"][-1]["positions"]
    assert [p["position"] for p in got] == list(range(len(TEXT) - 5, len(TEXT)))
    assert "the lens reads" not in r.stderr  # a short lens says nothing
    one_line_error(cli("lens", "-m", SHAKESPEARE, TEXT, "--positions", "x"), 2, "--positions 'x' is not START:END")
    one_line_error(cli("lens", "-m", SHAKESPEARE, "abc", "--positions", "5:9"), 2, "holds none of the text's 3 positions")
    one_line_error(cli("lens", "-m", SHAKESPEARE, "abc", "--positions", "0:2", "--position", "1"), 2, "--positions")


def test_a_lens_the_memory_cannot_hold_is_refused_before_the_pass(cli, monkeypatch):
    from tfcli.engine import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 20)
    monkeypatch.setattr(memory, "limits", lambda: [(1 << 20, "")])
    one_line_error(cli("lens", "-m", SHAKESPEARE, TEXT, "--json"), 1, "the lens of 5 residual indices x 232 positions would need", "--positions")
