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

Chunks (`chunks=C`) score as llama.cpp's `llama-perplexity -c C` does, so that the two perplexities
compare: the text is cut into whole chunks of C tokens (a shorter tail is left out), each run on its
own from an empty cache, its first token replaced by the BOS when the tokenizer adds one, and only
the second half of each chunk scored (the predictions from positions C/2 to C-2, C - 1 - C/2
tokens a chunk), so that every scored token sees at least C/2 tokens before it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import PromptError, UsageError
from .executor import PLAIN, Plain
from .kvcache import Sequences
from .model import Transformer
from .sites import Hooks

CHUNK = 256  # positions per forward pass inside a window: bounds the [T, V] logits


@dataclass(frozen=True)
class Score:
    ids: list[int]
    logprobs: np.ndarray  # [N] float64 log p(token i | tokens before it), NaN for the first token
    window: int
    stride: int
    chunks: int = 0  # C when scored in llama-perplexity's chunks of C tokens, else 0

    @property
    def scored(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.logprobs)))

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
        if self.chunks:
            return len(self.ids) // self.chunks
        return len(window_starts(len(self.ids), self.window, self.stride))


def window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    """Where each window begins: 0, S, 2S ... until a window predicts the last token."""
    return [b for b, _, _ in plan_windows(n_tokens, window, stride)]


def check_window(model: Transformer, window: int | None, stride: int | None) -> tuple[int, int]:
    """The window and stride to use: the model's context and half of it unless given."""
    n_ctx = model.config.n_ctx
    window = n_ctx if window is None else window
    if not 1 <= window <= n_ctx:
        raise UsageError(f"{{window}} must be between 1 and the model's context of {n_ctx:,}, not {window}")
    stride = max(1, window // 2) if stride is None else stride
    if not 1 <= stride <= window:
        raise UsageError(
            f"{{stride}} must be between 1 and the window ({window:,}), not {stride}",
            "a stride equal to the window gives windows that do not overlap",
        )
    return window, stride


def score(
    model: Transformer,
    ids: list[int],
    window: int | None = None,
    stride: int | None = None,
    hooks: Hooks | None = None,
    run: Plain = PLAIN,
    progress: Callable[[int, int], None] | None = None,
    chunks: int | None = None,
    bos: int | None = None,
) -> Score:
    """Log-probabilities of tokens ids[1:] under the model, windowed as the module docstring says
    (`hooks`: at the sites of every pass, e.g. an ablation; `run`: the passes' executor;
    `progress(done, total)`: called with the tokens scored so far after each pass, for the caller to show).
    With `chunks`, llama-perplexity's chunks instead (`bos`: the token each chunk starts with, if any)."""
    if chunks is not None:
        return score_chunks(model, ids, chunks, bos, hooks, run, progress)
    if len(ids) < 2:
        raise PromptError(
            f"the text is {len(ids)} token{'s' if len(ids) != 1 else ''}; scoring needs at least 2",
            "the first token has nothing before it to predict it",
        )
    window, stride = check_window(model, window, stride)
    tokens = np.asarray(ids)
    logprobs = np.full(len(tokens), np.nan)  # [N]
    plan = plan_windows(len(tokens), window, stride)
    together = (
        1
        if hooks is not None
        else max(1, min(MAX_WINDOWS, BATCH_ROWS // window, BATCH_LOGITS // (window * model.config.vocab_size)))
    )
    full = (
        [w for w in plan if w[1] - w[0] == window] if together > 1 else []
    )  # whole windows: several go through one pass
    total, done = len(tokens) - 1, 0
    for i in range(0, len(full), together):
        group = full[i : i + together]
        _score_together(model, tokens, group, logprobs, run)
        done += sum(end + 1 - first for _, end, first in group)
        if progress is not None:
            progress(done, total)
    cache = model.new_cache(window, fast=run is not PLAIN)
    for b, end, first in plan:
        if full and end - b == window:
            continue  # scored together above
        _score_window(model, tokens, b, end, first, cache, hooks, logprobs, run)
        done += end + 1 - first
        if progress is not None:
            progress(done, total)
    return Score(list(ids), logprobs, window, stride)


def check_chunks(model: Transformer, chunks: int, n_tokens: int | None = None) -> None:
    """A chunk size llama-perplexity would take: 4 tokens or more (half of it scored), within the
    context, and a text of at least one whole chunk."""
    n_ctx = model.config.n_ctx
    if not 4 <= chunks <= n_ctx:
        raise UsageError(f"a chunk must be between 4 tokens and the model's context of {n_ctx:,}, not {chunks}",
                         "llama-perplexity's default is 512")
    if n_tokens is not None and n_tokens < chunks:
        raise PromptError(f"the text is {n_tokens:,} tokens, less than one chunk of {chunks:,}",
                          "give a longer text or smaller chunks")


def score_chunks(
    model: Transformer, ids: list[int], chunks: int, bos: int | None = None, hooks: Hooks | None = None,
    run: Plain = PLAIN, progress: Callable[[int, int], None] | None = None,
) -> Score:
    """llama-perplexity's way (perplexity.cpp, `perplexity`): whole chunks of `chunks` tokens, each
    from an empty cache, its first input replaced by `bos` if given; the tokens of the second half
    scored (targets C/2+1 .. C-1 of each chunk). Tokens after the last whole chunk are not scored."""
    check_chunks(model, chunks, len(ids))
    tokens = np.asarray(ids)  # [N] the targets
    inputs = tokens.copy()  # [N] what each chunk runs: its first token the BOS
    n = len(ids) // chunks
    if bos is not None:
        inputs[np.arange(n) * chunks] = bos
    logprobs = np.full(len(tokens), np.nan)  # [N]
    cache = model.new_cache(chunks, fast=run is not PLAIN)
    half = chunks // 2
    for i in range(n):
        b = i * chunks
        # inputs b .. b+C-2 predict b+1 .. b+C-1, of which b+C/2+1 .. b+C-1 are kept (the last input's
        # logits would predict the next chunk's first token: llama-perplexity leaves it out too)
        _score_window(model, inputs, b, b + chunks - 1, b + half + 1, cache, hooks, logprobs, run, targets=tokens)
        if progress is not None:
            progress((i + 1) * (chunks - 1 - half), n * (chunks - 1 - half))
    return Score(list(ids), logprobs, chunks, chunks, chunks)


MAX_WINDOWS = 32  # whole windows per pass, at most
BATCH_ROWS = 2048  # ... and at most this many positions in it
BATCH_LOGITS = 1 << 24  # ... and at most this many logits ([rows, V] float32: 64 MB)


def plan_windows(n: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """The windows that score tokens 1..n-1: (b, end, first): inputs tokens b..end-1 predict
    b+1..end, of which first..end are scored here (the ones no earlier window scored)."""
    plan, done = [], 0  # tokens 1..done are scored
    for b in range(0, n, stride):
        end = min(b + window, n - 1)
        if done + 1 <= end:
            plan.append((b, end, done + 1))
            done = end
        if done >= n - 1:
            break
    return plan


LSE_ROWS = 32  # rows of logits per block of log_sum_exp: a block's exponentials stay in cache


def log_sum_exp(rows: np.ndarray) -> np.ndarray:
    """logits [..., V] (float32) -> log sum exp over the last axis [...], float64.

    A block of rows at a time, its exponentials written over one buffer: the same numbers as one
    whole-array expression, in two thirds of the time on a pass of 2,048 rows (the tang model's
    9,275 logits a row: 76 MB that would go through memory three times)."""
    flat = rows.reshape(-1, rows.shape[-1])  # [N, V]
    lse = np.empty(len(flat))  # [N] float64
    buf = np.empty((min(LSE_ROWS, len(flat)), flat.shape[1]), dtype=flat.dtype)  # [block, V]
    for i in range(0, len(flat), LSE_ROWS):
        block = flat[i : i + LSE_ROWS]  # [b, V]
        e = buf[: len(block)]
        top = block.max(axis=-1, keepdims=True)  # [b, 1]
        np.exp(np.subtract(block, top, out=e), out=e)  # in (0, 1]: float32 exponentials, summed in float64
        lse[i : i + len(block)] = top[:, 0] + np.log(e.sum(axis=-1, dtype=np.float64))
    return lse.reshape(rows.shape[:-1])  # [...]


def _logprobs(rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """rows [t, V] float32 logits, targets [t] -> log p(target) [t] in float64."""
    return rows[np.arange(len(targets)), targets] - log_sum_exp(rows)


def _score_together(
    model: Transformer, tokens: np.ndarray, group: list[tuple[int, int, int]], logprobs: np.ndarray, run: Plain
) -> None:
    """Whole windows as B independent sequences of one pass (kvcache.Sequences): every weight is
    read once for all of them, and the products have B times the rows."""
    window = group[0][1] - group[0][0]
    x = np.concatenate([tokens[b:end] for b, end, _ in group])  # [B*W]
    logits = model.forward(x, Sequences(len(group), window), all_logits=True, run=run)  # [B*W, V]
    for j, (b, end, first) in enumerate(group):
        rows = logits[j * window + (first - 1 - b) : (j + 1) * window]  # predecessors first-1..end-1
        logprobs[first : end + 1] = _logprobs(rows, tokens[first : end + 1])


def _score_window(
    model: Transformer,
    tokens: np.ndarray,
    b: int,
    end: int,
    first: int,
    cache,
    hooks: Hooks | None,
    logprobs: np.ndarray,
    run: Plain,
    targets: np.ndarray | None = None,
) -> None:
    """One window through the cache, CHUNK positions per pass (`targets`: the tokens predicted, if
    not the inputs themselves)."""
    targets = tokens if targets is None else targets
    cache.reset()
    pos = b
    while pos < end:
        stop = min(pos + CHUNK, end)
        want = stop > first - 1  # does this chunk hold the predecessor of an unscored target?
        logits = model.forward(tokens[pos:stop], cache, all_logits=want, hooks=hooks, run=run)  # [T, V] or [1, V]
        if want:
            lo = max(pos, first - 1)  # predecessors lo..stop-1 predict targets lo+1..stop
            logprobs[lo + 1 : stop + 1] = _logprobs(logits[lo - pos :], targets[lo + 1 : stop + 1])
        pos = stop


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """logits [..., V] -> log-probabilities [..., V] in float64, by the log-sum-exp `score` uses."""
    return logits.astype(np.float64) - log_sum_exp(logits)[..., None]  # [..., V]
