"""Constrained decoding: a grammar's mask on every path (one sequence, samples, the server's
batch), every answer valid under its schema or grammar, bad grammars refused at once.

The fast tests run tiny random models, whose answers follow the grammar only because the mask
makes them (the schemas bound every string, number and array, so that an answer ends); the slow
ones ask SmolLM2 through the openai client.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA, one_line_error

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

# Schemas whose every part is bounded: a random model's answer ends within max_tokens.
BOUNDED = {
    "nested": {
        "type": "object",
        "properties": {
            "user": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "admin": {"type": "boolean"}}, "required": ["name", "admin"], "additionalProperties": False},
            "level": {"type": "integer", "minimum": 1, "maximum": 9},
        },
        "required": ["user", "level"],
        "additionalProperties": False,
    },
    "arrays": {
        "type": "object",
        "properties": {"scores": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 2, "maxItems": 4}},
        "required": ["scores"],
        "additionalProperties": False,
    },
    "enums_and_optional": {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green", "blue"]}, "shade": {"type": "string", "enum": ["light", "dark"]}, "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"}},
        "required": ["colour", "code"],
        "additionalProperties": False,
    },
}
PROMPTS = ["Hello", "The answer is", "JSON:"]


@pytest.fixture(scope="module")
def tiny():
    from tfcli.store import load

    return load(TINY_LLAMA)


def compiled(lm, kind: str, text: str):
    from tfcli.engine.grammar import compile_grammar

    return compile_grammar(kind, text, lm.tokenizer, lm.config.vocab_size, lm.config.eos_token_ids)


def generate(lm, prompt: str, grammar, seed: int, n: int = 100, **knobs):
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.sampling import Sampler, SamplingParams

    params = SamplingParams(**{"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed, **knobs})
    gen = Generation(Session(lm.model), lm.tokenizer, lm.tokenizer.prompt(prompt), Sampler(params), n, eos_ids=lm.config.eos_token_ids, constraint=grammar.start())
    text = "".join(s.text for s in gen)
    return text, gen.stats


# --- the sampler: the softmax over the allowed tokens alone -------------------------------------


def test_the_mask_leaves_the_softmax_of_the_allowed_tokens():
    from tfcli.engine.sampling import Sampler, SamplingParams

    rng = np.random.default_rng(0)
    logits = rng.normal(size=500).astype(np.float32) * 3  # [V]
    allowed = rng.random(500) < 0.1  # [V]
    for knobs in ({"temperature": 0.7, "top_k": 0, "top_p": 1.0, "min_p": 0.0}, {"temperature": 1.3, "top_k": 5, "top_p": 0.9, "min_p": 0.05}):
        ids, probs = Sampler(SamplingParams(**knobs)).candidates(logits, [], allowed=allowed)
        assert allowed[ids].all()
        # the reference: forbidden logits at -inf, then the same knobs by hand
        z = np.where(allowed, logits / knobs["temperature"], -np.inf).astype(np.float64)
        p = np.exp(z - z.max())
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        keep = order[: knobs["top_k"]] if knobs["top_k"] else order[: allowed.sum()]
        p[keep] /= p[keep].sum()  # top-k, then the softmax of those k (as transformers' processors)
        cum = np.cumsum(p[keep])
        keep = keep[(cum - p[keep]) < knobs["top_p"]]
        keep = keep[p[keep] >= knobs["min_p"] * p[keep].max()]
        want = p[keep] / p[keep].sum()
        assert sorted(ids.tolist()) == sorted(keep.tolist())
        got = dict(zip(ids.tolist(), probs.tolist()))
        np.testing.assert_allclose([got[i] for i in keep.tolist()], want, rtol=1e-5)
    greedy = Sampler(SamplingParams(temperature=0)).sample(logits, [], allowed=allowed)
    assert greedy == int(np.flatnonzero(allowed)[np.argmax(logits[allowed])])


def test_show_probs_marks_what_the_grammar_ruled_out(tiny):
    from tfcli.engine import ops
    from tfcli.engine.sampling import Sampler, SamplingParams

    rng = np.random.default_rng(1)
    logits = rng.normal(size=300).astype(np.float32)
    allowed = np.zeros(300, dtype=bool)
    allowed[[3, 17, 250]] = True
    c = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0)).choose(logits, [], 5, allowed)
    p = ops.softmax(logits)
    assert c.token in (3, 17, 250)
    assert c.ruled_out == pytest.approx(1 - p[[3, 17, 250]].sum(), rel=1e-5)
    assert c.allowed.tolist() == [bool(allowed[i]) for i in c.top_ids]


# --- one sequence, samples: every answer valid ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(BOUNDED))
@pytest.mark.parametrize("folder", [TINY_LLAMA, TINY_GPT2], ids=["llama", "gpt2"])
def test_every_answer_validates_under_its_schema(folder, name):
    from tfcli.store import load

    lm = load(folder)
    grammar = compiled(lm, "json_schema", json.dumps(BOUNDED[name]))
    for seed, prompt in enumerate(PROMPTS):
        text, stats = generate(lm, prompt, grammar, seed)
        assert stats.stop_reason in ("grammar", "eos"), (text, stats.stop_reason)
        jsonschema.validate(json.loads(text), BOUNDED[name])


def test_samples_each_follow_the_grammar_from_its_own_start(tiny):
    from tfcli.engine.batch import Samples
    from tfcli.engine.generate import Session
    from tfcli.engine.sampling import Sampler, SamplingParams

    schema = BOUNDED["arrays"]
    grammar = compiled(tiny, "json_schema", json.dumps(schema))
    samplers = [Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=s)) for s in range(3)]
    batch = Samples(Session(tiny.model), tiny.tokenizer, tiny.tokenizer.prompt("Hi"), samplers, 80, eos_ids=tiny.config.eos_token_ids)
    for run in batch.runs:
        run.constraint = grammar.start()
    texts = ["", "", ""]
    for steps in batch:
        for i, step in steps:
            texts[i] += step.text
    for i, text in enumerate(texts):
        jsonschema.validate(json.loads(text), schema)
        alone, _ = generate(tiny, "Hi", grammar, i, 80)
        assert text == alone  # a sample is what its sampler gives alone
    assert len(set(texts)) > 1


def test_a_regex_and_a_gbnf_grammar(tiny, tmp_path):
    import re

    for seed in range(3):
        text, _ = generate(tiny, "Date:", compiled(tiny, "regex", r"[0-9]{4}-[01][0-9]-[0-3][0-9]"), seed)
        assert re.fullmatch(r"[0-9]{4}-[01][0-9]-[0-3][0-9]", text), text
    gbnf = 'root ::= greeting " " name "!"\ngreeting ::= "hello" | "goodbye"\nname ::= [a-z]{2,5}\n'
    for seed in range(3):
        text, _ = generate(tiny, "Say:", compiled(tiny, "gbnf", gbnf), seed)
        assert re.fullmatch(r"(hello|goodbye) [a-z]{2,5}!", text), text


@pytest.mark.parametrize(
    "kind, text, needle",
    [
        ("json_schema", json.dumps({"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(10_000)}}), "10,000 properties"),
        ("json_schema", json.dumps({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}), "matches no text"),
        ("json_schema", json.dumps({"$ref": "#"}), "matches no text"),
        ("json_schema", json.dumps({"type": "integer", "minimum": 5, "maximum": 3}), "Unsatisfiable"),
        ("json_schema", json.dumps({"type": "strnig"}), "strnig"),
        ("json_schema", "[1, 2]", "is an object"),
        ("json_schema", "{nope", "not JSON"),
        ("gbnf", "root ::= root", "matches no text"),
        ("gbnf", 'root ::= "a" undefined', "undefined"),
        ("regex", "[", "regular expression"),
    ],
)
def test_a_grammar_that_cannot_apply_is_refused_at_once(tiny, kind, text, needle):
    from tfcli.engine.grammar import GrammarError

    t0 = time.perf_counter()
    with pytest.raises(GrammarError) as e:
        compiled(tiny, kind, text)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)
    assert time.perf_counter() - t0 < 10


def test_a_grammar_that_never_ends_stops_at_the_budget_or_with_one_error(tiny):
    from tfcli.engine.grammar import GrammarError

    text, stats = generate(tiny, "x", compiled(tiny, "gbnf", "root ::= [ab] root"), 0, n=12)
    assert stats.stop_reason == "max tokens" and set(text) <= {"a", "b"} and text
    t0 = time.perf_counter()
    with pytest.raises(GrammarError, match="the grammar refused"):  # one text forced forever: the library's item limit
        generate(tiny, "x", compiled(tiny, "gbnf", 'root ::= "a" root'), 0, n=12)
    assert time.perf_counter() - t0 < 10


# --- the command line ----------------------------------------------------------------------------


def test_generate_follows_a_schema_file_and_marks_show_probs(cli, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(BOUNDED["nested"]))
    r = cli("generate", "Hi", "-m", TINY_LLAMA, "--json-schema", schema, "--seed", "1", "-n", "100", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(json.loads(doc["text"][len("Hi") :] if doc["text"].startswith("Hi") else doc["text"]), BOUNDED["nested"])
    r = cli("generate", "Hi", "-m", TINY_LLAMA, "--json-schema", json.dumps(BOUNDED["arrays"]), "-t", "0", "-n", "60", "--show-probs", "3")
    assert r.exit_code == 0, r.stderr
    assert "ruled out" in r.stderr and "✗" in r.stderr
    jsonschema.validate(json.loads(r.stdout[len("Hi") :]), BOUNDED["arrays"])


def test_generate_samples_and_regex(cli):
    r = cli("generate", "Hi", "-m", TINY_LLAMA, "--regex", "(yes|no)", "--samples", "3", "--seed", "4")
    assert r.exit_code == 0, r.stderr
    answers = [line for line in r.stdout.splitlines() if line.startswith("Hi")]
    assert len(answers) == 3 and all(a in ("Hiyes", "Hino") for a in answers), r.stdout


def test_bad_grammar_flags_are_one_line_errors(cli, tmp_path):
    one_line_error(cli("generate", "Hi", "-m", TINY_LLAMA, "--regex", "a", "--json-schema", "{}"), 2, "--json-schema and --regex")
    one_line_error(cli("generate", "Hi", "-m", TINY_LLAMA, "--grammar", tmp_path / "none.gbnf"), 2, "no such file")
    one_line_error(cli("generate", "Hi", "-m", TINY_LLAMA, "--json-schema", '{"type": "nope"}'), 2, "JSON schema", "nope")
    one_line_error(cli("generate", "Hi", "-m", TINY_LLAMA, "--regex", "("), 2, "regular expression")
    bad = tmp_path / "bad.gbnf"
    bad.write_bytes(b"\xff\xfe")
    one_line_error(cli("generate", "Hi", "-m", TINY_LLAMA, "--grammar", bad), 2, "not UTF-8")


# --- the server: response_format and grammar ------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_url(tiny):
    from test_serve import serving

    with serving(tiny, "tiny-llama", max_rows=8, queue=16) as (url, _):
        yield url


def _format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_the_server_batch_answers_validate_whole_streamed_and_n3(tiny_url, name):
    from test_serve import openai_client

    client = openai_client(tiny_url)
    schema = BOUNDED[name]
    for seed, prompt in enumerate(PROMPTS):
        extra = {"response_format": _format(schema), "top_k": 0, "min_p": 0}
        out = client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=100, temperature=1.0, seed=seed, n=3, extra_body=extra)
        assert len(out.choices) == 3
        for c in out.choices:
            assert c.finish_reason == "stop", c
            jsonschema.validate(json.loads(c.text), schema)
        texts = ["", "", ""]
        for chunk in client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=100, temperature=1.0, seed=seed, n=3, stream=True, extra_body=extra):
            for c in chunk.choices:
                texts[c.index] += c.text
        assert texts == [c.text for c in out.choices]  # streamed, the same answers


def test_the_server_takes_a_gbnf_grammar(tiny_url):
    from test_serve import post

    status, body, _ = post(tiny_url + "/v1/completions", {"prompt": "Say", "max_tokens": 40, "grammar": 'root ::= ("yes" | "no") "."', "n": 4, "seed": 1})
    assert status == 200, body
    assert {c["text"] for c in body["choices"]} <= {"yes.", "no."}


@pytest.mark.parametrize(
    "extra, param, needle",
    [
        ({"response_format": _format({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}})}, "response_format.json_schema", "10,000 properties"),
        ({"response_format": _format({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})}, "response_format.json_schema", "matches no text"),
        ({"response_format": _format({"type": "string", "pattern": "(?=a)b"})}, "response_format.json_schema", "cannot be applied"),
        ({"response_format": _format({"type": "strnig"})}, "response_format.json_schema", "strnig"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "'schema' object"),
        ({"response_format": {"type": "xml"}}, "response_format", "must be"),
        ({"response_format": _format({"type": "object"}) | {"json_schema": {"schema": {}, "strict": "yes"}}}, "response_format.json_schema.strict", "true or false"),
        ({"grammar": "root ::= root"}, "grammar", "matches no text"),
        ({"grammar": 'root ::= "a" missing'}, "grammar", "missing"),
        ({"grammar": 5}, "grammar", "GBNF"),
        ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "grammar", "not both"),
    ],
)
def test_a_grammar_the_library_cannot_apply_is_a_400_never_a_free_answer(tiny_url, extra, param, needle):
    from test_serve import post

    t0 = time.perf_counter()
    status, body, _ = post(tiny_url + "/v1/completions", {"prompt": "Hi", "max_tokens": 20, **extra})
    assert status == 400, body
    assert body["error"]["param"] == param and needle in body["error"]["message"], body
    assert time.perf_counter() - t0 < 20


def test_a_grammar_failing_mid_answer_ends_the_answer_with_an_error(tiny_url):
    from test_serve import post

    status, body, _ = post(tiny_url + "/v1/completions", {"prompt": "Hi", "max_tokens": 20, "grammar": 'root ::= "a" root'})
    assert status == 400 and "grammar" in body["error"]["message"], body
    long = {"type": "object", "properties": {"a": {"type": "string", "minLength": 30}}, "required": ["a"]}
    status, body, _ = post(tiny_url + "/v1/completions", {"prompt": "Hi", "max_tokens": 8, "response_format": _format(long)})
    assert status == 200 and body["choices"][0]["finish_reason"] == "length"  # cut by max_tokens: says so


# --- SmolLM2 through the openai client ------------------------------------------------------------
# Strings bounded, as a schema for a small model should be: SmolLM2-135M can loop inside a free string.

REAL = {
    "person": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 130}, "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {"product": {"type": "string", "maxLength": 40}, "quantity": {"type": "integer", "minimum": 1}}, "required": ["product", "quantity"], "additionalProperties": False}},
            "total": {"type": "number"},
        },
        "required": ["items", "total"],
        "additionalProperties": False,
    },
    "weather": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}, "sky": {"enum": ["sunny", "cloudy", "rainy", "snowy"]}, "celsius": {"type": "number", "minimum": -60, "maximum": 60}},
        "required": ["city", "sky", "celsius"],
        "additionalProperties": False,
    },
    "book": {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 40}, "author": {"type": "object", "properties": {"first": {"type": "string", "maxLength": 40}, "last": {"type": "string", "maxLength": 40}}, "required": ["last"], "additionalProperties": False}, "year": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}},
        "required": ["title", "author", "year"],
        "additionalProperties": False,
    },
}
ASKS = ["Answer in JSON about: {}.", "Give me an example {} as JSON.", "Describe a {} in JSON."]


@pytest.fixture(scope="module")
def smol_url(smollm2_folder):
    from test_serve import serving

    from tfcli.store import load

    with serving(load(smollm2_folder), "smollm2", max_rows=8, queue=16) as (url, _):
        yield url


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL))
def test_smollm2_answers_validate_through_the_openai_client(smol_url, name):
    from test_serve import openai_client

    client = openai_client(smol_url)
    schema = REAL[name]
    for i, ask in enumerate(ASKS):
        messages = [{"role": "user", "content": ask.format(name)}]
        out = client.chat.completions.create(model="smollm2", messages=messages, response_format=_format(schema), max_tokens=200, temperature=0.7, seed=i)
        assert out.choices[0].finish_reason == "stop", out.choices[0]
        jsonschema.validate(json.loads(out.choices[0].message.content), schema)
    text, finish = "", None
    for chunk in client.chat.completions.create(model="smollm2", messages=messages, response_format=_format(schema), max_tokens=200, stream=True, temperature=0):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop"
    jsonschema.validate(json.loads(text), schema)
    three = client.chat.completions.create(model="smollm2", messages=messages, response_format=_format(schema), max_tokens=200, n=3, temperature=1.0, seed=7)
    for c in three.choices:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), schema)


@pytest.mark.slow
def test_smollm2_json_object_mode(smol_url):
    from test_serve import openai_client

    out = openai_client(smol_url).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "List three fruits as a JSON object."}], response_format={"type": "json_object"}, max_tokens=120, temperature=0
    )
    assert isinstance(json.loads(out.choices[0].message.content), dict)


@pytest.mark.slow
def test_constrained_decoding_costs_at_most_a_tenth_of_decode_speed(smollm2_folder):
    """The same run: decode speed of a JSON schema's answer against the same steps unconstrained
    (greedy, best of three each, in turn); the mask must cost at most 10%."""
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.sampling import Sampler, SamplingParams
    from tfcli.store import load

    lm = load(smollm2_folder)
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}, "minItems": 12}}, "required": ["items"]}
    grammar = compiled(lm, "json_schema", json.dumps(schema))
    ids = lm.tokenizer.encode(lm.chat.render([{"role": "user", "content": "List twelve animals as JSON."}], add_generation_prompt=True))

    def rate(constrained: bool) -> float:
        gen = Generation(Session(lm.model), lm.tokenizer, ids, Sampler(SamplingParams(temperature=0)), 48, eos_ids=(), constraint=grammar.start() if constrained else None)
        for _ in gen:
            pass
        assert gen.stats.new_tokens == 48
        return gen.stats.decode_tps

    rate(True)  # warm: compiled kernels, the library's first masks
    free, held = [], []
    for _ in range(3):
        free.append(rate(False))
        held.append(rate(True))
    print(f"decode: {max(free):.1f} tok/s free, {max(held):.1f} tok/s under the schema ({max(held) / max(free):.3f}x)")
    assert max(held) >= 0.9 * max(free)


def test_the_grammar_library_is_imported_by_a_constrained_run_alone():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tfcli.cli import app\n"
        "from tfcli.serve import api, app as web, batcher\n"
        "from tfcli.engine import generate, grammar\n"
        "from typer.testing import CliRunner\n"
        f"r = CliRunner().invoke(app, ['generate', 'Hi', '-m', {str(TINY_LLAMA)!r}, '-n', '3'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'llguidance' not in sys.modules, 'imported without a grammar'\n"
        f"r = CliRunner().invoke(app, ['generate', 'Hi', '-m', {str(TINY_LLAMA)!r}, '-n', '3', '--regex', 'a+'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'llguidance' in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


# --- llama.cpp's own GBNF grammars ----------------------------------------------------------------

from llama_cpp_vectors import llama_cpp_grammars  # noqa: E402, F401 - a fixture


def accepted(lm, grammar, text: str, whole: bool) -> bool:
    """Whether a fresh start of the grammar takes text's tokens (and, `whole`, ends there)."""
    c = grammar.start()
    for t in lm.tokenizer.encode(text):
        if not c.allowed()[t]:
            return False
        c.advance(t)
    return c.accepting or not whole


def test_llama_cpps_grammars_constrain_generate(tiny, llama_cpp_grammars):
    """Every grammar of llama.cpp's grammars/ folder compiles (or is refused in one line saying
    why); each answer drawn under it is a text the grammar takes: whole when the grammar ended it,
    a start of one when max_tokens cut it; the JSON grammars' whole answers parse as JSON."""
    from tfcli.engine.grammar import GrammarError

    files = sorted(llama_cpp_grammars.glob("*.gbnf"))
    assert len(files) >= 8
    ran, ended = [], 0
    for f in files:
        try:
            grammar = compiled(tiny, "gbnf", f.read_text(encoding="utf-8"))
        except GrammarError as e:
            assert "\n" not in str(e)
            continue
        ran.append(f.name)
        for seed in range(2):
            text, stats = generate(tiny, "Go:", grammar, seed, n=60, temperature=0.8)
            whole = stats.stop_reason in ("grammar", "eos")
            assert accepted(tiny, grammar, text, whole), (f.name, text)
            if whole and f.name.startswith("json"):
                json.loads(text)
            ended += whole
    assert {"json.gbnf", "arithmetic.gbnf", "list.gbnf"} <= set(ran), ran
    assert ended > 0
