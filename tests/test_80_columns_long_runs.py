"""The commands tests/test_80_columns.py leaves out of its default outputs (their runs are longer or
need a file first): bench, the four features commands, data pull and path, at 80 columns, piped,
in English and in Chinese: no line of stdout or stderr wider than 80, no word cut short by '…'.
bench's note on busy cores is wrapped to the width (issue 49 items 3 and 5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.cells import cell_len

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
WIDTH = 80


@pytest.fixture
def cli80(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    return cli


def too_wide_or_cut(*texts: str) -> list[str]:
    return [line for t in texts for line in t.splitlines() if cell_len(line) > WIDTH or re.search(r"[\w-]…", line)]


def fits(r) -> None:
    assert r.exit_code == 0, r.stderr
    assert too_wide_or_cut(r.stdout, r.stderr) == [], too_wide_or_cut(r.stdout, r.stderr)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bench_and_its_busy_cores_note(cli80, monkeypatch, lang):
    from tfcli.engine import threads

    monkeypatch.setattr(threads, "busy_cpus", lambda: 1)  # the note on cores other processes held
    r = cli80("bench", "--prompts", "8", "-n", "4", "--runs", "1", "--lang", lang)
    fits(r)
    said = "".join(r.stderr.split())
    assert ("otherprocessesheld1" in said) if lang == "en" else ("其他进程" in said), r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) >= 2  # wrapped, not one long line


@pytest.fixture
def sae(cli80, tmp_path, monkeypatch):
    """(text file, SAE folder, the train run): a tiny SAE on the shipped Shakespeare model. Files are
    named from the test's folder, as a user names them: the lines tested are the command's, not a
    temporary folder's path (a path is never broken, and a long one makes its line long)."""
    monkeypatch.chdir(tmp_path)
    text = Path("text.txt")
    text.write_text("ROMEO: But soft, what light through yonder window breaks? It is the east. " * 30, encoding="utf-8")
    folder = Path("sae")
    r = cli80("features", "train", text, "-o", folder, "--steps", "4", "--batch-size", "64", "--buffer", "512",
              "--features", "32")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    return text, folder, r


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(
    "command",
    [
        "train",
        "top",
        "show",
        "quality",
    ],
)
def test_features(cli80, sae, command, lang):
    text, folder, _ = sae
    if command == "train":
        r = cli80("features", "train", text, "-o", "again", "--steps", "4", "--batch-size", "64",
                  "--buffer", "512", "--features", "32", "--lang", lang)  # fmt: skip
    elif command == "top":
        r = cli80("features", "top", folder, text, "-n", "2", "--contexts", "2", "--html", "c.html",
                  "--lang", lang)  # fmt: skip
    elif command == "show":
        r = cli80("features", "show", folder, "ROMEO: But soft", "--top", "3", "--lang", lang)
    else:
        r = cli80("features", "quality", folder, text, "--tokens", "200", "--lang", lang)
    fits(r)


def test_data_path_and_pull_notes(cli80, monkeypatch, tmp_path):
    if not (SHARED / "tinyshakespeare.txt").is_file():
        pytest.skip("../shared/data is not here")
    deep = tmp_path / ("a-folder-with-a-long-name-" * 2) / "tfcli-home"  # a path longer than a line stays whole
    monkeypatch.setenv("TFCLI_HOME", str(deep))
    r = cli80("data", "pull", "shakespeare", "--from", SHARED / "tinyshakespeare.txt")
    assert r.exit_code == 0, r.stderr
    assert str(deep / "data" / "tinyshakespeare.txt") in r.stderr.replace("\n", "")
    assert not [line for line in r.stderr.splitlines() if cell_len(line) > WIDTH and " " in line.strip()], r.stderr
    r = cli80("data", "path", "shakespeare")
    assert r.stdout == f"{deep / 'data' / 'tinyshakespeare.txt'}\n"  # the path on one line, whatever the width
