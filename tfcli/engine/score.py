"""How well a model predicts a text: the log-probability of each token given the ones before it.

Mean negative log-probability is the cross-entropy loss a model is trained on, in nats per token;
its exponential is the perplexity. Per token depends on the tokenizer; per character and per byte
of the text the scored tokens spell, the figures compare across tokenizers.

A text longer than the model's context goes through a sliding window (the method of the
transformers perplexity guide, and of llama.cpp's perplexity tool with its overlapping chunks):
a window of W tokens predicts the W tokens after each of them, and the window moves on by the
stride S. Every token is scored once, in the first window that predicts it, so that after the
first window each token sees at least W - S tokens before it. S = W gives non-overlapping
windows, the whole-split validation loss of tools/train.py (each window's first prediction then
sees one token). The first token of the text has nothing before it and is not scored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import PromptError, UsageError
from .model import Transformer
from .sites import Hooks

CHUNK = 256  # positions per forward pass inside a window: bounds the [T, V] logits


@dataclass(frozen=True)
class Score:
    ids: list[int]
    logprobs: np.ndarray  # [N] float64 log p(token i | tokens before it), NaN for the first token
    window: int
    stride: int

    @property
    def scored(self) -> int:
        return len(self.ids) - 1

    @property
    def nats(self) -> float:
        """Total negative log-likelihood of the scored tokens."""
        return float(-np.nansum(self.logprobs))

    @property
    def nats_per_token(self) -> float:
        return self.nats / self.scored

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nats_per_token))

    @property
    def windows(self) -> int:
        return len(window_starts(len(self.ids), self.window, self.stride))


def window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    """Where each window begins: 0, S, 2S ... until a window predicts the last token."""
    starts, b = [0], 0
    while b + window < n_tokens - 1:  # the window at b predicts tokens b+1 .. b+W
        b += stride
        starts.append(b)
    return starts


def check_window(model: Transformer, window: int | None, stride: int | None) -> tuple[int, int]:
    """The window and stride to use: the model's context and half of it unless given."""
    n_ctx = model.config.n_ctx
    window = n_ctx if window is None else window
    if not 1 <= window <= n_ctx:
        raise UsageError(f"{{window}} must be between 1 and the model's context of {n_ctx:,}, not {window}")
    stride = max(1, window // 2) if stride is None else stride
    if not 1 <= stride <= window:
        raise UsageError(f"{{stride}} must be between 1 and the window ({window:,}), not {stride}", "a stride equal to the window gives windows that do not overlap")
    return window, stride


def score(model: Transformer, ids: list[int], window: int | None = None, stride: int | None = None, hooks: Hooks | None = None) -> Score:
    """Log-probabilities of tokens ids[1:] under the model, windowed as the module docstring says
    (`hooks`: at the sites of every pass, e.g. an ablation)."""
    if len(ids) < 2:
        raise PromptError(f"the text is {len(ids)} token{'s' if len(ids) != 1 else ''}; scoring needs at least 2", "the first token has nothing before it to predict it")
    window, stride = check_window(model, window, stride)
    tokens = np.asarray(ids)
    n = len(tokens)
    logprobs = np.full(n, np.nan)  # [N]
    cache = model.new_cache(window)
    done = 0  # tokens 1..done are scored
    for b in range(0, n, stride):
        end = min(b + window, n - 1)  # the window's inputs are tokens b..end-1, predicting b+1..end
        first = done + 1  # the first target not scored yet
        if first > end:
            continue
        cache.reset()
        pos = b
        while pos < end:
            stop = min(pos + CHUNK, end)
            want = stop > first - 1  # does this chunk hold the predecessor of an unscored target?
            logits = model.forward(tokens[pos:stop], cache, all_logits=want, hooks=hooks)  # [T, V] or [1, V]
            if want:
                lo = max(pos, first - 1)  # predecessors lo..stop-1 predict targets lo+1..stop
                rows = logits[lo - pos :]  # [t, V] float32
                top = rows.max(axis=1, keepdims=True)  # [t, 1]
                e = np.exp(rows - top)  # [t, V] in (0, 1]: float32 exponentials, summed in float64
                lse = top[:, 0] + np.log(e.sum(axis=1, dtype=np.float64))  # [t] log-sum-exp, float64
                targets = tokens[lo + 1 : stop + 1]
                logprobs[lo + 1 : stop + 1] = rows[np.arange(len(targets)), targets] - lse
            pos = stop
        done = end
        if done >= n - 1:
            break
    return Score(list(ids), logprobs, window, stride)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """logits [T, V] -> log-probabilities [T, V] in float64, by the log-sum-exp `score` uses."""
    rows = logits.astype(np.float64)  # [T, V]
    top = rows.max(axis=1, keepdims=True)  # [T, 1]
    return rows - (top + np.log(np.exp(rows - top).sum(axis=1, keepdims=True)))  # [T, V]
