"""Chat data: a JSONL file of conversations, laid out by the model's chat template, the loss taken
on the assistant's turns only.

    {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}   one a line
    text   = template(messages)                          # the conversation as the model reads it
    ids    = tokenizer(text)                             # [n]
    scored = the tokens of the assistant's turns         # [n] bool: each turn's text and its end-of-turn mark
    y[i]   = ids[i+1] where scored[i+1], else IGNORED    # the system and user turns are context, never targets

A turn's span is found by rendering twice: the conversation up to the turn with the generation
prompt (what the model sees before it answers), and up to the turn with it included; the characters
between the two are the assistant's, and a token is scored when it starts inside them. That is what
transformers' `return_assistant_tokens_mask` gives, without the {% generation %} marks it needs in
the template, which most templates (SmolLM2's, Qwen's) do not have.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TfcliError, shown
from ..grad import IGNORED
from . import TrainError
from .data import EVAL_BATCHES

ROLES = ("system", "user", "assistant", "tool")


def is_chat(path: Path) -> bool:
    """Whether a training file is conversations (JSONL) rather than text."""
    return Path(path).suffix.lower() == ".jsonl"


def conversations(text: str, path: Path) -> list[list[dict[str, str]]]:
    """Each line of a JSONL file as a list of messages; TrainError naming the first line that is not
    a conversation (an object with "messages", each {"role", "content"}, one of them the assistant's)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"line {n:,} of {path} is not a conversation"
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise TrainError(f"{where}: not JSON ({shown(str(e), 60)})", HINT) from None
        messages = doc.get("messages") if isinstance(doc, dict) else doc
        if not isinstance(messages, list) or not messages:
            raise TrainError(f'{where}: it has no list of "messages"', HINT)
        for m in messages:
            if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
                raise TrainError(f"{where}: a message is {shown(json.dumps(m, ensure_ascii=False), 60)}", HINT)
        if not any(m["role"] == "assistant" for m in messages):
            raise TrainError(f"{where}: it has no assistant turn to learn from", HINT)
        out.append([{"role": m["role"], "content": m["content"]} for m in messages])
    if not out:
        raise TrainError(f"{path} holds no conversation", HINT)
    return out


HINT = 'give one {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}]} a line'


def assistant_spans(template, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The conversation's text and the character span [start, end) of each assistant turn in it."""
    full = template.render(messages, add_generation_prompt=False)
    spans = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = template.render(messages[:k], add_generation_prompt=True) if k else ""
        upto = template.render(messages[: k + 1], add_generation_prompt=False)
        if not (upto.startswith(before) and full.startswith(upto)):
            raise TrainError("the model's chat template lays out a turn differently once later turns follow it, "
                             "so tfcli cannot tell which tokens are the assistant's",
                             "train on conversations that end with their one assistant turn")  # fmt: skip
        spans.append((len(before), len(upto)))
    return full, spans


def encode(template, tokenizer, messages: list[dict[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """One conversation -> its token ids [n] and which of them are the assistant's [n] (bool)."""
    text, spans = assistant_spans(template, messages)
    enc = tokenizer._tok.encode(text, add_special_tokens=False)
    ids = np.array(enc.ids, dtype=np.int64)  # [n]
    starts = np.array([a for a, _ in enc.offsets], dtype=np.int64)  # [n] each token's first character
    scored = np.zeros(len(ids), dtype=bool)  # [n]
    for a, b in spans:
        scored |= (starts >= a) & (starts < b)
    return ids, scored


@dataclass
class ChatData:
    """Conversations as rows of seq_len + 1 tokens (cut, or padded after the end), the last
    --val-fraction of them held out. The same interface as data.TextData."""

    rows: np.ndarray  # [n, T+1] token ids
    scored: np.ndarray  # [n, T+1] bool: the assistant's tokens
    n_train: int  # the first n_train rows train, the rest validate
    lengths: np.ndarray  # [n] tokens of each conversation within the row

    @classmethod
    def of(cls, text: str, path: Path, template, tokenizer, seq_len: int, val_fraction: float, pad: int) -> ChatData:
        if template is None:
            raise TrainError(f"{path} is chat data, and the model has no chat template to lay it out",
                             "give --from a chat model (one with a chat template), or train on plain text")  # fmt: skip
        convs = conversations(text, path)
        rows = np.full((len(convs), seq_len + 1), pad, dtype=np.int64)  # [n, T+1]
        scored = np.zeros(rows.shape, dtype=bool)  # [n, T+1]
        lengths = np.zeros(len(convs), dtype=np.int64)
        for i, messages in enumerate(convs):
            try:
                ids, mask = encode(template, tokenizer, messages)
            except TfcliError as e:
                raise TrainError(f"conversation {i + 1:,} of {path}: {e.message}", e.hint) from None
            n = min(len(ids), seq_len + 1)
            rows[i, :n], scored[i, :n], lengths[i] = ids[:n], mask[:n], n
            if not scored[i, 1:].any():
                raise TrainError(f"conversation {i + 1:,} of {path}: its assistant turn starts after token "
                                 f"{seq_len:,}, past --seq-len", "give a larger --seq-len, or a shorter conversation")
        n_val = int(len(convs) * val_fraction)
        return cls(rows, scored, len(convs) - n_val, lengths)

    @property
    def train_tokens(self) -> int:
        return int(self.lengths[: self.n_train].sum())

    @property
    def val_tokens(self) -> int:
        return int(self.lengths[self.n_train :].sum())

    def pairs(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows `index` [B] -> inputs x [B, T] and targets y [B, T] (IGNORED where not the assistant's)."""
        rows, scored = self.rows[index], self.scored[index]  # [B, T+1]
        return rows[:, :-1], np.where(scored[:, 1:], rows[:, 1:], IGNORED)

    def batch(self, step: int, batch_size: int, order: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Step `step`'s conversations: drawn by a generator seeded by (seed, step), or in order."""
        if order == "sequential":
            index = (step * batch_size + np.arange(batch_size)) % self.n_train  # [B]
        else:
            index = np.random.default_rng([seed, step]).integers(0, self.n_train, batch_size)  # [B]
        return self.pairs(index)

    def val_batches(self, batch_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The held-out conversations, in batches (at most EVAL_BATCHES), the same at every evaluation."""
        held = np.arange(self.n_train, len(self.rows))
        return [self.pairs(held[i : i + batch_size]) for i in range(0, len(held), batch_size)][:EVAL_BATCHES]

    def prompt(self) -> list[int]:
        """A sample's prompt: a held-out conversation (or the first) up to its first assistant token."""
        i = self.n_train if self.n_train < len(self.rows) else 0
        first = int(np.flatnonzero(self.scored[i])[0])
        return [int(t) for t in self.rows[i, :first]]
