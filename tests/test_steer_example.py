"""steer --help's first example follows the README's advice (--toward and --away texts of several
tokens, not single words) and, run as written on the shipped model, gives a readable steered text:
words, not a run of one character or symbols (issue 49 item 4)."""

from __future__ import annotations

import json
import re
import shlex


def first_example(help_text: str) -> list[str]:
    """The first `tfcli steer ...` line under Examples:, its arguments as a shell splits them."""
    examples = help_text.split("Examples:", 1)[1]
    line = next(line.strip() for line in examples.splitlines() if line.strip().startswith("tfcli steer "))
    return shlex.split(line)[1:]


def readable(text: str) -> bool:
    """Mostly letters and spaces, with several distinct words of three letters or more."""
    words = re.findall(r"[A-Za-z]{3,}", text)
    letters = sum(ch.isalpha() or ch.isspace() for ch in text)
    return letters >= 0.85 * len(text) and len(set(words)) >= 3


def test_the_first_example_runs_as_written_and_reads(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the example on one line, as written
    args = first_example(cli("steer", "--help").stdout)
    assert args[0] == "steer" and "-m" not in args  # the shipped default model, nothing to pull
    for flag in ("--toward", "--away"):
        text = args[args.index(flag) + 1]
        assert len(text.split()) >= 3, (flag, text)  # a text of several tokens, as the README advises
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(cli(*args, "--json").stdout)
    steered, plain = doc["steered"]["text"], doc["plain"]["text"]
    assert readable(steered) and readable(plain), (plain, steered)
    assert steered != plain  # the push changes the text
