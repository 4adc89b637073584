"""Chat templates are programs from the model folder (or a converted GGUF): rendering one is bounded
in time and in the size of what it builds. A template that loops for ever, or builds gigabytes in
one step, ends in one error line (exit 1) within seconds, whichever way it reached the folder."""

from __future__ import annotations

import json
import time

import pytest

from badinput import Cases, Env, assert_one_line, gen, run_case, run_tfcli
from conftest import TINY_LLAMA

CASES = Cases()

NESTED_LOOPS = "{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}"
SILENT_LOOPS = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
DOUBLING = "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"


def _with_template(env: Env, source: str, where: str = "jinja") -> object:
    m = env.model(TINY_LLAMA)
    if where == "jinja":
        (m / "chat_template.jinja").write_text(source)
    else:  # where a converted GGUF (and many Hugging Face folders) keep it
        (m / "tokenizer_config.json").write_text(json.dumps({"chat_template": source, "eos_token": "</s>"}))
    return m


@CASES.case(1, "the model's chat template repeats a value 1,000,000,000 times", "check chat_template")
def template_string_times_a_billion(env):
    return gen(_with_template(env, "{{ 'x' * 10**9 }}"), "--chat")


@CASES.case(1, "the model's chat template repeats a value 1,000,000,000 times", "check chat_template")
def template_list_times_a_billion_in_tokenizer_config(env):
    return gen(_with_template(env, "{{ [0] * 10**9 }}", "config"), "--chat")


@CASES.case(1, "the model's chat template built a value of more than", "it does not stop")
def template_doubling_a_string(env):
    return gen(_with_template(env, DOUBLING, "config"), "--chat")


@CASES.case(1, "the model's chat template asks for a size of 1,000,000,000", "check chat_template")
def template_center_filter_a_billion_wide(env):
    return gen(_with_template(env, "{{ messages[0].content|center(10**9) }}"), "--chat")


@CASES.case(1, "the model's chat template asks for a size of 1,000,000,000", "check chat_template")
def template_ljust_method_a_billion_wide(env):
    return gen(_with_template(env, "{{ 'x'.ljust(10**9) }}"), "--chat")


@CASES.case(1, "formats a field of ten million characters or more", "check chat_template")
def template_percent_format_of_a_huge_width(env):
    return gen(_with_template(env, "{{ '%999999999d' % 1 }}"), "--chat")


@CASES.case(1, "formats a field of ten million characters or more", "check chat_template")
def template_str_format_of_a_huge_width(env):
    return gen(_with_template(env, "{{ '{:>999999999}'.format(1) }}", "config"), "--chat")


@CASES.case(1, "raises a number to the power", "check chat_template")
def template_power_of_a_huge_exponent(env):
    return gen(_with_template(env, "{{ 7 ** 99999999 }}"), "--chat")


@CASES.case(1, "the model's chat template failed: RecursionError", "check chat_template")
def template_recursing_for_ever(env):
    return gen(_with_template(env, "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "--chat")


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


@pytest.mark.parametrize(
    "source, where",
    [(NESTED_LOOPS, "jinja"), (SILENT_LOOPS, "jinja"), (NESTED_LOOPS, "config"),
     ("{% set s = 'x' * 99999 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}", "config")],
    ids=["nested-loops", "loops-that-write-nothing", "nested-loops-in-tokenizer-config", "loops-over-a-string"],
)  # fmt: skip
def test_a_template_that_never_ends_is_stopped_in_time(tmp_path, monkeypatch, source, where):
    """The example of the report (10^10 iterations), and a loop that calls and writes nothing, which
    only the timer can stop: one line within seconds, not a hang (the timeout fails the test)."""
    m = _with_template(Env(tmp_path, monkeypatch), source, where)
    start = time.monotonic()
    r = run_tfcli(tmp_path, *gen(m, "--chat", "-n", "2"), timeout=60)
    _assert_stopped(r, writes="x{%" in source)
    assert r.stdout == b"" and time.monotonic() - start < 30


def _assert_stopped(r, writes: bool) -> None:
    """Stopped by the time bound, or (for a loop that writes, on a fast machine) first by the output bound."""
    assert_one_line(r.stderr, r.returncode, 1, b"the model's chat template")
    stopped = [b"ran for more than 2 s (it does not end in time", b"wrote more than"] if writes else [b"ran for more than 2 s (it does not end in time"]
    assert any(s in r.stderr for s in stopped), r.stderr


def test_the_chat_command_is_bounded_the_same_way(tmp_path, monkeypatch):
    m = _with_template(Env(tmp_path, monkeypatch), NESTED_LOOPS)
    r = run_tfcli(tmp_path, "chat", "-m", m, "-n", "2", input=b"Hello\n", timeout=60)
    _assert_stopped(r, writes=True)


@pytest.mark.parametrize("source, needle", [(SILENT_LOOPS, b"ran for more than 2 s"), ("{{ 'x' * 10**9 }}", b"repeats a value")], ids=["loops", "huge-string"])
def test_a_converted_gguf_carries_a_bounded_template(tmp_path, monkeypatch, source, needle):
    """The template of a GGUF (tokenizer.chat_template) is written into the converted folder and
    rendered by the same bounded engine path."""
    import test_gguf

    monkeypatch.setattr(test_gguf, "CHATML", source)
    path = Env(tmp_path, monkeypatch).gguf()
    out = tmp_path / "converted"
    r = run_tfcli(tmp_path, "convert", path, out, timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_tfcli(tmp_path, *gen(out, "--chat", "-n", "2"), timeout=60)
    assert_one_line(r.stderr, r.returncode, 1, needle)


def test_a_real_template_still_renders(cli, tmp_path, monkeypatch):
    """The bounds leave an ordinary template alone (loops over messages, filters, string methods)."""
    source = "{% for m in messages %}{{ '<|' ~ m.role|upper ~ '|>' }}{{ m.content.strip() }}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}<|ASSISTANT|>{% endif %}"
    m = _with_template(Env(tmp_path, monkeypatch), source)
    r = cli(*gen(m, "--chat", "-n", "3", "-t", "0"))
    assert r.exit_code == 0, r.stderr
