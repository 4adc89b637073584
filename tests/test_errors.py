"""The engine names the settings it validates by their fields; each front end names them its own way."""

from __future__ import annotations

import pytest

from conftest import TINY_LLAMA, one_line_error
from tfcli.engine.errors import UsageError
from tfcli.engine.generate import check_max_new_tokens
from tfcli.engine.sampling import SamplingParams


def test_the_engine_names_fields_not_flags():
    with pytest.raises(UsageError) as e:
        SamplingParams(temperature=-1.0).validate()
    assert str(e.value).startswith("temperature must be 0 or more") and "--" not in str(e.value)
    with pytest.raises(UsageError) as e:
        check_max_new_tokens(0)
    assert str(e.value) == "max_new_tokens must be at least 1, not 0"
    assert e.value.render({"max_new_tokens": "--max-tokens"}) == "--max-tokens must be at least 1, not 0"


def test_only_known_fields_are_renamed():
    e = UsageError("the folder {temperature} and {not_a_field} of {{x}}", "{seed} again")
    assert e.render({"temperature": "--temperature", "seed": "--seed"}) == "the folder --temperature and {not_a_field} of {{x}} (--seed again)"


def test_the_command_line_shows_flags(cli):
    one_line_error(cli("generate", "-m", TINY_LLAMA, "Hi", "-t", "-1"), 2, "--temperature must be 0 or more")
    one_line_error(cli("generate", "-m", TINY_LLAMA, "Hi", "-n", "0"), 2, "--max-tokens must be at least 1")
    one_line_error(cli("score", "-m", TINY_LLAMA, "Hello there", "--window", "0"), 2, "--window must be between 1")
