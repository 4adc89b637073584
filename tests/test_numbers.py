"""Numbers written one way: floats in every --json by one policy, sizes in one unit style."""

from __future__ import annotations

import json
import re

import pytest

from conftest import TINY_GPT2, TINY_LLAMA


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
