"""A chat template runs under one budget (RENDER_SECONDS, OUTPUT_CHARS) on every thread: its loops,
filters, calls and printed values are checked inside the compiled template, so the server's worker
thread (where no timer can interrupt anything) stops a hostile template as the main thread does.
Each case here is rendered on a worker thread and joined with a timeout: a hang fails the test.
The server answers such a request with a 400 naming the chat template, and keeps serving."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from badinput import Env, assert_one_line, gen, run_tfcli
from conftest import TINY_LLAMA, serve_process

MESSAGES = [{"role": "user", "content": "hi"}]
BIG = "{% set s = 'x' * 3000000 %}"  # a string the output bound allows, long enough to loop on for ever

# Constructs that loop (or write) without calling anything range() or the sandbox would see.
ENDLESS = {
    "loops-over-a-string": BIG + "{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "loops-over-a-list": BIG + "{% set xs = s|list %}{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}",
    "loops-with-a-test": BIG + "{% for a in s if a %}{% for b in s if b %}{% endfor %}{% endfor %}",
    "loops-over-dict-items": BIG + "{% set d = dict.fromkeys(s|list, 1) %}{% for a in s %}{% for k, v in d.items() %}{% endfor %}{% endfor %}",
    "loop-length-and-else": BIG + "{% for a in s %}{% for b in s %}{{ '' if loop.last }}{% else %}{% endfor %}{% endfor %}",
    "recursive-loop": BIG + "{% for a in s recursive %}{{ loop(s) if false }}{% for b in s %}{% endfor %}{% endfor %}",
    "huge-range": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "macro-fan-out": "{% macro f(n) %}{% for i in 'ab' %}{% if n < 40 %}{{ f(n + 1) }}{% endif %}{% endfor %}{% endmacro %}{{ f(0) }}",
    "macro-recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "map-filter-chain": BIG + "{% for a in s %}{{ s|map('upper')|list|length }}{% endfor %}",
    "select-test-chain": BIG + "{% for a in s %}{{ s|select('string')|list|length }}{% endfor %}",
    "sum-of-lists": BIG + "{{ s|list|batch(1)|sum(start=[])|length }}",
    "wordwrap-in-a-library": "{% set s = 'x ' * 120000 %}{% for i in range(1000) %}{{ s|wordwrap(1)|length }}{% endfor %}",
    "urlize-in-a-library": "{% set s = 'x ' * 1900000 %}{{ s|urlize|length }}",
    "unique-in-a-library": "{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{{ s|list|unique|list|length }}{% endfor %}",
    "batch-generator": "{% set s = 'x ' * 200000 %}{% for i in range(1000) %}{{ s|list|batch(1)|list|length }}{% endfor %}",
    "call-block": BIG + "{% macro m() %}{% for a in s %}{{ caller() }}{% endfor %}{% endmacro %}{% call m() %}{% for b in s %}{% endfor %}{% endcall %}",
}

# Filters and methods that would write far more than the output bound in one step.
HUGE = {
    "print-list-of-references": BIG + "{{ [s] * 1000 }}",
    "join-list-of-references": BIG + "{{ ([s] * 1000)|join }}",
    "join-method": BIG + "{{ ''.join([s] * 1000) }}",
    "tojson-of-references": BIG + "{{ ([s] * 1000)|tojson }}",
    "string-filter": BIG + "{{ ([s] * 1000)|string|length }}",
    "concat-tilde": BIG + "{{ ([s] * 1000) ~ '' }}",
    "replace-empty": "{% set s = 'x' * 30000 %}{{ s.replace('', s) }}",
    "replace-filter": "{% set s = 'x' * 30000 %}{{ s|replace('x', s) }}",
    "indent-wide": "{% set s = 'x\\n' * 1000000 %}{{ s|indent(1000)|length }}",
    "wordwrap-long-wrapstring": "{% set s = 'x ' * 1000000 %}{{ s|wordwrap(1, true, s)|length }}",
    "format-method-references": BIG + "{{ '{}'.format([s] * 1000)|length }}",
    "lipsum": "{{ lipsum(1000, false, 1000, 100000)|length }}",
    "wordwrap-of-a-long-text": "{% set s = 'x ' * 1900000 %}{{ s|wordwrap(1)|length }}",
    "doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
}


def _render_on_a_worker(source: str, timeout: float = 30) -> tuple[BaseException | str | None, float]:
    from tfcli.engine.chat import ChatTemplate

    out: list = []

    def run():
        try:
            out.append(ChatTemplate(source).render(MESSAGES))
        except BaseException as e:  # noqa: BLE001 - what the render ended with is the result
            out.append(e)

    start = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the template still runs: no budget on this thread"
    return out[0], time.monotonic() - start


# The render bound while the endless templates run here (2 s in use, as test_bad_templates.py and the
# server's test below hold it): what stops them is the same watchdog and alarm, at any bound; 18
# templates at 2 s each were most of this file's time.
RENDER_SECONDS = 0.3


@pytest.mark.parametrize("source", list(ENDLESS.values()), ids=list(ENDLESS))
def test_an_endless_template_stops_on_a_worker_thread(source, monkeypatch):
    from tfcli.engine import chat
    from tfcli.engine.errors import TfcliError

    monkeypatch.setattr(chat, "RENDER_SECONDS", RENDER_SECONDS)
    result, took = _render_on_a_worker(source)
    assert isinstance(result, TfcliError), result
    assert "chat template" in str(result) and "Traceback" not in str(result)
    assert took < 10, took  # one step in C may run past the bound, and a loaded machine slows all


@pytest.mark.parametrize("source", list(HUGE.values()), ids=list(HUGE))
def test_a_template_that_would_write_gigabytes_is_refused_before_it_does(source):
    from tfcli.engine.chat import TemplateBoundError

    result, took = _render_on_a_worker(source)
    assert isinstance(result, TemplateBoundError), result
    assert took < 10, took


def test_a_template_of_millions_of_tokens_stops_while_it_is_parsed(monkeypatch):
    from tfcli.engine import chat
    from tfcli.engine.chat import TemplateBoundError

    monkeypatch.setattr(chat, "RENDER_SECONDS", RENDER_SECONDS)
    result, took = _render_on_a_worker("{{ x }}" * 3_000_000, timeout=30)
    assert isinstance(result, TemplateBoundError) and "ran for more than" in str(result), result
    assert took < 10, took


@pytest.mark.parametrize(
    "source, expected",
    [("{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ m.role }}{% if loop.last %}.{% endif %}{% endfor %}", "1/1user."),
     ("{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% else %}none{% endfor %}", "a=1"),
     ("{% for x in [] %}{{ x }}{% else %}none{% endfor %}", "none"),
     ("{% for x in [[1, [2]], 3] recursive %}{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %}{% endfor %}", "123"),
     ("{{ [1, 2]|sum }}|{{ [[1], [2]]|sum(start=[]) }}|{{ [{'n': 2}, {'n': 3}]|sum(attribute='n') }}", "3|[1, 2]|5"),
     ("{{ ['a', 'b']|join(', ') }} {{ 'a\\nb'|indent(2) }} {{ 'xy'|replace('x', 'z') }} {{ ', '.join(['c', 'd']) }}", "a, b a\n  b zy c, d"),
     ("{{ {'a': [1, 'b']}|tojson }} {{ 'a' ~ 1 ~ [2] }}", '{"a": [1, "b"]} a1[2]'),
     ("{% for x in undefined_name %}{{ x }}{% endfor %}ok", "ok")],
    ids=["loop-variables", "dict-items-else", "empty-else", "recursive", "sum", "string-filters", "tojson-and-tilde", "undefined"],
)  # fmt: skip
def test_ordinary_templates_render_as_before(source, expected):
    from tfcli.engine.chat import ChatTemplate

    assert ChatTemplate(source).render(MESSAGES) == expected


def test_generate_chat_on_a_gguf_whose_template_loops_over_a_long_string(tmp_path, monkeypatch):
    """The report's case: a GGUF whose template nests two loops over a 3,000,000-character string."""
    import test_gguf

    monkeypatch.setattr(test_gguf, "CHATML", ENDLESS["loops-over-a-string"])
    path = Env(tmp_path, monkeypatch).gguf()
    r = run_tfcli(tmp_path, *gen(path, "--chat", "-n", "2"), timeout=400)  # the first run may compile the kernels
    lines = r.stderr.decode().strip().splitlines()  # the first run says where the file's index is kept
    assert r.returncode == 1 and lines[-1].startswith("error: the model's chat template ran for more than 2 s"), r.stderr
    assert b"Traceback" not in r.stderr and r.stdout == b""
    start = time.monotonic()
    r = run_tfcli(tmp_path, "chat", "-m", path, "-n", "2", input=b"Hello\n", timeout=90)
    assert_one_line(r.stderr, r.returncode, 1, b"the model's chat template ran for more than 2 s")
    assert time.monotonic() - start < 60


# --- the server ------------------------------------------------------------------------------------


def _post(url: str, doc: dict, timeout: float) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory):
    """`tfcli serve` on the tiny Llama whose chat template loops for ever over a long string."""
    import shutil

    home = tmp_path_factory.mktemp("home")
    model = home / "hostile"
    shutil.copytree(TINY_LLAMA, model)
    (model / "chat_template.jinja").write_text(ENDLESS["loops-over-a-string"])
    yield from serve_process(model, home)


def test_the_server_answers_400_in_seconds_frees_the_worker_and_keeps_serving(hostile_server):
    url, proc, log = hostile_server
    for _ in range(2):  # the worker is free again: the second request is answered as fast
        start = time.monotonic()
        status, doc = _post(f"{url}/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=20)
        took = time.monotonic() - start
        assert status == 400, doc
        assert "chat template" in doc["error"]["message"] and "ran for more than 2 s" in doc["error"]["message"], doc
        assert took < 6, took  # "about 2 s", on a machine other jobs load too
    status, doc = _post(f"{url}/v1/completions", {"prompt": "Hi", "max_tokens": 2}, timeout=20)
    assert status == 200 and doc["choices"][0]["text"] is not None, doc
    with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
        assert r.status == 200
    before = _cpu_seconds(proc.pid)
    time.sleep(1.0)
    assert _cpu_seconds(proc.pid) - before < 0.3  # idle: no template left running on a core
    assert proc.poll() is None and "Traceback" not in log.read_text()
