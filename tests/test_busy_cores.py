"""--threads N on cores other processes are using: one warning that says what it costs; nothing
when the cores asked for are idle or when no --threads is given (the idle cores are then used).
And TFCLI_LANG=zh makes Chinese the default as a zh_CN locale does."""

from __future__ import annotations

import pytest

from tfcli.engine import threads

from conftest import TINY_GPT2


@pytest.fixture
def two_cores_one_busy(monkeypatch):
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(threads, "busy_cpus", lambda: 1)


def test_threads_on_busy_cores_warn_once(cli, two_cores_one_busy):
    r = cli("score", "To be, or not to be", "-m", TINY_GPT2, "--threads", "2")
    assert r.exit_code == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert said.count("warning:") == 1
    assert "--threads 2 asks for more threads than the 1 idle core (1 of 2 busy with other processes)" in said
    assert "many times slower" in said and "omit --threads" in said


@pytest.mark.parametrize("args", [["--threads", "1"], []])
def test_no_warning_when_the_threads_fit_the_idle_cores(cli, two_cores_one_busy, args):
    r = cli("score", "To be, or not to be", "-m", TINY_GPT2, *args)
    assert r.exit_code == 0 and "warning" not in r.stderr, r.stderr


def test_tfcli_lang_zh_is_the_default_language(cli, monkeypatch):
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    english = cli("attn", "--demo").stdout
    monkeypatch.setenv("TFCLI_LANG", "zh")
    chinese = cli("attn", "--demo").stdout
    assert "Attention, worked by hand" in english and "手算注意力" in chinese and "worked by hand" not in chinese
    assert "手算注意力" not in cli("attn", "--demo", "--lang", "en").stdout  # the flag still wins
