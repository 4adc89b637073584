"""JSON schemas on real models: answers that parse and validate (jsonschema), through the server's
response_format and through `tfcli generate --json-schema`.

benchmarks/schemas.py runs all 120 cases (its 20 schemas x 3 prompts x SmolLM2 and Gemma 3 270M,
each through both paths; figures in benchmarks/README.md). These tests run six of them, one of each
kind of request, with the same code: SmolLM2 through the chat API answered whole, streamed and with
n=3 and through `generate --chat`; Gemma 3 270M (a base model: /v1/completions) whole and streamed.
Gemma through `generate` is left to the benchmark: each CLI run prepares the grammar library's view
of its 262,144-token vocabulary again (seconds), which the server does once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")


def _benchmark():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "schemas.py"
    spec = importlib.util.spec_from_file_location("schemas_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _benchmark()
BY_NAME = {name: (topic, schema) for name, topic, schema in bench.SCHEMAS}


def test_the_benchmark_holds_twenty_schemas_of_every_kind():
    """20 schemas whose constraints cover what the issue lists, each a schema jsonschema accepts."""
    import json

    import jsonschema

    assert len(BY_NAME) == 20
    text = json.dumps([s for _, s in BY_NAME.values()])
    for keyword in ('"pattern"', '"enum"', '"minItems"', '"maxItems"', '"minimum"', '"anyOf"', '"null"', '"number"'):
        assert keyword in text, keyword
    for _, schema in BY_NAME.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    optional = [n for n, (_, s) in BY_NAME.items() if set(s["required"]) < set(s["properties"])]
    assert len(optional) >= 10  # required and optional fields side by side
    nested = [n for n, (_, s) in BY_NAME.items() if any(p.get("type") == "object" for p in s["properties"].values())]
    assert len(nested) >= 2


def served(lm, name):
    from test_serve import openai_client, serving

    with serving(lm, name, max_rows=4, queue=8) as (url, _):
        yield openai_client(url).with_options(timeout=900)  # a busy 2-core machine: minutes at worst


@pytest.fixture(scope="module")
def smol(smollm2_folder):
    from tfcli.store import load

    yield from served(load(smollm2_folder), "smollm2")


@pytest.fixture(scope="module")
def gemma(gemma3_folder):
    from tfcli.store import load

    yield from served(load(gemma3_folder), "gemma3")


def check(case) -> None:
    assert case.ok, case.problems
    assert case.answers and all(finish == "stop" for _, finish in case.answers)


@pytest.mark.slow
@pytest.mark.parametrize("name, prompt", [("flight", 0), ("survey", 1), ("matrix", 2)], ids=["whole", "stream", "n3"])
def test_smollm2_answers_validate_through_the_chat_api(smol, name, prompt):
    topic, schema = BY_NAME[name]
    case = bench.server_case(smol, "smollm2", True, name, topic, schema, prompt)
    check(case)
    assert len(case.answers) == (3 if prompt == 2 else 1)


@pytest.mark.slow
def test_smollm2_answer_validates_through_generate(cli, smollm2_folder):
    def run_cli(*args):
        r = cli(*args)
        return r.exit_code, r.stdout, r.stderr

    topic, schema = BY_NAME["sensor"]
    check(bench.generate_case(run_cli, str(smollm2_folder), "smollm2", True, "sensor", topic, schema, 0))


@pytest.mark.slow
@pytest.mark.parametrize("name, prompt", [("weather", 0), ("shape", 1)], ids=["whole", "stream"])
def test_gemma3_answers_validate_through_completions(gemma, name, prompt):
    topic, schema = BY_NAME[name]
    check(bench.server_case(gemma, "gemma3", False, name, topic, schema, prompt))


def test_a_number_ends_after_ten_digits_past_the_point():
    """A schema's number may not run on (7.3333... until max_tokens): 10 digits after the point at
    most, then the grammar wants what follows; the bound is the grammar's, the schema is unchanged."""
    import json

    from conftest import TINY_LLAMA

    from tfcli.engine.grammar import compile_grammar
    from tfcli.store import load

    lm = load(TINY_LLAMA)
    schema = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": ["number", "null"]}},
              "required": ["x", "y"]}  # fmt: skip
    grammar = compile_grammar("json_schema", json.dumps(schema), lm.tokenizer, lm.config.vocab_size, (0,))
    assert "multipleOf" not in grammar.text

    def allowed_after(text: str):
        c = grammar.start()
        for t in lm.tokenizer.encode(text):
            assert c.allowed()[t], text
            c.advance(t)
        return c.allowed()

    three = lm.tokenizer.encode("3")
    assert len(three) == 1 and allowed_after('{"x": 7.' + "3" * 9)[three[0]]
    assert not allowed_after('{"x": 7.' + "3" * 10)[three[0]]
    assert not allowed_after('{"x": 1, "y": 0.' + "5" * 10)[lm.tokenizer.encode("5")[0]]
    assert allowed_after('{"x": 1, "y": ')[lm.tokenizer.encode("n")[0]]  # null still allowed
