"""The OpenAI API's requests, checked, and its errors: what a body asks for, in the engine's terms.

Each check names the field (`param`) and the value it refused, in OpenAI's error shape
(https://platform.openai.com/docs/guides/error-codes): {"error": {"message", "type", "param", "code"}}.
Sampling settings a request leaves out come from the model's generation_config.json, then from
tfcli's defaults (llama.cpp's: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), as for
`tfcli generate`; a client that wants OpenAI's plain sampling sends temperature 1, top_p 1, top_k 0, min_p 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import partial

from tfcli.engine.errors import TfcliError, shown
from tfcli.engine.grammar import Grammar, GrammarError, tag_rule
from tfcli.engine.loader import LoadedModel
from tfcli.engine.sampling import SamplingParams

from .tools import Tools, messages_for_template, tools_of
from .errors import QUOTE_CHARS, ApiError, bad, quoted  # noqa: F401 - ApiError is this module's to its users

MAX_CHOICES = 16  # n x prompts of one request: a bound, so that one request cannot take every row for long
MAX_TOP = 20  # top log-probabilities per token (OpenAI's chat limit)
MAX_STOPS = 16
COMPLETION_DEFAULT_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions
COUNT_FROM = 65_536  # characters: a longer text is counted a part at a time before it is tokenized whole
COUNT_PART = 65_536  # characters tokenized at a time while counting (about 10 MB of the library's temporaries)


class Huge:
    """An integer of more than MAX_DIGITS digits in a body (serve/body.py), kept as its text: out of
    every range the API has, and refused by name wherever it is used."""

    MAX_DIGITS = 40  # seeds, the largest integers the API takes, end at 2^63 (19 digits)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"{self.text[:20]}...({len(self.text):,} digits)"


@dataclass
class Asked:
    """What a completion or chat request asks for, checked."""

    prompts: list[list[int]]
    prompt_texts: list[str]
    params: list[SamplingParams]
    n: int
    max_tokens: int
    stop: tuple[str, ...]
    eos_ids: tuple[int, ...]
    stream: bool
    include_usage: bool
    echo: bool = False
    logprobs: int | None = None
    grammar: Grammar | None = None  # the grammar every answer follows (response_format, grammar, a required tool call)
    tools: Tools | None = None  # tools the answer may call: read back from its text (serve/tools.py)


def check_model(body: dict, served: str) -> None:
    model = body.get("model")
    if model is None:
        return  # the one model served
    if not isinstance(model, str):
        raise bad(f"'model' must be a string, not {_kind(model)}", "model")
    if model != served:
        raise ApiError(
            404,
            f"The model {quoted(model)} does not exist; this server serves {quoted(served)}",
            "model",
            "model_not_found",
        )


def completion(body: dict, lm: LoadedModel, served: str) -> Asked:
    check_model(body, served)
    if "prompt" not in body:
        raise bad("'prompt' is required", "prompt")
    prompts = _prompts(body["prompt"], lm)
    echo = _bool(body, "echo", False)
    logprobs = _int(body, "logprobs", None, 0, MAX_TOP)
    given = _int(body, "max_tokens", None, 0, None)
    if given == 0 and not echo:
        raise bad(
            "'max_tokens' must be at least 1 (0 only with echo: the prompt's log-probabilities alone)", "max_tokens"
        )
    max_tokens = _fit(prompts, given, COMPLETION_DEFAULT_TOKENS, lm, "prompt")
    asked = _knobs(body, lm, prompts, max_tokens, lm.config.eos_token_ids)
    asked.echo, asked.logprobs = echo, logprobs
    asked.grammar = constrained(body, lm, asked.eos_ids)
    return asked


def chat(body: dict, lm: LoadedModel, served: str) -> Asked:
    check_model(body, served)
    if lm.chat is None:
        raise bad(
            f"{served} has no chat template (no chat_template in its tokenizer_config.json): use /v1/completions",
            "messages",
            "no_chat_template",
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list of {role, content} objects", "messages")
    tools = tools_of(body, lm.chat.source)
    for i, f in enumerate(tools.functions if tools is not None and tools.forced else []):
        if tools.choice in ("required", f["name"]):  # each schema alone, before the prompt: a 400 naming the tool
            params = json.dumps(tools.parameters(f["name"]))
            _compiled("json_schema", params, lm, lm.chat_eos_ids(), f"tools[{i}].function.parameters")
    plain, variables = messages_for_template([_message(m, i) for i, m in enumerate(messages)], tools)
    try:
        text = lm.chat.render(plain, add_generation_prompt=True, **variables)
    except TfcliError as e:
        raise bad(
            f"the chat template could not lay out these messages: {shown(str(e), QUOTE_CHARS)}", "messages"
        ) from None
    ids = encode(text, lm, "messages", special=False)
    if _bool(body, "logprobs", False):
        top = _int(body, "top_logprobs", 0, 0, MAX_TOP)
    else:
        if body.get("top_logprobs") not in (None, 0):
            raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        top = None
    given = _int(body, "max_completion_tokens", None, 1, None)
    given = _int(body, "max_tokens", None, 1, None) if given is None else given
    max_tokens = _fit([ids], given, None, lm, "messages")
    asked = _knobs(body, lm, [ids], max_tokens, lm.chat_eos_ids())
    asked.prompt_texts, asked.logprobs = [text], top
    asked.grammar = constrained(body, lm, asked.eos_ids)
    asked.tools = tools
    if tools is not None and tools.forced:
        if asked.grammar is not None:
            raise bad(
                f"tool_choice {quoted(body.get('tool_choice'))} makes the answer a tool call: "
                "it cannot also follow 'response_format' or 'grammar'",
                "tool_choice",
            )
        tag = partial(tag_rule, tokenizer=lm.tokenizer, vocab_size=lm.config.vocab_size, eos_ids=asked.eos_ids)
        asked.grammar = _compiled("lark", tools.grammar(tag), lm, asked.eos_ids, "tools")
    return asked


def _message(m, i: int) -> dict:
    """One message, checked: role and content; an assistant's tool_calls, a tool's tool_call_id."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise bad(f"messages[{i}] must be an object with a 'role' string", f"messages[{i}]")
    calls = m.get("tool_calls")
    if calls is not None and m["role"] == "assistant":
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function"), dict) and isinstance(c["function"].get("name"), str)
            for c in calls
        ):
            raise bad(
                f"messages[{i}].tool_calls must be a list of {{id, type: function, function: {{name, arguments}}}}",
                f"messages[{i}].tool_calls",
            )
        content = "" if m.get("content") is None else _content(m.get("content"), i)
        return {"role": "assistant", "content": content, "tool_calls": calls}
    out = {"role": m["role"], "content": _content(m.get("content"), i)}
    if m["role"] == "tool":
        for key in ("tool_call_id", "name"):
            if isinstance(m.get(key), str):
                out[key] = m[key]
    return out


def constrained(body: dict, lm: LoadedModel, eos_ids: tuple[int, ...]) -> Grammar | None:
    """The grammar a request asks its answers to follow, compiled (engine/grammar.py), or None:
    `response_format` {"type": "json_object"} or {"type": "json_schema", "json_schema": {"name",
    "schema", "strict"}} (OpenAI), or `grammar`, a GBNF grammar (llama.cpp's server). What the
    library cannot apply is a 400 that says what: never an answer that ignored it."""
    fmt, gbnf = body.get("response_format"), body.get("grammar")
    if fmt is not None and gbnf is not None:
        raise bad("give 'response_format' or 'grammar', not both", "grammar")
    if gbnf is not None:
        if not isinstance(gbnf, str) or not gbnf.strip():
            raise bad("'grammar' must be a GBNF grammar (a non-empty string)", "grammar")
        return _compiled("gbnf", gbnf, lm, eos_ids, "grammar")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return _compiled("json_object", "", lm, eos_ids, "response_format")
    if kind != "json_schema":
        raise bad(
            '\'response_format\' must be {"type": "text"}, {"type": "json_object"} or '
            f'{{"type": "json_schema", "json_schema": {{...}}}}, not {quoted(fmt)}',
            "response_format",
        )
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise bad(
            "'response_format.json_schema' must be an object with a 'schema' object (and a 'name')",
            "response_format.json_schema",
        )
    if spec.get("strict") is not None and not isinstance(spec["strict"], bool):
        raise bad(
            f"'response_format.json_schema.strict' must be true or false, not {quoted(spec['strict'])}",
            "response_format.json_schema.strict",
        )
    return _compiled("json_schema", json.dumps(spec["schema"]), lm, eos_ids, "response_format.json_schema")


def _compiled(kind: str, text: str, lm: LoadedModel, eos_ids: tuple[int, ...], param: str) -> Grammar:
    from tfcli.engine.grammar import compile_grammar

    try:
        # strict whatever the request says: a keyword the library does not implement is refused, not ignored
        return compile_grammar(kind, text, lm.tokenizer, lm.config.vocab_size, eos_ids, strict=True)
    except GrammarError as e:
        raise bad(shown(str(e), QUOTE_CHARS), param, "invalid_grammar") from None


MAX_INPUTS = 256  # texts of one /v1/embeddings request (OpenAI takes 2,048; each costs a prompt pass here)
ENCODINGS = ("float", "base64")


@dataclass
class EmbeddingsAsked:
    """What an embeddings request asks for, checked: each input's token ids."""

    inputs: list[list[int]]
    encoding_format: str
    dimensions: int | None


def embeddings(body: dict, lm: LoadedModel, served: str) -> EmbeddingsAsked:
    """/v1/embeddings: `input` a string, a list of ids, or a list of either; `encoding_format`
    float (default) or base64 (the float32 bytes, little-endian, as OpenAI sends them);
    `dimensions` the first d values, normalized again."""
    check_model(body, served)
    if "input" not in body:
        raise bad("'input' is required", "input")
    value = body["input"]
    if isinstance(value, str) or (isinstance(value, list) and value and _is_int(value[0])):
        value = [value]
    if not isinstance(value, list) or not value:
        raise bad("'input' must be a string, a list of token ids, or a non-empty list of those", "input")
    if len(value) > MAX_INPUTS:  # before any of them is tokenized
        raise bad(f"{len(value):,} inputs in one request; at most {MAX_INPUTS}", "input")
    inputs = []
    for i, v in enumerate(value):
        if isinstance(v, str):
            ids = encode(v, lm, "input", special=True)
        elif isinstance(v, list) and len(v) > lm.config.n_ctx:
            raise bad(
                f"This model's maximum context length is {lm.config.n_ctx} tokens; input[{i}] is {len(v)} tokens",
                "input",
                "context_length_exceeded",
            )
        elif isinstance(v, list) and all(_is_int(t) for t in v):
            ids = [int(t) for t in v]
            _check_ids(ids, lm, "input")
        else:
            raise bad(f"input[{i}] must be a string or a list of token ids", "input")
        if not ids:
            raise bad(f"input[{i}] is empty (it encodes to no tokens)", "input")
        if len(ids) > lm.config.n_ctx:
            raise bad(
                f"This model's maximum context length is {lm.config.n_ctx} tokens; input[{i}] is {len(ids)} tokens",
                "input",
                "context_length_exceeded",
            )
        inputs.append(ids)
    fmt = body.get("encoding_format")
    fmt = "float" if fmt is None else fmt
    if fmt not in ENCODINGS:
        raise bad(f"'encoding_format' must be float or base64, not {quoted(fmt)}", "encoding_format")
    dimensions = _int(body, "dimensions", None, 1, lm.config.d_model)
    return EmbeddingsAsked(inputs, fmt, dimensions)


def tokenize(body: dict, lm: LoadedModel) -> dict:
    content = body.get("content")
    if not isinstance(content, str):
        raise bad("'content' must be a string", "content")
    ids = encode(content, lm, "content", special=_bool(body, "add_special", False))
    if _bool(body, "with_pieces", False):
        return {"tokens": [{"id": i, "piece": lm.tokenizer.token_text(i)} for i in ids]}
    return {"tokens": ids}


def detokenize(body: dict, lm: LoadedModel) -> dict:
    ids = body.get("tokens")
    if not isinstance(ids, list) or not all(_is_int(t) for t in ids):
        raise bad("'tokens' must be a list of token ids", "tokens")
    _check_ids(ids, lm, "tokens")
    return {"content": lm.tokenizer.decode(ids)}


def _prompts(value, lm: LoadedModel) -> list[list[int]]:
    """A string, a list of ids, or a list of either (several prompts) -> token ids per prompt."""
    if isinstance(value, str) or (isinstance(value, list) and value and _is_int(value[0])):
        value = [value]
    if not isinstance(value, list) or not value:
        raise bad("'prompt' must be a string, a list of token ids, or a non-empty list of those", "prompt")
    if len(value) > MAX_CHOICES:  # before any of them is tokenized
        raise bad(f"{len(value):,} prompts in one request; at most {MAX_CHOICES}", "prompt")
    out = []
    for p in value:
        if isinstance(p, str):
            ids = encode(p, lm, "prompt", special=True)
        elif isinstance(p, list) and len(p) > lm.config.n_ctx:  # refused by its length, before its ids are looked at
            raise bad(
                f"This model's maximum context length is {lm.config.n_ctx} tokens; the prompt is {len(p)} tokens",
                "prompt",
                "context_length_exceeded",
            )
        elif isinstance(p, list) and all(_is_int(t) for t in p):
            ids = [int(t) for t in p]
            _check_ids(ids, lm, "prompt")
        else:
            raise bad("each prompt must be a string or a list of token ids", "prompt")
        if not ids:
            raise bad("the prompt is empty (it encodes to no tokens)", "prompt")
        out.append(ids)
    return out


def encode(text: str, lm: LoadedModel, param: str, special: bool) -> list[int]:
    """A text's token ids (with the special tokens the tokenizer adds, if `special`), or a 400.

    A text longer than COUNT_FROM characters is first counted a part at a time, and refused as soon
    as the count passes the context: the memory and time a prompt costs are bounded by the
    context, not by the body. (Cutting a text into parts changes a token or two at each cut; the
    margin of MARGIN tokens a part keeps an estimate from refusing a text that fits.)"""
    tok, n_ctx = lm.tokenizer, lm.config.n_ctx
    try:
        if len(text) > COUNT_FROM:
            counted, at, parts = 0, 0, 0
            while at < len(text):
                end = min(at + COUNT_PART, len(text))
                cut = (
                    text.rfind(" ", at + COUNT_PART // 2, end) if end < len(text) else -1
                )  # cut before a space: where words part anyway
                end = cut if cut > 0 else end
                counted, at, parts = counted + len(tok.encode(text[at:end])), end, parts + 1
                if counted > n_ctx + MARGIN * parts:
                    raise bad(
                        f"This model's maximum context length is {n_ctx} tokens; the {param} is longer: "
                        f"its first {at:,} of {len(text):,} characters are already about {counted:,} tokens "
                        "(counting stopped there)",
                        param, "context_length_exceeded",
                    )  # fmt: skip
        return tok.prompt(text) if special else tok.encode(text)
    except TfcliError as e:
        raise bad(shown(str(e), QUOTE_CHARS), param) from None


MARGIN = 4  # tokens per part that cutting a text may add to its count


def _check_ids(ids: list[int], lm: LoadedModel, param: str) -> None:
    vocab = lm.config.vocab_size
    wrong = [t for t in ids if not 0 <= t < vocab]
    if wrong:
        raise bad(f"token id {wrong[0]} is outside the vocabulary of {vocab}", param)


def _fit(prompts: list[list[int]], given: int | None, default: int | None, lm: LoadedModel, param: str) -> int:
    """The new tokens a request may have: `given` if prompt and completion fit in the context (the
    last new token is never fed back), else a 400 with the numbers; by default `default` or the room left."""
    n_ctx = lm.config.n_ctx
    longest = max(len(p) for p in prompts)
    if longest > n_ctx:
        raise bad(
            f"This model's maximum context length is {n_ctx} tokens; the {param} is {longest} tokens",
            param,
            "context_length_exceeded",
        )
    room = n_ctx - longest + 1
    if given is None:
        return room if default is None else min(default, room)
    if given > room:
        raise bad(
            f"This model's maximum context length is {n_ctx} tokens. "
            f"However, you requested {longest + given - 1} tokens ({longest} in the {param}, "
            f"{given} for the completion, the last of which is not fed back); "
            f"ask for at most {room} new tokens",
            "max_tokens",
            "context_length_exceeded",
        )
    return given


def _knobs(body: dict, lm: LoadedModel, prompts: list[list[int]], max_tokens: int, eos_ids: tuple[int, ...]) -> Asked:
    n = _int(body, "n", 1, 1, MAX_CHOICES)
    if n * len(prompts) > MAX_CHOICES:
        raise bad(
            f"{n} choices of {len(prompts)} prompts are {n * len(prompts)} sequences; "
            f"at most {MAX_CHOICES} per request",
            "n",
        )
    temperature = _number(body, "temperature", 0.0, None)
    top_p = _number(body, "top_p", None, 1.0)
    if top_p is not None and top_p <= 0:
        raise bad(f"'top_p' must be in (0, 1], not {top_p}", "top_p")
    top_k = _int(body, "top_k", None, -1, None)
    top_k = 0 if top_k == -1 else top_k  # vLLM's spelling of "off"
    min_p = _number(body, "min_p", 0.0, 1.0)
    if min_p is not None and min_p >= 1:
        raise bad(f"'min_p' must be in [0, 1), not {min_p}", "min_p")
    penalty = _number(body, "repetition_penalty", None, None)
    if penalty is not None and penalty <= 0:
        raise bad(f"'repetition_penalty' must be positive, not {penalty}", "repetition_penalty")
    seed = _int(body, "seed", None, 0, 2**63 - MAX_CHOICES)
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else ([] if stop is None else stop)
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > MAX_STOPS:
        raise bad(f"'stop' must be a non-empty string or a list of up to {MAX_STOPS} of them", "stop")
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    include_usage = bool(options and options.get("include_usage"))
    params = [
        SamplingParams.merged(
            lm.generation,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            repetition_penalty=penalty,
            seed=None if seed is None else seed + i,
        )
        for i in range(n * len(prompts))
    ]
    if _bool(body, "ignore_eos", False):  # vLLM's extension: exactly max_tokens (benchmarks)
        eos_ids = ()
    texts = [lm.tokenizer.decode(p) for p in prompts]
    return Asked(prompts, texts, params, n, max_tokens, tuple(stop), tuple(eos_ids), stream, include_usage)


def _content(content, i: int) -> str:
    """A message's content: a string, or a list of text parts (OpenAI's newer shape)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise bad(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _kind(v) -> str:
    return type(v).__name__ if v is not None else "null"


def _bool(body: dict, key: str, default: bool) -> bool:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(f"'{key}' must be true or false, not {quoted(v)}", key)
    return v


def _int(body: dict, key: str, default: int | None, low: int | None, high: int | None) -> int | None:
    v = body.get(key)
    if v is None:
        return default
    huge = isinstance(v, Huge)
    if not huge and not _is_int(v):
        raise bad(f"'{key}' must be an integer, not {quoted(v)}", key)
    if huge or (low is not None and v < low) or (high is not None and v > high):
        span = f"at least {low}" if high is None else f"between {low} and {high}"
        raise bad(f"'{key}' must be {span}, not {quoted(v)}", key)
    return v


def _number(body: dict, key: str, low: float | None, high: float | None) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, Huge)):
        raise bad(f"'{key}' must be a number, not {quoted(v)}", key)
    value = (
        math.inf if isinstance(v, Huge) or (isinstance(v, int) and abs(v) > 1e300) else abs(float(v))
    )  # an int past any float: too large
    if not math.isfinite(value):
        raise bad(f"'{key}' must be a number of ordinary size, not {quoted(v)}", key)
    value = float(v)
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"at least {low}" if high is None else f"at most {high}" if low is None else f"between {low} and {high}"
        raise bad(f"'{key}' must be {span}, not {quoted(v)}", key)
    return value
