"""generate --file FILE: the prompt read from a UTF-8 file, as lens, tokenize, neurons, heads and score
read theirs (tests/test_text_files.py): the same continuation as the text on the command line; a
PROMPT and --file together one line of error; a file that is not a text refused in one line."""

from __future__ import annotations

import json

from conftest import TINY_GPT2, one_line_error

TEXT = "To be, or not to be, that is the question"
GENERATE = ["generate", "-m", TINY_GPT2, "-t", "0", "-n", "6", "--json"]


def test_file_gives_what_the_prompt_gives(cli, tmp_path):
    (tmp_path / "prompt.txt").write_text(TEXT, encoding="utf-8")
    given = cli(*GENERATE, TEXT)
    read = cli(*GENERATE, "--file", tmp_path / "prompt.txt")
    assert given.exit_code == read.exit_code == 0, (given.stderr, read.stderr)
    a, b = json.loads(given.stdout), json.loads(read.stdout)
    assert a["prompt"] == b["prompt"] == TEXT and a["tokens"] == b["tokens"] and a["text"] == b["text"]


def test_prompt_and_file_together_is_one_line(cli, tmp_path):
    (tmp_path / "prompt.txt").write_text(TEXT, encoding="utf-8")
    one_line_error(cli(*GENERATE, TEXT, "--file", tmp_path / "prompt.txt"), 2, "--file")


def test_a_file_that_is_not_text_is_one_line(cli, tmp_path):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00abc")
    one_line_error(cli(*GENERATE, "--file", tmp_path / "bin"), 2, "not valid UTF-8")
    one_line_error(cli(*GENERATE, "--file", tmp_path / "missing.txt"), 1, "does not exist")
