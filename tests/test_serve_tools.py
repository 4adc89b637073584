"""Tool calls through the openai client: tools rendered by the model's own chat template (Qwen2.5's,
from llama.cpp's templates folder), calls read back into message.tool_calls (whole and streamed),
required calls constrained to the function's schema, `tool` messages in the next turn.

The model is the tiny random Llama with Qwen2.5's template: its calls are well formed only because
tool_choice "required" or a named function constrains them.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace

import pytest
from llama_cpp_vectors import llama_cpp_models  # noqa: F401 - a fixture

from conftest import TINY_LLAMA

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": ["zone"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "The time in a zone", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
LOOP = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}  # matches nothing
MANY = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(10_000)}}
# As pydantic writes a model with a nested one (the openai client's pydantic_function_tool): pointers from its root.
BOOKING = {
    "$defs": {"Guest": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}},
                        "required": ["name"], "additionalProperties": False}},
    "type": "object", "required": ["guests", "nights"], "additionalProperties": False,
    "properties": {"guests": {"type": "array", "items": {"$ref": "#/$defs/Guest"}, "minItems": 1, "maxItems": 2},
                   "nights": {"type": "integer", "minimum": 1, "maximum": 9}},
}  # fmt: skip


PARAMS = "tools[%d].function.parameters"  # where a 400 about a tool's schema points


def _tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


@pytest.fixture(scope="module")
def qwen_template(llama_cpp_models):
    return (llama_cpp_models / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def url(qwen_template, tmp_path_factory):
    from test_serve import serving

    from tfcli.engine.chat import ChatTemplate
    from tfcli.store import load

    folder = tmp_path_factory.mktemp("tiny-long") / "tiny-llama"  # the tiny Llama with room for Qwen2.5's tool prompt (~1,000 tokens)
    shutil.copytree(TINY_LLAMA, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2048}))
    lm = replace(load(folder), chat=ChatTemplate(qwen_template, eos_token="<|im_end|>"))
    with serving(lm, "tiny-qwen", max_rows=8, queue=16) as (u, _):
        yield u


@pytest.fixture(scope="module")
def client(url):
    from test_serve import openai_client

    return openai_client(url)


def valid(call) -> None:
    assert call.type == "function" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_the_template_renders_tools_calls_and_results(qwen_template):
    from tfcli.engine.chat import ChatTemplate
    from tfcli.serve.tools import messages_for_template, tools_of

    tools = tools_of({"tools": TOOLS}, qwen_template)
    assert tools.style == "hermes" and tools.in_template and tools.choice == "auto"
    turn = [
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"},
    ]
    messages, variables = messages_for_template(turn, tools)
    text = ChatTemplate(qwen_template, eos_token="<|im_end|>").render(messages, True, **variables)
    assert '"name": "get_weather"' in text and "<tools>" in text  # the tools, as Qwen2.5 lists them
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>' in text
    assert "<tool_response>\n18 degrees, sunny\n</tool_response>" in text


def test_calls_are_read_back_in_each_style(qwen_template):
    from tfcli.serve.tools import tools_of

    hermes = tools_of({"tools": TOOLS}, qwen_template)
    content, calls = hermes.parse('Let me look.\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>')
    assert content == "Let me look." and calls[0]["function"] == {"name": "get_time", "arguments": '{"zone": "UTC"}'}
    assert hermes.parse('<tool_call>{"name": "nope", "arguments": {}}</tool_call>') == ('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', [])
    assert hermes.parse("plain text") == ("plain text", [])
    llama = tools_of({"tools": TOOLS}, 'Respond in the format {"name": function name, "parameters": dictionary} {{ tools }}')
    assert llama.style == "llama"
    content, calls = llama.parse('{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}}')
    assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo", "unit": "celsius"}


# Templates of llama.cpp's folder that teach the format a forced call is constrained to (a Hermes <tool_call> block
# of {"name", "arguments"} JSON, or Llama 3.x's bare {"name", "parameters"}). The others teach their own (Mistral's
# [TOOL_CALLS]name[ARGS], Qwen3-Coder's <function=...> XML, GLM's <arg_key>, DeepSeek's, gpt-oss's channels): tools
# reach them through their template, but a call they write is not read back, and a forced one is a Hermes block.
HERMES_TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen-QwQ-32B", "Bielik-11B-v3.0-Instruct",
                    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
                    "MiMo-VL", "Reka-Edge", "ibm-granite-granite-4.0", "ibm-granite-granite-4.1"]  # fmt: skip
LLAMA_TEMPLATES = [f"meta-llama-Llama-{v}-Instruct" for v in ("3.1-8B", "3.2-3B", "3.3-70B")]


@pytest.mark.parametrize("name", HERMES_TEMPLATES + LLAMA_TEMPLATES)
def test_each_template_writes_a_call_as_the_forced_grammar_does(llama_cpp_models, name):
    """The template's own rendering of a call is the text the forced call's grammar produces (its
    tags, its separators), and it is read back as the call."""
    from tfcli.engine.chat import ChatTemplate
    from tfcli.serve.tools import messages_for_template, tools_of

    template = (llama_cpp_models / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
    tools = tools_of({"tools": TOOLS, "tool_choice": "required"}, template)
    assert tools.style == ("llama" if name in LLAMA_TEMPLATES else "hermes") and tools.in_template
    said = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
    turn = [*ASK, {"role": "assistant", "content": "", "tool_calls": [said]}]
    messages, variables = messages_for_template(turn, tools)
    text = ChatTemplate(template, eos_token="<|im_end|>").render(messages, False, **variables)
    key = "parameters" if tools.style == "llama" else "arguments"
    call = f'{{"name": "get_time", "{key}": {{"zone": "UTC"}}}}'
    block = call if tools.style == "llama" else f"<tool_call>\n{call}\n</tool_call>"
    assert block in text, text[-300:]
    assert tools.parse(block)[1][0]["function"] == said["function"]


def test_llama3s_required_call_is_its_bare_json_to_the_end_of_turn(llama_cpp_models, tmp_path):
    """Llama 3.x's templates teach a call as a bare {"name", "parameters"} object, no tag to open it:
    the required call's grammar, on Llama 3's real vocabulary (llama.cpp's ggml-vocab-llama-bpe.gguf),
    takes the call as its template writes it, token by token, then <|eot_id|>; it is read back."""
    from functools import partial

    from tfcli.engine.chat import ChatTemplate
    from tfcli.engine.grammar import compile_grammar, tag_rule
    from tfcli.engine.tokenizer import Tokenizer
    from tfcli.serve.tools import messages_for_template, tools_of
    from tfcli.store.gguf import GGUFFile
    from tfcli.store.gguf.tokenizer import tokenizer_json

    with GGUFFile(llama_cpp_models / "ggml-vocab-llama-bpe.gguf") as g:
        (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer_json(g), ensure_ascii=False), encoding="utf-8")
        n_vocab = len(g.get("tokenizer.ggml.tokens"))
    tok, eot = Tokenizer(tmp_path / "tokenizer.json"), 128009
    for version in ("3.1-8B", "3.2-3B", "3.3-70B"):
        name = f"meta-llama-Llama-{version}-Instruct"
        template = (llama_cpp_models / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
        tools = tools_of({"tools": TOOLS, "tool_choice": "required"}, template)
        assert (tools.style, tools.in_template) == ("llama", True), name
        said = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
        turn = [*ASK, {"role": "assistant", "content": None, "tool_calls": [said]}]
        messages, variables = messages_for_template(turn, tools)
        text = ChatTemplate(template, eos_token="<|eot_id|>").render(messages, False, **variables)
        call = text.rsplit("<|end_header_id|>\n\n", 1)[1].split("<|eot_id|>")[0]
        assert call == '{"name": "get_time", "parameters": {"zone": "UTC"}}', (name, call)
        tag = partial(tag_rule, tokenizer=tok, vocab_size=n_vocab, eos_ids=(eot,))
        c = compile_grammar("lark", tools.grammar(tag), tok, n_vocab, (eot,)).start()
        for t in tok.encode(call):
            assert c.allowed()[t], (name, tok.token_text(t))
            c.advance(t)
        assert c.accepting and c.allowed()[eot]
        assert tools.parse(call)[1][0]["function"] == {"name": "get_time", "arguments": '{"zone": "UTC"}'}


def test_a_required_call_round_trip_through_the_openai_client(client):
    out = client.chat.completions.create(model="tiny-qwen", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200, seed=1)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    valid(call)
    follow = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"},
    ]
    final = client.chat.completions.create(model="tiny-qwen", messages=follow, tools=TOOLS, max_tokens=8, seed=1)
    assert final.choices[0].message.role == "assistant"
    assert final.choices[0].finish_reason in ("stop", "length", "tool_calls")
    none = client.chat.completions.create(model="tiny-qwen", messages=follow, tools=TOOLS, tool_choice="none", max_tokens=8, seed=1)
    assert isinstance(none.choices[0].message.content, str) and not none.choices[0].message.tool_calls


def test_a_streamed_call_arrives_as_deltas(client):
    kwargs = dict(model="tiny-qwen", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200, seed=2)
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls[0]
    name, args, finish, ids = "", "", None, set()
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                ids.add(d.id) if d.id else None
                name += d.function.name or "" if d.function else ""
                args += d.function.arguments or "" if d.function else ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and len(ids) == 1
    assert (name, args) == (whole.function.name, whole.function.arguments)  # the same seed, the same call


def test_a_named_function_and_n3_each_validate(client):
    out = client.chat.completions.create(
        model="tiny-qwen", messages=ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=200, n=3, temperature=1.0, seed=3
    )
    assert len(out.choices) == 3
    for c in out.choices:
        assert c.finish_reason == "tool_calls" and c.message.tool_calls[0].function.name == "get_time"
        valid(c.message.tool_calls[0])


def test_a_required_call_follows_a_schema_with_its_own_definitions(client):
    """A tool's schema whose $refs point into its own $defs (pydantic's way): the call's arguments,
    one branch of the grammar's schema, still find them, and validate."""
    tools = [*TOOLS, _tool("book", BOOKING)]
    out = client.chat.completions.create(model="tiny-qwen", messages=ASK, tools=tools, max_tokens=200, n=2, seed=4,
                                         tool_choice={"type": "function", "function": {"name": "book"}})  # fmt: skip
    for c in out.choices:
        assert c.finish_reason == "tool_calls", c
        call = c.message.tool_calls[0]
        assert call.function.name == "book"
        jsonschema.validate(json.loads(call.function.arguments), BOOKING)


def test_arguments_cut_by_max_tokens_say_length(client):
    out = client.chat.completions.create(model="tiny-qwen", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=6, seed=1)
    assert out.choices[0].finish_reason == "length" and not out.choices[0].message.tool_calls


@pytest.mark.parametrize(
    "extra, param, needle",
    [
        ({"tools": [TOOLS[0]] * 1 + [{"type": "function", "function": {"name": f"f{i}"}} for i in range(1_000)]}, "tools", "at most 128"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "names no tool"),
        ({"tool_choice": "required"}, "tool_choice", "needs 'tools'"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "auto, none, required"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0]", "letters, digits"),
        ({"tools": [TOOLS[0], TOOLS[0]]}, "tools[1]", "two tools"),
        ({"tools": [_tool("f", {"type": "strnig"})], "tool_choice": "required"}, PARAMS % 0, "strnig"),
        ({"tools": [TOOLS[0], _tool("f", LOOP)], "tool_choice": "required"}, PARAMS % 1, "matches no text"),
        ({"tools": [_tool("f", MANY)], "tool_choice": {"type": "function", "function": {"name": "f"}}},
         PARAMS % 0, "10,000 properties"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice", "cannot also follow"),
    ],
)
def test_bad_tool_requests_are_400s(url, extra, param, needle):
    """Each at once (a schema of 10,000 properties would take the grammar library minutes to build),
    the tool named."""
    from test_serve import post

    t0 = time.perf_counter()
    status, body, _ = post(url + "/v1/chat/completions", {"messages": ASK, "max_tokens": 8, **extra})
    assert status == 400, body
    assert body["error"]["param"] == param and needle in body["error"]["message"], body
    assert time.perf_counter() - t0 < 30
