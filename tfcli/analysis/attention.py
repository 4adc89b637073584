"""Attention taken apart: masks, a worked example with hand-set numbers, per-head summaries.

Pure NumPy, no I/O. The real attention weights come from the engine's forward pass, which records
them when asked (`attention_weights` below, through engine.inspect.Recorder); the rest of this module
builds masks, applies softmax the way the engine does (ops.softmax), and measures patterns.
Axes (STYLE.md): T query tokens, S key positions; for a whole text run from an empty cache S = T.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from tfcli.engine.config import ModelConfig
from tfcli.engine.errors import UsageError
from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.ops import softmax

# --- a model's weights ------------------------------------------------------------------------


def attention_weights(model, ids: list[int], layers: list[int], run: Plain = PLAIN) -> np.ndarray:
    """Run ids through the model from an empty cache (`run`: the pass's executor) -> weights
    [len(layers), H, T, T].

    Refuses (ResourceError) before the pass when the weights kept for drawing would take more than
    half the memory available.
    """
    from tfcli.engine.errors import ResourceError
    from tfcli.engine.inspect import Recorder
    from tfcli import numbers
    from tfcli.engine.memory import available_bytes

    need = len(layers) * model.config.n_head * len(ids) ** 2 * 4  # float32, kept until drawn
    avail = available_bytes()
    if avail is not None and need > avail // 2:
        raise ResourceError(
            f"the attention weights of {len(layers)} block(s) for {len(ids)} tokens would need {numbers.size(need)} "
            f"of the {numbers.size(avail)} of memory available",
            "pick one --block, or use a shorter text",
        )
    rec = Recorder(attention=True, layers=layers)  # only these layers: all of a deep model could take gigabytes
    model.forward(np.asarray(ids), model.new_cache(len(ids)), hooks=rec, run=run)
    return np.stack([rec.attn[i] for i in layers])  # [len(layers), H, T, T]


# --- many heads -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadSplit:
    """How one attention layer cuts the model's width into heads, and which heads share keys and values.

    Vaswani et al. 2017, section 3.2.2: D is projected to H queries, keys and values of Dh numbers
    each; every head attends on its own, the H context vectors are concatenated and W_O maps them
    back to D. With grouped-query attention (Ainslie et al. 2023) only Hkv < H heads of keys and
    values exist and each serves H / Hkv query heads; Hkv = 1 is multi-query attention. The sizes
    are the model's own (config: D, H, Hkv, Dh, d_attn = H x Dh, d_kv = Hkv x Dh, q_per_kv = G).
    """

    name: str  # the model, for the title
    # an engine.config.ModelConfig: a config.json, or a preset of `tfcli params` (no weights needed)
    config: ModelConfig

    def kv_head_of(self, h: int) -> int:
        """The key/value head that query head h reads: h // G (transformers' repeat_kv, engine/model.py)."""
        return h // self.config.q_per_kv

    def groups(self) -> list[range]:
        """For each key/value head, the query heads that share it."""
        g = self.config.q_per_kv
        return [range(k * g, (k + 1) * g) for k in range(self.config.n_kv_head)]

    def weights_per_layer(self) -> dict[str, int]:
        """Parameters of the four matrices of one layer (no biases): W_Q, W_K, W_V, W_O."""
        c = self.config
        return {"W_Q": c.d_model * c.d_attn, "W_K": c.d_model * c.d_kv, "W_V": c.d_model * c.d_kv,
                "W_O": c.d_attn * c.d_model}


# --- masks ------------------------------------------------------------------------------------
# A mask is a boolean [T, T] array, True where query t may look at key s. Everything False is set to
# -inf before softmax, so its weight is exactly 0 and each row still sums to 1.


def causal_mask(t_len: int) -> np.ndarray:
    """[T, T]: each token sees itself and every token before it (GPT)."""
    return np.tril(np.ones((t_len, t_len), dtype=bool))


def sliding_mask(t_len: int, window: int) -> np.ndarray:
    """[T, T]: each token sees itself and the window-1 tokens before it (Longformer, Mistral).

    Cost grows as T*W instead of T^2/2; information still travels further than W, one window per
    layer, because each layer's output already mixes the window before it.
    """
    t = np.arange(t_len)
    return causal_mask(t_len) & (t[:, None] - t[None, :] < window)


def banded_mask(t_len: int, block: int) -> np.ndarray:
    """[T, T]: tokens are cut into blocks of `block`; each sees the earlier tokens of its own block.

    The local pattern of the Sparse Transformer (Child et al. 2019, "fixed" attention A(1)), which
    GPT-3 alternates with dense causal layers (Brown et al. 2020, section 2.1).
    """
    t = np.arange(t_len)
    return causal_mask(t_len) & (t[:, None] // block == t[None, :] // block)


@dataclass(frozen=True)
class Pattern:
    """A mask family and its width: causal, sliding:W or banded:W."""

    kind: str
    width: int | None = None

    @property
    def name(self) -> str:
        return self.kind if self.width is None else f"{self.kind}:{self.width}"

    def mask(self, t_len: int) -> np.ndarray:  # [T, T] bool
        if self.kind == "sliding":
            return sliding_mask(t_len, self.width)
        if self.kind == "banded":
            return banded_mask(t_len, self.width)
        return causal_mask(t_len)

    def kept(self, t_len: int) -> int:
        """How many of the T x T scores the mask keeps, counted without building it (T may be large)."""
        tri = lambda n: n * (n + 1) // 2  # noqa: E731  a causal block of n tokens
        if self.kind == "sliding":
            w = min(self.width, t_len)
            return tri(w) + (t_len - w) * w  # rows grow to W, then stay at W
        if self.kind == "banded":
            full, rest = divmod(t_len, self.width)
            return full * tri(self.width) + tri(rest)
        return tri(t_len)

    def describe_zh(self) -> str:
        if self.kind == "sliding":
            before = {1: "只看它自己", 2: "看它自己和它前面的一个词元"}.get(
                self.width, f"看它自己和它前面的 {self.width - 1} 个词元")
            return f"每个词元{before}，从不看未来"
        if self.kind == "banded":
            return f"词元被切成每块 {self.width} 个；每个词元看它自己和它所在块中更早的词元"
        return "每个词元看它自己和它之前的每一个词元，从不看未来"

    def describe(self) -> str:
        if self.kind == "sliding":
            before = {1: "only itself", 2: "itself and the token before it"}.get(
                self.width, f"itself and the {self.width - 1} tokens before it")
            return f"each token sees {before}, never the future"
        if self.kind == "banded":
            return (f"tokens are cut into blocks of {self.width}; "
                    "each sees itself and the earlier tokens of its own block")
        return "each token sees itself and every token before it, never the future"


_PATTERN = re.compile(r"^(causal|sliding:(\d+)|banded:(\d+))$")


def parse_pattern(spec: str) -> Pattern:
    m = _PATTERN.match(spec.strip().lower())
    if not m:
        raise UsageError(f"unknown --pattern {spec!r}", "use causal, sliding:W or banded:W, e.g. sliding:3")
    if m.group(1) == "causal":
        return Pattern("causal")
    kind, width = ("sliding", m.group(2)) if m.group(2) else ("banded", m.group(3))
    if int(width) < 1:
        raise UsageError(f"--pattern {spec}: the width must be at least 1")
    return Pattern(kind, int(width))


def apply_mask(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """[..., T, S] scores -> the same with -inf wherever the mask forbids (the step before softmax)."""
    return np.where(allowed, scores, np.float32(-np.inf)).astype(np.float32)


def masked_softmax(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """[..., T, S] -> attention weights: masked entries exactly 0, every row summing to 1."""
    return softmax(apply_mask(scores, allowed))


# --- a worked example -------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkedExample:
    """One attention computation small enough to follow by hand.

    In a model, score s_ti = q_t . k_i / sqrt(d_k) and the averaged vectors are the values
    v_i = x_i W_V; here both are set by hand so that the numbers mean something.
    """

    tokens: list[str]
    scores: np.ndarray  # [T, T] before the mask: the future has scores too, the mask removes them
    values: np.ndarray  # [T, Dv] the vectors that get averaged
    value_dims: list[str]  # what each of the Dv numbers stands for
    row: int  # the query followed step by step

    @property
    def allowed(self) -> np.ndarray:  # [T, T]
        return causal_mask(len(self.tokens))

    @property
    def masked(self) -> np.ndarray:  # [T, T] with -inf above the diagonal
        return apply_mask(self.scores, self.allowed)

    @property
    def weights(self) -> np.ndarray:  # [T, T] rows summing to 1
        return softmax(self.masked)

    def exps(self, t: int) -> np.ndarray:
        """[T]: e^(s - max) for row t, the numerators of its softmax (0 where masked)."""
        row = self.masked[t]
        return np.exp(row - row.max())

    def context(self, t: int) -> np.ndarray:
        """[Dv]: c_t = sum_i w_ti x_i, the weighted average that attention hands to the next layer."""
        return self.weights[t] @ self.values  # [T] @ [T, Dv] -> [Dv]

    def unmasked_weights(self, t: int) -> np.ndarray:
        """[T]: what softmax would give row t without the mask (the future leaking in)."""
        return softmax(self.scores[t])


def worked_example() -> WorkedExample:
    """'the cat sat on the mat', followed at 'sat': mostly about the cat, and blind to the mat."""
    scores = np.array(
        [
            [1.0, 0.5, 0.2, 0.1, 0.3, 0.4],
            [0.8, 2.0, 1.0, 0.1, 0.2, 0.5],
            [0.2, 3.0, 1.0, 0.5, 0.1, 2.5],  # 'sat' asks who sat: 'cat' scores high, so would 'mat'
            [0.1, 0.5, 2.0, 1.0, 0.2, 1.5],
            [0.5, 0.2, 0.3, 1.5, 1.0, 0.8],
            [0.3, 1.0, 1.5, 2.0, 1.0, 1.2],
        ],
        dtype=np.float32,
    )
    values = np.array(
        [
            [0.1, 0.0, 0.0],  # the
            [1.0, 0.2, 0.0],  # cat
            [0.1, 1.0, 0.1],  # sat
            [0.0, 0.3, 0.6],  # on
            [0.1, 0.0, 0.0],  # the
            [0.2, 0.0, 1.0],  # mat
        ],
        dtype=np.float32,
    )
    return WorkedExample(["the", "cat", "sat", "on", "the", "mat"], scores, values,
                         ["animal", "action", "place"], row=2)


# --- summaries --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadSummary:
    """What one head's pattern [T, T] mostly does.

    top_key is taken over queries 1..T-1 (query 0 can only look at itself, which says nothing about
    the head). to_first / to_previous / to_self are taken over queries 2..T-1, where the first token,
    the previous one and the token itself are three different keys, so that the three shares never
    add up past 100% (for query 1 the previous token IS the first); with two tokens, query 1 alone,
    to_previous NaN; with one token, all three NaN.
    """

    layer: int
    head: int
    top_key: int  # the key position that receives the largest share of the attention of queries 1..T-1
    top_share: float  # that share: its column sum over those queries / (T - 1)
    to_first: float
    to_previous: float
    to_self: float
    entropy: float  # mean bits per row: 0 = always one token
    uniform_entropy: float  # the same for rows spread evenly over their past: mean of log2(t+1)

    @property
    def kind(self) -> str:
        """A rough name for the pattern: where at least half the weight goes, else how spread it is."""
        for name, value in (("first token", self.to_first), ("previous token", self.to_previous),
                            ("itself", self.to_self)):
            if value >= 0.5:
                return name
        if math.isnan(self.to_first):
            return "-"
        return "spread out" if self.entropy >= 0.7 * self.uniform_entropy else "mixed"


def summarize(weights: np.ndarray, layer: int, head: int) -> HeadSummary:
    """weights [T, T] of one head (rows summing to 1) -> HeadSummary."""
    t_len = weights.shape[0]
    # Query 0 can only look at itself: counting it would hand token 0 a full row in every head.
    looking = weights[1:] if t_len > 1 else weights  # [T-1, T]
    received = looking.sum(axis=0)  # [T] attention each key receives, summed over those queries
    top = int(received.argmax())
    if t_len > 2:
        rows = np.arange(2, t_len)
        first = float(weights[2:, 0].mean())
        previous = float(weights[rows, rows - 1].mean())
        itself = float(weights[rows, rows].mean())
    elif t_len == 2:
        first, previous, itself = float(weights[1, 0]), float("nan"), float(weights[1, 1])
    else:
        first = previous = itself = float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = -np.where(weights > 0, weights * np.log2(weights), 0.0).sum(axis=1)  # [T]
    uniform = float(np.log2(np.arange(1, t_len + 1)).mean())
    return HeadSummary(layer, head, top, float(received[top] / len(looking)), first, previous, itself,
                       float(bits.mean()), uniform)


# --- fitting a pattern into fewer cells -------------------------------------------------------


def fit(weights: np.ndarray, allowed: np.ndarray, n: int, how: str) -> tuple[np.ndarray, np.ndarray, list[range]]:
    """Shrink [..., T, T] weights and their [T, T] mask to at most n x n for display.

    how = "last" keeps the last n tokens (rows then miss the weight they put on earlier tokens),
    "first" the first n (complete rows: a causal row never looks past itself), "pool" averages
    blocks of queries and sums blocks of keys, so each shown row still sums to 1.
    Returns (weights [..., n, n], allowed [n, n], the token positions behind each shown row/column).
    """
    t_len = weights.shape[-1]
    if t_len <= n:
        return weights, allowed, [range(i, i + 1) for i in range(t_len)]
    if how == "first":
        return weights[..., :n, :n], allowed[:n, :n], [range(i, i + 1) for i in range(n)]
    if how == "last":
        return weights[..., -n:, -n:], allowed[-n:, -n:], [range(i, i + 1) for i in range(t_len - n, t_len)]
    edges = np.linspace(0, t_len, n + 1).round().astype(int)  # n blocks of nearly equal size
    starts = edges[:-1]
    sizes = np.diff(edges)  # [n]
    keys = np.add.reduceat(weights, starts, axis=-1)  # [..., T, n] attention summed over each key block
    pooled = np.add.reduceat(keys, starts, axis=-2) / sizes[:, None]  # [..., n, n] averaged over each query block
    block_allowed = np.add.reduceat(np.add.reduceat(allowed.astype(np.int32), starts, axis=1), starts, axis=0) > 0
    return pooled, block_allowed, [range(a, b) for a, b in zip(edges[:-1], edges[1:])]
