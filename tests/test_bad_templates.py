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


# --- ordinary Jinja that real templates use is never refused ---------------------------------------------

_MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


@pytest.mark.parametrize(
    "source, expected",
    [
        ("{{ range(3) | length }}", "3"),
        ("{{ (range(5) | random) in range(5) }}", "True"),
        ("{{ range(3)[1] }}", "1"),
        ("{{ range(10)[2:5] | list }}", "[2, 3, 4]"),
        ("{% set r = range(3) %}{% for i in r %}{{ i }}{% endfor %}{% for i in r %}{{ i }}{% endfor %}", "012012"),
        ("{{ range(3) | first }}{{ range(3) | last }}{{ range(3) | reverse | join }}", "02210"),
        ("{% for i in range(3) %}{{ loop.index }}/{{ loop.length }}{{ loop.revindex }}{% endfor %}", "1/332/323/31"),
        ("{% for m in messages %}{% for i in range(2) %}{% if m.role in ['user'] and i == 1 %}U{% elif m.role == 'assistant' %}A{% endif %}{% endfor %}{% endfor %}", "UAA"),
        ("{% for i in range(3) %}{% for j in range(i) %}{% if j in range(i) and j == i - 1 %}{{ i }}{{ j }}{% endif %}{% endfor %}{% endfor %}", "1021"),
        ("{% for m in messages[::-1] %}{{ loop.revindex0 }}{{ m.role[0] }}{% if not loop.last %},{% endif %}{% endfor %}", "2a,1u,0s"),
        ("{{ range(3) == range(3) }} {{ range(10, 0, -3) | list }} {{ range(4) | sum }}", "True [10, 7, 4, 1] 6"),
        ("{% set ns = namespace(n=0) %}{% for m in messages if m.role != 'system' %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", "2"),
    ],
    ids=["length", "random", "index", "slice", "iterated-twice", "first-last-reverse", "loop-length", "nested-in-eq", "nested-ranges", "reversed-messages", "eq-step-sum", "namespace"],
)  # fmt: skip
def test_ordinary_jinja_renders(source, expected):
    from tfcli.engine.chat import ChatTemplate

    assert ChatTemplate(source).render(_MESSAGES) == expected


@pytest.mark.parametrize("source", ["{{ range(10**6) | length }}", "{{ range(100000) | length * 'x' * 1000 }}"])
def test_a_range_past_the_limit_is_one_line_naming_it(source):
    from tfcli.engine.chat import ChatTemplate, TemplateBoundError

    with pytest.raises(TemplateBoundError) as e:
        ChatTemplate(source).render(_MESSAGES)
    assert "Traceback" not in str(e.value) and "Error:" not in str(e.value)


def test_silent_nested_ranges_stop_in_time_off_the_main_thread():
    """No timer can interrupt a thread: the range's own iteration checks the deadline."""
    import threading

    from tfcli.engine.chat import ChatTemplate, TemplateBoundError

    caught = []

    def render():
        try:
            ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").render(_MESSAGES)
        except TemplateBoundError as e:
            caught.append(str(e))

    start = time.monotonic()
    t = threading.Thread(target=render, daemon=True)
    t.start()
    t.join(30)
    assert caught and "ran for more than 2 s" in caught[0] and time.monotonic() - start < 10


def test_an_ordinary_template_with_ranges_runs_through_the_cli(cli, tmp_path, monkeypatch):
    source = "{% for m in messages %}{% for i in range(messages|length) %}{% if i == loop.length - 1 and m.role in ['user', 'assistant'] %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}{% endfor %}<assistant>"
    m = _with_template(Env(tmp_path, monkeypatch), source)
    r = cli(*gen(m, "--chat", "-n", "3", "-t", "0"))
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize(
    "source",
    ["{% for i in range(100000) %}{% for j in range(100000) %}{% if j in [1, 2, 3] and i == j %}{% endif %}{% endfor %}{% endfor %}",
     "{% set xs = 'abcdefghij' * 9999 %}{% for a in xs %}{% for b in xs %}{% if a == b and b in 'xyz' %}{% endif %}{% endfor %}{% endfor %}",
     "{% for m in messages * 50000 %}{% for n in messages * 50000 %}{% if m.role == n.role and 'u' in m.role %}{% endif %}{% endfor %}{% endfor %}"],
    ids=["ranges-in-eq", "string-eq-in", "messages-eq-in"],
)  # fmt: skip
def test_the_time_bound_is_the_message_wherever_the_timer_strikes(source):
    """The timer can strike at an instruction without a line number, where Jinja's rewriting of the
    traceback failed with "'<=' not supported between 'int' and 'NoneType'": the bound is said, twice over."""
    from tfcli.engine.chat import ChatTemplate, TemplateBoundError

    for _ in range(2):
        with pytest.raises(TemplateBoundError, match="ran for more than 2 s"):
            ChatTemplate(source).render(_MESSAGES)


def test_a_template_s_own_error_is_its_message():
    from tfcli.engine.chat import ChatTemplate
    from tfcli.engine.errors import TfcliError

    with pytest.raises(TfcliError, match="unsupported operand") as e:
        ChatTemplate("{% for m in messages %}{{ loop.index + none }}{% endfor %}").render(_MESSAGES)
    assert "'<='" not in str(e.value)
