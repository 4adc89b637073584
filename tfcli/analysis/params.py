"""Where a transformer's parameters live, what one token costs, and how much memory it all takes.

Two conventions, computed from the same shape:

* the 3Blue1Brown tally (Deep Learning series, chapters 5-7): weight matrices only, counted per head
  and per layer, with the embedding and the unembedding as two matrices. For GPT-3 it gives the
  well-known 175,181,291,520.
* the exact count: every tensor a checkpoint stores (biases, norms, learned positions), with a tied
  unembedding counted once because it *is* the embedding matrix. For GPT-3: 174,604,259,328.

`census` groups the tensor names and shapes of a real weight file into the same categories as the
exact count, so that the two can be compared line by line.

Pure Python on ints: no NumPy, no files, no printing (so `tfcli params --preset` starts fast).
Axes as in STYLE.md: L layers, D width, H/Hkv heads, Dh head size, F MLP width, V vocabulary,
T context.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal

from tfcli.engine.config import MLPS, NORMS, POSITIONS, ModelConfig
from tfcli.engine.errors import UsageError

WEIGHT_BITS = {"fp32": 32, "fp16": 16, "int8": 8, "int4": 4}  # bits per stored weight (bf16 as fp16)
CACHE_BYTES = {"fp32": 4, "fp16": 2}  # tfcli's engine keeps its KV cache in fp32


class ShapeError(UsageError):
    """A shape no transformer can have; `hint` says how to fix it (exit 2, like a bad flag)."""


# The sizes of a shape by the names the flags and the JSON use, and the ModelConfig field of each.
SIZES = {"layers": "n_layer", "d_model": "d_model", "heads": "n_head", "head_dim": "head_dim", "kv_heads": "n_kv_head"}
SIZES |= {"d_ff": "d_ff", "vocab": "vocab_size", "context": "n_ctx"}
# What a shape is, as the JSON report and the "changed" list name it.
SHAPE_KEYS = (*SIZES, "tied", "attn_bias", "mlp_bias", "mlp", "norm", "positions")


def gqa(cfg: ModelConfig) -> bool:
    """Grouped-query attention: fewer key/value heads than query heads."""
    return cfg.n_kv_head != cfg.n_head


def norm_params(cfg: ModelConfig) -> int:
    """Parameters of one norm: LayerNorm has a scale and a shift, RMSNorm only a scale."""
    return 2 * cfg.d_model if cfg.norm == "layernorm" else cfg.d_model


def shape_dict(cfg: ModelConfig) -> dict:
    """The shape under the names of SHAPE_KEYS (attn_bias: any bias in attention, split into
    qkv_bias and o_bias since Qwen2 has the one without the other), with d_attn and d_kv."""
    d = {key: getattr(cfg, field) for key, field in SIZES.items()}
    d |= {"tied": cfg.tie_embeddings, "attn_bias": cfg.qkv_bias or cfg.o_bias, "mlp_bias": cfg.mlp_bias}
    d |= {"mlp": cfg.mlp, "norm": cfg.norm, "positions": cfg.positions, "qkv_bias": cfg.qkv_bias, "o_bias": cfg.o_bias}
    return d | {"d_attn": cfg.d_attn, "d_kv": cfg.d_kv}


def default_d_ff(d_model: int, mlp: str) -> int:
    """The MLP width a model of width D gets unless told otherwise.

    GPT-2/3: 4 D. LLaMA (Meta's llama/model.py): 2/3 of 4 D, so that three matrices cost what two did,
    rounded up to a multiple of 256.
    """
    if mlp == "gelu":
        return 4 * d_model
    hidden = 2 * 4 * d_model // 3
    return 256 * -(-hidden // 256)


def check(cfg: ModelConfig) -> ModelConfig:
    """The config itself, or a ShapeError naming the first impossible value."""
    for name, field in SIZES.items():
        _positive(name, getattr(cfg, field))
    if cfg.mlp not in MLPS:
        raise ShapeError(f"mlp must be one of {', '.join(MLPS)}, not {cfg.mlp!r}")
    if cfg.norm not in NORMS:
        raise ShapeError(f"norm must be one of {', '.join(NORMS)}, not {cfg.norm!r}")
    if cfg.positions not in POSITIONS:
        raise ShapeError(f"positions must be one of {', '.join(POSITIONS)}, not {cfg.positions!r}")
    if cfg.n_head % cfg.n_kv_head:
        raise ShapeError(
            f"{cfg.n_head} query heads cannot be shared evenly by {cfg.n_kv_head} key/value heads",
            "the number of heads must be a multiple of the number of key/value heads",
        )
    return cfg


def modify(
    base: ModelConfig,
    *,
    layers: int | None = None,
    d_model: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    kv_heads: int | None = None,
    d_ff: int | None = None,
    vocab: int | None = None,
    context: int | None = None,
    tied: bool | None = None,
    bias: bool | None = None,
    mlp: str | None = None,
) -> ModelConfig:
    """`base` with the given values changed (dataclasses.replace).

    A value not given that followed from others in `base` follows them again: head_dim = D / H,
    kv_heads = H (no GQA), d_ff = the default for D and the MLP kind. A value `base` set apart
    (a Llama's explicit head_dim, a GQA head count) is kept. `bias` sets every projection's bias.
    """
    given = {"layers": layers, "d_model": d_model, "heads": heads, "head_dim": head_dim, "kv_heads": kv_heads}
    given |= {"d_ff": d_ff, "vocab": vocab, "context": context}
    for name, value in given.items():
        if value is not None:
            _positive(name, value)
    D = base.d_model if d_model is None else d_model
    H = base.n_head if heads is None else heads
    kind = base.mlp if mlp is None else mlp
    if kind not in MLPS:
        raise ShapeError(f"mlp must be one of {', '.join(MLPS)}, not {kind!r}")

    if head_dim is None:
        follows = base.n_head * base.head_dim == base.d_model
        if follows and (d_model is not None or heads is not None):
            if D % H:
                raise ShapeError(f"d_model {D:,} is not divisible by {H} heads", "choose heads that divide d_model, or give --head-dim")
            head_dim = D // H
        else:
            head_dim = base.head_dim
    if kv_heads is None:
        kv_heads = H if base.n_kv_head == base.n_head else base.n_kv_head
    if d_ff is None:
        follows = base.d_ff == default_d_ff(base.d_model, base.mlp)
        d_ff = default_d_ff(D, kind) if follows and (d_model is not None or mlp is not None) else base.d_ff
    biases = {} if bias is None else {"qkv_bias": bias, "o_bias": bias, "mlp_bias": bias}
    return check(
        replace(
            base,
            n_layer=base.n_layer if layers is None else layers,
            d_model=D,
            n_head=H,
            head_dim=head_dim,
            n_kv_head=kv_heads,
            d_ff=d_ff,
            vocab_size=base.vocab_size if vocab is None else vocab,
            n_ctx=base.n_ctx if context is None else context,
            tie_embeddings=base.tie_embeddings if tied is None else tied,
            mlp=kind,
            **biases,
        )
    )


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapeError(f"{name} must be a positive whole number, not {value!r}")


# ---------------------------------------------------------------------------------------------------
# Counting


@dataclass(frozen=True)
class Row:
    key: str  # a key of LABELS
    count: int
    formula: str = ""  # in the axes' letters: "L × H × Dh × D"
    numbers: str = ""  # the same with the values filled in
    note: str = ""  # e.g. "tied: shares the embedding"


@dataclass(frozen=True)
class Tally:
    rows: tuple[Row, ...]
    steps: tuple[Row, ...] = ()  # the per-head and per-layer arithmetic a reader follows

    @property
    def total(self) -> int:
        return sum(r.count for r in self.rows)

    def __getitem__(self, key: str) -> int:
        for r in (*self.rows, *self.steps):
            if r.key == key:
                return r.count
        raise KeyError(key)


def _n(*values: int) -> str:
    return " × ".join(f"{v:,}" for v in values)


def tally_3b1b(s: ModelConfig) -> Tally:
    """3Blue1Brown's convention: weight matrices only, embedding and unembedding counted apart.

    Per head, "Value" is the value-down map (D -> Dh) and "Output" the value-up map (Dh -> D). With
    GQA the Key and Value rows count the Hkv shared key/value heads, not the H query heads.
    """
    L, D, H, Hkv, Dh, F, V = s.n_layer, s.d_model, s.n_head, s.n_kv_head, s.head_dim, s.d_ff, s.vocab_size
    kv = "Hkv" if gqa(s) else "H"
    m = s.mlp_matrices - 1  # matrices on the way up: up (GELU), gate and up (SwiGLU)
    up_note = "gate and up, both D → F" if m == 2 else ""
    rows = (
        Row("embedding", V * D, "V × D", _n(V, D)),
        Row("key", L * Hkv * Dh * D, f"L × {kv} × Dh × D", _n(L, Hkv, Dh, D)),
        Row("query", L * H * Dh * D, "L × H × Dh × D", _n(L, H, Dh, D)),
        Row("value", L * Hkv * Dh * D, f"L × {kv} × Dh × D", _n(L, Hkv, Dh, D)),
        Row("output", L * H * Dh * D, "L × H × Dh × D", _n(L, H, Dh, D)),
        Row("up", L * m * D * F, "L × 2 × D × F" if m == 2 else "L × D × F", _n(L, m, D, F) if m == 2 else _n(L, D, F), up_note),
        Row("down", L * F * D, "L × F × D", _n(L, F, D)),
        Row("unembedding", V * D, "V × D", _n(V, D)),
    )
    one = D * Dh
    steps = [
        Row("head_query", one, "D × Dh", _n(D, Dh)),
        Row("head_key", one, "D × Dh", _n(D, Dh)),
        Row("head_value_down", one, "D × Dh", _n(D, Dh)),
        Row("head_value_up", one, "Dh × D", _n(Dh, D)),
    ]
    if gqa(s):
        layer_attn = H * 2 * one + Hkv * 2 * one
        steps += [
            Row("query_head", 2 * one, "2 × D × Dh", f"2 × {one:,}", "W_Q and value-up"),
            Row("kv_head", 2 * one, "2 × D × Dh", f"2 × {one:,}", f"W_K and value-down, shared by {H // Hkv} query heads"),
            Row("layer_attention", layer_attn, "(H + Hkv) × 2·D·Dh", f"({H} + {Hkv}) × {2 * one:,}"),
        ]
    else:
        layer_attn = H * 4 * one
        steps += [
            Row("head", 4 * one, "4 × D × Dh", f"4 × {one:,}"),
            Row("layer_attention", layer_attn, "H × head", f"{H} × {4 * one:,}"),
        ]
    layer_mlp = s.mlp_matrices * D * F
    steps += [
        Row("layer_mlp", layer_mlp, f"{s.mlp_matrices} × D × F", _n(s.mlp_matrices, D, F)),
        Row("all_attention", L * layer_attn, "L × one layer", f"{L} × {layer_attn:,}"),
        Row("all_mlp", L * layer_mlp, "L × one layer", f"{L} × {layer_mlp:,}"),
    ]
    return Tally(rows, tuple(steps))


def exact(s: ModelConfig) -> Tally:
    """Every parameter tensor a checkpoint of this shape stores, grouped by what it does."""
    L, D, H, Hkv, Dh, F, V, T = s.n_layer, s.d_model, s.n_head, s.n_kv_head, s.head_dim, s.d_ff, s.vocab_size, s.n_ctx
    kv = "Hkv" if gqa(s) else "H"
    if s.positions == "learned":
        pos = Row("position_embedding", T * D, "T × D", _n(T, D))
    else:
        pos = Row("position_embedding", 0, note="RoPE: rotations, no parameters")
    if s.qkv_bias or s.o_bias:
        per = (H * Dh + 2 * Hkv * Dh if s.qkv_bias else 0) + (D if s.o_bias else 0)  # q, k, v and o biases
        terms = (["H·Dh", "2·Hkv·Dh"] if gqa(s) else ["3·H·Dh"]) if s.qkv_bias else []
        terms += ["D"] if s.o_bias else []
        formula = f"L × ({' + '.join(terms)})" if len(terms) > 1 else f"L × {terms[0]}"
        attn_bias = Row("attn_bias", L * per, formula, f"{L} × {per:,}")
    else:
        attn_bias = Row("attn_bias", 0, note="no biases")
    m = s.mlp_matrices
    if s.mlp_bias:
        per = (m - 1) * F + D
        mlp_bias = Row("mlp_bias", L * per, "L × (2·F + D)" if m == 3 else "L × (F + D)", f"{L} × {per:,}")
    else:
        mlp_bias = Row("mlp_bias", 0, note="no biases")
    n = norm_params(s)
    what = "scale and shift" if s.norm == "layernorm" else "scale only"
    norm_f = "2 × D" if s.norm == "layernorm" else "D"
    rows = (
        Row("token_embedding", V * D, "V × D", _n(V, D)),
        pos,
        Row("attn_q", L * D * H * Dh, "L × D × H·Dh", _n(L, D, H * Dh)),
        Row("attn_k", L * D * Hkv * Dh, f"L × D × {kv}·Dh", _n(L, D, Hkv * Dh)),
        Row("attn_v", L * D * Hkv * Dh, f"L × D × {kv}·Dh", _n(L, D, Hkv * Dh)),
        Row("attn_o", L * H * Dh * D, "L × H·Dh × D", _n(L, H * Dh, D)),
        attn_bias,
        Row("mlp", L * m * D * F, f"L × {m} × D × F", _n(L, m, D, F), "gate, up, down" if m == 3 else "up, down"),
        mlp_bias,
        Row("norms", L * 2 * n, f"L × 2 × {norm_f}", _n(L, 2, n), f"2 per layer, {what}"),
        Row("final_norm", n, norm_f, f"{n:,}"),
        Row("unembedding", 0, note="tied: shares the embedding") if s.tie_embeddings else Row("unembedding", V * D, "V × D", _n(V, D)),
    )
    return Tally(rows)


def difference(s: ModelConfig) -> tuple[Row, ...]:
    """Why the 3Blue1Brown tally and the exact count differ: rows that sum to tally - exact."""
    e = exact(s)
    norms = e["norms"] + e["final_norm"]
    return (
        Row("diff_unembedding", s.vocab_size * s.d_model if s.tie_embeddings else 0, "V × D", note="counted as its own matrix; a tied checkpoint stores it once" if s.tie_embeddings else "untied: both count it"),
        Row("diff_positions", -e["position_embedding"], "T × D" if e["position_embedding"] else ""),
        Row("diff_biases", -(e["attn_bias"] + e["mlp_bias"])),
        Row("diff_norms", -norms),
    )


# ---------------------------------------------------------------------------------------------------
# Compute and memory


@dataclass(frozen=True)
class Compute:
    """FLOPs for one token (a multiply and an add count as 2), after Kaplan et al. 2020, Table 1.

    matmul_params: N, the weights one token is multiplied by: every matrix in the layers, plus the
        unembedding (a multiply even when tied). Embedding and position tables are looked up, not
        multiplied; biases and norms add a few FLOPs per parameter and are left out.
    attention: 2 x L x T x H·Dh. At position t a token's scores q·k cost 2·t·Dh per head and the
        weighted sum of values as much again; averaged over a full context (t ≈ T/2) that is this.
    """

    matmul_params: int
    attention: int
    forward: int  # 2 N + attention
    training: int  # forward + backward ≈ 3 x forward ≈ 6 N


def compute(s: ModelConfig) -> Compute:
    t = tally_3b1b(s)
    n = t.total - t["embedding"]
    attention = 2 * s.n_layer * s.n_ctx * s.d_attn
    forward = 2 * n + attention
    return Compute(n, attention, forward, 3 * forward)


def weight_bytes(n_params: int) -> dict[str, int]:
    """The weights stored at each precision (quantisation scales, a few percent more, left out)."""
    return {k: -(-n_params * bits // 8) for k, bits in WEIGHT_BITS.items()}


@dataclass(frozen=True)
class KVCache:
    """Keys and values kept for every past position: 2 x L x Hkv x Dh numbers per token."""

    per_token: dict[str, int]  # bytes, by dtype
    full_context: dict[str, int]  # bytes for T tokens


def kv_cache(s: ModelConfig) -> KVCache:
    numbers = 2 * s.n_layer * s.n_kv_head * s.head_dim
    return KVCache(
        {k: numbers * b for k, b in CACHE_BYTES.items()},
        {k: numbers * b * s.n_ctx for k, b in CACHE_BYTES.items()},
    )


@dataclass(frozen=True)
class AttentionPattern:
    """Scores of every position against every earlier one: T x T per head per layer.

    It grows with the square of the context, which is what limits context length: doubling T
    doubles the KV cache but quadruples this.
    """

    per_head: int  # numbers, T²
    per_layer: int  # H x T²
    all_layers: int  # L x H x T²
    bytes_per_layer_fp32: int


def attention_pattern(s: ModelConfig) -> AttentionPattern:
    one = s.n_ctx * s.n_ctx
    return AttentionPattern(one, s.n_head * one, s.n_layer * s.n_head * one, 4 * s.n_head * one)


def rounds_to(count: int, figure: str) -> bool:
    """Whether `count` rounded like `figure` ("125M", "1.3B", "175B") gives `figure`."""
    units = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
    mantissa = Decimal(figure[:-1])
    decimals = max(0, -mantissa.as_tuple().exponent)
    value = Decimal(count) / units[figure[-1]]
    return round(value, decimals) == mantissa


def parse_figure(figure: str) -> int:
    """ "1.3B" -> 1_300_000_000."""
    units = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
    return int(Decimal(figure[:-1]) * units[figure[-1]])


# ---------------------------------------------------------------------------------------------------
# A real weight file, grouped like `exact`

BUFFER = "buffer"  # a stored constant (GPT-2's causal mask), not a parameter
QKV = "qkv"  # GPT-2's fused c_attn: one D x 3D matrix holding Q, K and V side by side
CATEGORIES = ("token_embedding", "position_embedding", "attn_q", "attn_k", "attn_v", "attn_o", "attn_bias")
CATEGORIES += ("mlp", "mlp_bias", "norms", "final_norm", "unembedding")


def categorise(name: str, rules: tuple[tuple[str, str], ...]) -> str | None:
    """The category of a tensor name by a family's CENSUS rules (a key of CATEGORIES, QKV or BUFFER),
    or None if no rule knows it. A rule matches the name as it stands or after its first dotted part,
    the wrapper transformers adds ("transformer." for GPT-2, "model." for Llama and Qwen2)."""
    bare = name.split(".", 1)[-1]
    for pattern, category in rules:
        if re.fullmatch(pattern, name) or re.fullmatch(pattern, bare):  # re caches the compiled patterns
            return category
    return None


@dataclass
class Census:
    """The parameters a weight file actually holds, by category."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    tensors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    unknown: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # names no rule knows
    buffers: list[str] = field(default_factory=list)  # stored constants, not counted

    @property
    def total(self) -> int:
        return sum(self.counts.values()) + sum(math.prod(shape) for _, shape in self.unknown)


def census(shapes: dict[str, tuple[int, ...]], family: str) -> Census:
    """Group tensors by name into the categories of `exact`, by the CENSUS rules of `family`
    (a module of tfcli.engine.families).

    GPT-2's fused c_attn weight [D, 3·D] is split into its Q, K and V thirds.
    """
    from tfcli.engine.families import family as family_module  # only --from needs it (and NumPy)

    rules = family_module(family).CENSUS
    c = Census()
    for name, shape in shapes.items():
        category = categorise(name, rules)
        n = math.prod(shape)
        if category == BUFFER:
            c.buffers.append(name)
        elif category == QKV and n % 3 == 0:
            for part in ("attn_q", "attn_k", "attn_v"):
                c.counts[part] += n // 3
                c.tensors[part] += 1
        elif category in c.counts:
            c.counts[category] += n
            c.tensors[category] += 1
        else:
            c.unknown.append((name, tuple(shape)))
    return c


@dataclass(frozen=True)
class Comparison:
    rows: tuple[tuple[str, int, int], ...]  # (category, analytic, actual)
    unknown: tuple[tuple[str, tuple[int, ...]], ...]
    buffers: tuple[str, ...]

    @property
    def mismatched(self) -> list[str]:
        return [key for key, a, b in self.rows if a != b]

    @property
    def agree(self) -> bool:
        return not self.mismatched and not self.unknown


def compare(s: ModelConfig, shapes: dict[str, tuple[int, ...]]) -> Comparison:
    """The exact count for `s` beside what the tensors `shapes` actually hold, category by category."""
    e, c = exact(s), census(shapes, s.family)
    rows = tuple((r.key, r.count, c.counts[r.key]) for r in e.rows)
    return Comparison(rows, tuple(c.unknown), tuple(c.buffers))


# ---------------------------------------------------------------------------------------------------
# Names, in English and Chinese

LABELS: dict[str, tuple[str, str]] = {
    # the 3Blue1Brown tally
    "embedding": ("Embedding", "嵌入"),
    "key": ("Key", "键"),
    "query": ("Query", "查询"),
    "value": ("Value", "值"),
    "output": ("Output", "输出"),
    "up": ("Up-projection", "上投影"),
    "down": ("Down-projection", "下投影"),
    "unembedding": ("Unembedding", "反嵌入"),
    "total": ("Total", "合计"),
    "exact_total": ("Exact count", "精确计数"),
    # its steps
    "head_query": ("one head's W_Q", "一个头的 W_Q"),
    "head_key": ("one head's W_K", "一个头的 W_K"),
    "head_value_down": ("one head's Value-down", "一个头的值降维"),
    "head_value_up": ("one head's Value-up", "一个头的值升维"),
    "head": ("one head", "一个头"),
    "query_head": ("one query head", "一个查询头"),
    "kv_head": ("one key/value head", "一个键值头"),
    "layer_attention": ("one layer's attention", "一层的注意力"),
    "layer_mlp": ("one layer's MLP", "一层的 MLP"),
    "all_attention": ("attention, all layers", "所有层的注意力"),
    "all_mlp": ("MLP, all layers", "所有层的 MLP"),
    # the exact count
    "token_embedding": ("Token embedding", "词元嵌入"),
    "position_embedding": ("Position embedding", "位置嵌入"),
    "attn_q": ("Attention Q weights", "注意力 Q 权重"),
    "attn_k": ("Attention K weights", "注意力 K 权重"),
    "attn_v": ("Attention V weights", "注意力 V 权重"),
    "attn_o": ("Attention O weights", "注意力 O 权重"),
    "attn_bias": ("Attention biases", "注意力偏置"),
    "mlp": ("MLP weights", "MLP 权重"),
    "mlp_bias": ("MLP biases", "MLP 偏置"),
    "norms": ("Norms", "归一化"),
    "final_norm": ("Final norm", "最终归一化"),
    "uncategorised": ("Not categorised", "未归类"),
    # the difference
    "diff_unembedding": ("+ unembedding counted apart", "+ 单独计入的反嵌入"),
    "diff_positions": ("− position embedding", "− 位置嵌入"),
    "diff_biases": ("− biases", "− 偏置"),
    "diff_norms": ("− norms", "− 归一化"),
}
