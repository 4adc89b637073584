"""--file wherever a command takes a text (lens, tokenize, neurons, heads, score): the file's text
gives what the same text on the command line gives; TEXT and --file together, or neither, are one
line of error; a file that is not a text is refused in one line."""

from __future__ import annotations

import json

import pytest

from conftest import TINY_GPT2, one_line_error

TEXT = "To be, or not to be, that is the question"
COMMANDS = [
    ["tokenize", "-m", TINY_GPT2, "--json"],
    ["lens", "-m", TINY_GPT2, "--json"],
    ["neurons", "-m", TINY_GPT2, "--block", "0", "--json"],
    ["heads", "-m", TINY_GPT2, "--repeat", "4", "--json"],
    ["score", "-m", TINY_GPT2, "--json"],
]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.mark.parametrize("args", COMMANDS, ids=[a[0] for a in COMMANDS])
def test_file_gives_what_the_text_gives(cli, args, text_file):
    given = cli(*args, TEXT)
    read = cli(*args, "--file", text_file)
    assert given.exit_code == read.exit_code == 0, (given.stderr, read.stderr)
    assert json.loads(read.stdout) == json.loads(given.stdout)


@pytest.mark.parametrize("args", COMMANDS, ids=[a[0] for a in COMMANDS])
def test_text_and_file_or_neither_is_one_line(cli, args, text_file):
    one_line_error(cli(*args, TEXT, "--file", text_file), 2, "TEXT or --file")
    one_line_error(cli(*args), 2, "TEXT or --file")


@pytest.mark.parametrize("command", ["tokenize", "lens", "heads"])
def test_a_file_that_is_not_text_is_one_line(cli, command, tmp_path):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00abc")
    one_line_error(cli(command, "-m", TINY_GPT2, "--file", tmp_path / "bin"), 2, "not valid UTF-8")  # a bad text, as on stdin
    one_line_error(cli(command, "-m", TINY_GPT2, "--file", tmp_path / "missing.txt"), 1, "does not exist")
    one_line_error(cli(command, "-m", TINY_GPT2, "--file", tmp_path), 1, "not a text file")


def test_a_file_holding_a_dash_is_that_text_not_stdin(cli, tmp_path):
    (tmp_path / "dash.txt").write_text("-", encoding="utf-8")
    r = cli("lens", "-m", TINY_GPT2, "--file", tmp_path / "dash.txt", "--json", input="not this")
    assert r.exit_code == 0, r.stderr
    assert "".join(t["text"] for t in json.loads(r.stdout)["tokens"]) == "-"


def test_lens_compare_takes_no_file(cli, text_file):
    one_line_error(cli("lens", "-m", TINY_GPT2, "--compare", "a b", "c d", "--file", text_file), 2, "--compare", "--file")
