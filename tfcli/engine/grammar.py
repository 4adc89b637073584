"""Constrained decoding: a grammar says, at every step, which tokens may come next.

The sampler takes the softmax over the tokens the grammar allows and no others (sampling.py: the
mask comes after the repetition penalty, before the temperature and the filters), so every answer
is a sentence of the grammar: a JSON document that validates against a schema, a text a GBNF
grammar (llama.cpp's format) or a regular expression matches.

The grammar side is llguidance (https://github.com/guidance-ai/llguidance, which llama.cpp uses):
it compiles a JSON schema, a GBNF or Lark grammar or a regular expression against the tokenizer's
vocabulary and gives, per step, a bitmask over the vocabulary. Chosen by measurement against
xgrammar and outlines-core (benchmarks/README.md, "Constrained decoding": no dependencies, GBNF,
a mask in about 0.05 ms where a decode step takes 40); imported here alone, and only when a
constrained request runs.

    grammar = compile_grammar("json_schema", schema_text, tokenizer, vocab_size, eos_ids)
    c = grammar.start()          # one per sequence: where it is in the grammar
    allowed = c.allowed()        # [V] bool
    c.advance(token)             # the token drawn
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass

import numpy as np

from .errors import UsageError
from .tokenizer import Tokenizer

KINDS = ("json_schema", "json_object", "gbnf", "regex", "lark")
MAX_GRAMMAR_CHARS = 1_000_000  # a schema or grammar's text; llguidance's own limits bound what it builds from it
# Properties of one object of a schema. Optional ones may come in any subset: llguidance's build time
# grows past linear (measured on SmolLM2's vocabulary: 200 in 0.05 s, 10,000 in 117 s), and from about
# 500 its parser refuses the first key (its row limit of 2,000 items). Refused before the build.
MAX_PROPERTIES = 256
# Separators without free whitespace: a small model offered "any whitespace" may write newlines forever.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


# A number of a schema has at most 10 digits after the point (and no exponent): a small model offered any
# number may write 7.3333... until max_tokens (SmolLM2 and Gemma 3 did in benchmarks/schemas.py). llama.cpp's
# schema grammars bound the fraction too (16 digits); llguidance takes this bound as multipleOf 1e-10 (its
# decimal arithmetic refuses smaller steps). Every answer still validates against the schema as given.
NUMBER_STEP = 1e-10
VALUES = ("enum", "const", "default", "examples")  # keys whose values are data, not schemas
MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema


class GrammarError(UsageError):
    """A schema, grammar or expression the grammar library cannot apply (says what), or one no
    text can satisfy."""


@dataclass(frozen=True)
class Grammar:
    """A grammar compiled against a tokenizer's vocabulary; start() gives a sequence its matcher."""

    kind: str  # one of KINDS
    text: str  # as given (a schema's JSON text, a grammar, an expression)
    vocab_size: int  # V: the model's logits
    _matcher: object  # llguidance.LLMatcher at the start, copied for every sequence
    _library_vocab: int  # the library's vocabulary (V, or the tokenizer's if it is larger): the mask's bits

    def start(self) -> Constraint:
        return Constraint(self._matcher.deep_copy(), self.vocab_size, self._library_vocab)


class Constraint:
    """One sequence's place in a grammar: the tokens allowed next, and the tokens taken so far."""

    def __init__(self, matcher, vocab_size: int, library_vocab: int):
        self._m, self.vocab_size = matcher, vocab_size
        self._words = np.zeros((library_vocab + 31) // 32, dtype=np.int32)  # [ceil(V/32)]: one bit per token

    def allowed(self) -> np.ndarray:
        """[V] bool: the tokens the grammar allows next (the end-of-sequence tokens once it may end)."""
        m = self._m
        if m.is_error():
            raise GrammarError(f"the grammar stopped: {_first_line(m.get_error())}")
        m.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        bits = np.unpackbits(
            self._words.view(np.uint8), bitorder="little"
        )  # [32 * ceil(V/32)]: bit i of word j is token 32j+i
        return bits[: self.vocab_size].view(bool)

    def advance(self, token: int) -> None:
        """The token drawn (one the mask allowed) moves the grammar on."""
        if not self._m.consume_token(int(token)):
            raise GrammarError(f"the grammar refused token {token}: {_first_line(self._m.get_error())}")

    @property
    def finished(self) -> bool:
        """The grammar is complete and nothing may follow (an end-of-sequence token was taken, or
        none is known and the text is whole)."""
        return self._m.is_stopped()

    @property
    def accepting(self) -> bool:
        """What was generated so far is a whole sentence of the grammar."""
        return self._m.is_accepting()


def compile_grammar(
    kind: str, text: str, tokenizer: Tokenizer, vocab_size: int, eos_ids: tuple[int, ...], strict: bool = True
) -> Grammar:
    """`text` as `kind` (KINDS; json_object takes no text) against the tokenizer -> Grammar, or a
    GrammarError naming what the library could not apply. `strict`: a JSON schema keyword the
    library does not implement is an error (OpenAI's strict); otherwise it is ignored."""
    import llguidance as llg  # here alone: only a constrained request pays for it

    if kind not in KINDS:
        raise GrammarError(f"unknown grammar kind {kind!r}; one of {', '.join(KINDS)}")
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"the {_what(kind)} is {len(text):,} characters; at most {MAX_GRAMMAR_CHARS:,}")
    try:
        if kind in ("json_schema", "json_object"):
            schema = {"type": "object"} if kind == "json_object" else _schema(text)
            options = dict(JSON_OPTIONS, lenient=not strict)
            definition = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=options)
        elif kind == "regex":
            definition = llg.LLMatcher.grammar_from_regex(text)
        elif kind == "gbnf":
            definition = llg.grammar_from("gbnf", text)
        else:
            definition = llg.LLMatcher.grammar_from_lark(text)
    except (ValueError, TypeError, RecursionError) as e:
        raise GrammarError(f"the {_what(kind)} cannot be applied: {_first_line(str(e))}") from None
    tok = _lltokenizer(tokenizer, vocab_size, eos_ids)
    matcher = llg.LLMatcher(tok, definition, log_level=0)
    if matcher.is_error():
        raise GrammarError(f"the {_what(kind)} cannot be applied: {_first_line(matcher.get_error())}")
    grammar = Grammar(kind, text, vocab_size, matcher, tok.vocab_size)
    first = grammar.start().allowed()  # [V]
    first[[t for t in (*eos_ids, *tok.eos_tokens) if t < len(first)]] = False
    if not first.any():  # a $ref loop, `root ::= root`: nothing but the empty text (or nothing at all) matches
        raise GrammarError(
            f"the {_what(kind)} matches no text (no token can start one)",
            "check it for a rule or $ref that only refers to itself",
        )
    return grammar


def tag_rule(text: str, tokenizer: Tokenizer, vocab_size: int, eos_ids: tuple[int, ...]) -> str:
    """A tag of a Lark grammar (a tool call's `<tool_call>`) as the model may write it: the text, or
    the one special token the tokenizer reads it as (Qwen2.5's `<tool_call>` is id 151657), which
    llguidance keeps apart from text and names `<[151657]>`. The text alone is not enough: where the
    grammar forces the tag, the library tokenizes it into the special token, then refuses that token
    as no text (found on Qwen2.5-Coder: tool_choice "required" was a 400)."""
    quoted = json.dumps(text)
    ids = tokenizer.encode(text)
    if len(ids) != 1 or ids[0] >= vocab_size:
        return quoted
    if not _lltokenizer(tokenizer, vocab_size, eos_ids).is_special_token(ids[0]):
        return quoted
    return f"({quoted} | <[{ids[0]}]>)"


def _schema(text: str) -> dict:
    """The schema's text -> the schema as compiled (prepared_schema)."""
    try:
        schema = json.loads(text)
    except ValueError as e:
        raise GrammarError(f"the JSON schema is not JSON: {e}") from None
    if not isinstance(schema, dict):
        raise GrammarError(f"a JSON schema is an object, not {type(schema).__name__}")
    return prepared_schema(schema)


def prepared_schema(schema: dict) -> dict:
    """A JSON schema -> a copy as compiled: checked for size (MAX_PROPERTIES), each number's digits
    bounded (NUMBER_STEP); a GrammarError for an object of too many properties."""
    schema = json.loads(json.dumps(schema))  # a copy: the caller's schema is left as given
    todo = [schema]
    while todo:  # every object of the schema, without recursion
        node = todo.pop()
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict) and len(props) > MAX_PROPERTIES:
                raise GrammarError(
                    f"the JSON schema has an object of {len(props):,} properties; at most {MAX_PROPERTIES} per object",
                    "split it into nested objects",
                )
            kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
            if "number" in kinds and not {"multipleOf", "enum", "const"} & node.keys():
                node["multipleOf"] = NUMBER_STEP
            for k, v in node.items():
                if k in MAPS and isinstance(v, dict):
                    todo.extend(v.values())  # name -> schema: a property named "enum" is still a schema
                elif k not in VALUES:
                    todo.append(v)
        elif isinstance(node, list):
            todo.extend(node)
    return schema


def _what(kind: str) -> str:
    return {
        "json_schema": "JSON schema",
        "json_object": "JSON object grammar",
        "gbnf": "GBNF grammar",
        "regex": "regular expression",
        "lark": "Lark grammar",
    }[kind]


def _first_line(message: str) -> str:
    """The library's message on one line (its lines joined), at most 300 characters."""
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip()) or "no reason given"
    return line if len(line) <= 300 else line[:297] + "..."


# The library's view of a vocabulary takes a second or two to build (measured: 1.4 s for SmolLM2's
# 49,152 tokens): built once per tokenizer, vocabulary size and set of end tokens.
_built: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _lltokenizer(tokenizer: Tokenizer, vocab_size: int, eos_ids: tuple[int, ...]):
    import llguidance as llg

    key = (vocab_size, tuple(sorted(eos_ids)))
    per = _built.setdefault(tokenizer, {})
    if key not in per:
        text = tokenizer.path.read_text(
            encoding="utf-8"
        )  # the tokenizer.json tfcli reads (a GGUF's is written beside it)
        n_vocab = max(vocab_size, tokenizer.vocab_size)
        eos = list(eos_ids) or None
        try:
            per[key] = llg.LLTokenizer(text, n_vocab=n_vocab, eos_token=eos)
        except (ValueError, TypeError) as e:
            raise GrammarError(f"the grammar library cannot read this tokenizer: {_first_line(str(e))}") from None
    return per[key]
