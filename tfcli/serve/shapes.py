"""The OpenAI API's answers: a completion or chat completion built from the engine's events, whole
or as the chunks of a stream (https://platform.openai.com/docs/api-reference).

Completions carry the legacy log-probability shape ({tokens, token_logprobs, top_logprobs,
text_offset}, the echoed prompt's first token null, as lm-evaluation-harness reads it); chat
completions carry {content: [{token, logprob, bytes, top_logprobs}]}.
"""

from __future__ import annotations

import base64
import time
import uuid

import numpy as np

from tfcli.engine.tokenizer import Tokenizer

from .api import Asked, EmbeddingsAsked
from .events import Done, Echoed, Token, TokenLogprob


class Choice:
    def __init__(self, index: int, echo_text: str):
        self.index = index
        self.parts: list[str] = [echo_text] if echo_text else []
        self.tokens: list[int] = []
        self.logprobs: list[TokenLogprob | None] = []
        self.finish_reason: str | None = None
        self.completion_tokens = 0


class Shape:
    """One request's answer as its events arrive; `chunks` gives the stream, `whole` the body."""

    object = ""
    prefix = ""

    def __init__(self, asked: Asked, tok: Tokenizer, model: str):
        self.asked, self.tok, self.model = asked, tok, model
        self.id = f"{self.prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.choices = [Choice(i, "") for i in range(len(asked.prompts) * asked.n)]
        self._texts: dict[int, str] = {}

    def text(self, token: int) -> str:
        if token not in self._texts:
            self._texts[token] = self.tok.token_text(token)
        return self._texts[token]

    def add(self, ev) -> list[dict]:
        """Take an event; return the stream chunks it makes."""
        if isinstance(ev, Token):
            c = self.choices[ev.choice]
            c.parts.append(ev.text)
            if ev.token >= 0:
                c.tokens.append(ev.token)
                c.logprobs.append(ev.logprob)
            return [
                self.chunk(c, ev.text, [ev.token] if ev.token >= 0 else [], [ev.logprob] if ev.logprob else [], None)
            ]
        if isinstance(ev, Done):
            c = self.choices[ev.choice]
            c.finish_reason, c.completion_tokens = ev.finish_reason, ev.completion_tokens
            return [self.chunk(c, "", [], [], ev.finish_reason)]
        if isinstance(ev, Echoed):
            return self.echoed(ev)
        return []

    def echoed(self, ev: Echoed) -> list[dict]:
        return []

    job = None  # the engine's Job, once submitted: how many prompt tokens the prompt cache gave

    def usage(self) -> dict:
        prompt = sum(len(p) for p in self.asked.prompts)
        done = sum(c.completion_tokens for c in self.choices)
        usage = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
        if self.job is not None and self.job.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.job.cached_tokens}
        return usage

    def envelope(self, choices: list[dict], usage: bool) -> dict:
        body = {"id": self.id, "object": self.object, "created": self.created, "model": self.model, "choices": choices}
        if usage:
            body["usage"] = self.usage()
        return body

    def usage_chunk(self) -> dict:
        return self.envelope([], True)

    def chunk(self, c: Choice, text: str, tokens: list[int], logprobs: list, finish: str | None) -> dict:
        raise NotImplementedError

    def whole(self) -> dict:
        raise NotImplementedError


class CompletionShape(Shape):
    object = "text_completion"
    prefix = "cmpl"

    def __init__(self, asked: Asked, tok: Tokenizer, model: str):
        super().__init__(asked, tok, model)
        self.echo_tokens: dict[int, tuple[list[int], list]] = {}  # per prompt: its tokens and their log-probabilities
        self.offsets = [0 if asked.echo else len(asked.prompt_texts[i // asked.n]) for i in range(len(self.choices))]
        if asked.echo:
            for c in self.choices:
                c.parts.insert(0, asked.prompt_texts[c.index // asked.n])

    def first_chunks(self) -> list[dict]:
        """Echo without log-probabilities: the prompt's text first (with them, it comes with Echoed)."""
        if not self.asked.echo or self.asked.logprobs is not None:
            return []
        return [self.chunk(c, c.parts[0], [], [], None) for c in self.choices]

    def echoed(self, ev: Echoed) -> list[dict]:
        self.echo_tokens[ev.prompt] = (ev.tokens, ev.logprobs)
        chunks = []
        for c in self.choices:
            if c.index // self.asked.n == ev.prompt:
                chunks.append(self.chunk(c, c.parts[0], ev.tokens, ev.logprobs, None))
        return chunks

    def logprobs(self, tokens: list[int], logprobs: list, start: int) -> dict:
        texts = [self.text(t) for t in tokens]
        offsets, at = [], start
        for t in texts:
            offsets.append(at)
            at += len(t)
        return {
            "tokens": texts,
            "token_logprobs": [None if lp is None else lp.logprob for lp in logprobs],
            "top_logprobs": [None if lp is None else {self.text(i): v for i, v in lp.top} for lp in logprobs],
            "text_offset": offsets,
        }

    def chunk(self, c: Choice, text: str, tokens: list[int], logprobs: list, finish: str | None) -> dict:
        lp = None
        if self.asked.logprobs is not None and tokens:
            lp = self.logprobs(tokens, logprobs, self.offsets[c.index])
            self.offsets[c.index] += sum(len(t) for t in lp["tokens"])
        return self.envelope([{"index": c.index, "text": text, "logprobs": lp, "finish_reason": finish}], False)

    def whole(self) -> dict:
        choices = []
        for c in self.choices:
            lp = None
            if self.asked.logprobs is not None:
                tokens, logprobs = self.echo_tokens.get(c.index // self.asked.n, ([], []))
                start = 0 if self.asked.echo else len(self.asked.prompt_texts[c.index // self.asked.n])
                lp = self.logprobs(tokens + c.tokens, logprobs + c.logprobs, start)
            choices.append(
                {
                    "index": c.index,
                    "text": "".join(c.parts),
                    "logprobs": lp,
                    "finish_reason": c.finish_reason or "length",
                }
            )
        return self.envelope(choices, True)


class ChatShape(Shape):
    object = "chat.completion.chunk"
    prefix = "chatcmpl"

    def first_chunks(self) -> list[dict]:
        return [
            self.envelope(
                [
                    {
                        "index": c.index,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                False,
            )
            for c in self.choices
        ]

    def entry(self, token: int, lp: TokenLogprob) -> dict:
        text = self.text(token)
        return {
            "token": text,
            "logprob": lp.logprob,
            "bytes": list(text.encode("utf-8")),
            "top_logprobs": [
                {"token": self.text(i), "logprob": v, "bytes": list(self.text(i).encode("utf-8"))} for i, v in lp.top
            ],
        }

    def chunk(self, c: Choice, text: str, tokens: list[int], logprobs: list, finish: str | None) -> dict:
        lp = None
        if self.asked.logprobs is not None and tokens:
            lp = {"content": [self.entry(t, p) for t, p in zip(tokens, logprobs)]}
        delta = {"content": text} if text or tokens else {}
        if self.asked.tools is not None:  # the text may be a tool call: said at the end (called)
            delta = {}
        return self.envelope([{"index": c.index, "delta": delta, "logprobs": lp, "finish_reason": finish}], False)

    def add(self, ev) -> list[dict]:
        if self.asked.tools is None or not isinstance(ev, Done):
            return super().add(ev)
        c = self.choices[ev.choice]
        c.finish_reason, c.completion_tokens = ev.finish_reason, ev.completion_tokens
        return self.called(c)

    def called(self, c: Choice) -> list[dict]:
        """A finished choice's text read for tool calls, as stream chunks: its content, then each
        call (its id and name, then its arguments), then the finish reason ("tool_calls")."""
        content, calls = self.asked.tools.parse("".join(c.parts))
        finish = "tool_calls" if calls else c.finish_reason
        chunks = (
            [
                self.envelope(
                    [{"index": c.index, "delta": {"content": content}, "logprobs": None, "finish_reason": None}], False
                )
            ]
            if content
            else []
        )
        for k, call in enumerate(calls):
            head = {
                "index": k,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            args = {"index": k, "function": {"arguments": call["function"]["arguments"]}}
            for part in (head, args):
                chunks.append(
                    self.envelope(
                        [{"index": c.index, "delta": {"tool_calls": [part]}, "logprobs": None, "finish_reason": None}],
                        False,
                    )
                )
        chunks.append(
            self.envelope([{"index": c.index, "delta": {}, "logprobs": None, "finish_reason": finish}], False)
        )
        return chunks

    def whole(self) -> dict:
        choices = []
        for c in self.choices:
            lp = None
            if self.asked.logprobs is not None:
                lp = {"content": [self.entry(t, p) for t, p in zip(c.tokens, c.logprobs)]}
            message = {"role": "assistant", "content": "".join(c.parts)}
            finish = c.finish_reason or "length"
            if self.asked.tools is not None:
                content, calls = self.asked.tools.parse(message["content"])
                if calls:
                    message, finish = {"role": "assistant", "content": content, "tool_calls": calls}, "tool_calls"
            choices.append({"index": c.index, "message": message, "logprobs": lp, "finish_reason": finish})
        body = self.envelope(choices, True)
        body["object"] = "chat.completion"
        return body


def embeddings_body(asked: EmbeddingsAsked, vectors: list[np.ndarray], model: str) -> dict:
    """/v1/embeddings' answer: each vector as a list of floats, or with base64 its float32 bytes
    (little-endian), which the openai client decodes with numpy's frombuffer."""
    data = []
    for i, v in enumerate(vectors):
        if asked.encoding_format == "base64":
            value = base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
        else:
            value = [float(x) for x in np.asarray(v, dtype=np.float32)]
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = sum(len(ids) for ids in asked.inputs)
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
