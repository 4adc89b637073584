"""The two counts of a shape, row by row, and the rows that lead from the one to the other.

* tally_3b1b: 3Blue1Brown's convention (Deep Learning series, chapters 5-7), weight matrices only,
  with the embedding and the unembedding as two matrices, and the per-head and per-layer steps.
* exact: every tensor a checkpoint of the shape stores, grouped by what it does.
* difference: why the two totals differ.

Every row is a product of factors (factors.py), so its count, its formula and its filled-in numbers
cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfcli.engine.config import NORMS, POSITIONS, ModelConfig

from .factors import Row, Sum, axis, const, plus, times
from .shape import gqa


# What each kind of norm stores (engine/config.py's NORMS[...].stores), in Chinese.
STORES_ZH = {"layernorm": "缩放与平移", "rmsnorm": "只有缩放",
             "rmsnorm1p": "只有缩放，存为 1 + w 中的 w"}


@dataclass(frozen=True)
class Tally:
    rows: tuple[Row, ...]
    steps: tuple[Row, ...] = ()  # the per-head and per-layer arithmetic a reader follows

    @property
    def total(self) -> int:
        return sum(r.count for r in self.rows)

    def row(self, key: str) -> Row:
        for r in (*self.rows, *self.steps):
            if r.key == key:
                return r
        raise KeyError(key)

    def __getitem__(self, key: str) -> int:
        return self.row(key).count


class _Axes:
    """The axes of a shape as factors, named as STYLE.md names them."""

    def __init__(self, s: ModelConfig):
        self.L, self.D, self.H = axis("L", s.n_layer), axis("D", s.d_model), axis("H", s.n_head)
        self.Dh, self.F = axis("Dh", s.head_dim), axis("F", s.d_ff)
        self.V, self.T = axis("V", s.vocab_size), axis("T", s.n_ctx)
        self.Hkv = axis("Hkv", s.n_kv_head)
        # Key and value heads: written Hkv under grouped-query attention, H (the same number) without.
        self.kv = self.Hkv if gqa(s) else axis("H", s.n_kv_head)


def tally_3b1b(s: ModelConfig) -> Tally:
    """3Blue1Brown's convention: weight matrices only, embedding and unembedding counted apart.

    Per head, "Value" is the value-down map (D -> Dh) and "Output" the value-up map (Dh -> D). With
    GQA the Key and Value rows count the Hkv shared key/value heads, not the H query heads.
    """
    a = _Axes(s)
    L, D, H, Dh, F, V = a.L, a.D, a.H, a.Dh, a.F, a.V
    # Matrices on the way up: up (GELU), or gate and up (SwiGLU), both D -> F.
    if s.mlp_matrices == 3:
        up = Row("up", (L, const(2), D, F), "gate and up, both D → F", "门控和上投影，都是 D → F")
    else:
        up = Row("up", (L, D, F))
    rows = (
        Row("embedding", (V, D)),
        Row("key", (L, a.kv, Dh, D)),
        Row("query", (L, H, Dh, D)),
        Row("value", (L, a.kv, Dh, D)),
        Row("output", (L, H, Dh, D)),
        up,
        Row("down", (L, F, D)),
        Row("unembedding", (V, D)),
    )
    one = times(D, Dh, sep=" × ")  # one head's matrix, D x Dh
    steps = [
        Row("head_query", (D, Dh)),
        Row("head_key", (D, Dh)),
        Row("head_value_down", (D, Dh)),
        Row("head_value_up", (Dh, D)),
    ]
    if gqa(s):
        steps += [
            Row("query_head", (const(2), one), "W_Q and value-up", "W_Q 与值升维"),
            Row("kv_head", (const(2), one), f"W_K and value-down, shared by {s.q_per_kv} query heads",
                f"W_K 与值降维，由 {s.q_per_kv} 个查询头共享"),
            Row("layer_attention", (plus(H, a.Hkv, parts=True), times(const(2), D, Dh))),
        ]
    else:
        head = Row("head", (const(4), one))
        steps += [head, Row("layer_attention", (H, axis("head", head.count, "一个头")))]
    layer_attention, layer_mlp = steps[-1], Row("layer_mlp", (const(s.mlp_matrices), D, F))
    steps += [
        layer_mlp,
        Row("all_attention", (L, axis("one block", layer_attention.count, "一个块"))),
        Row("all_mlp", (L, axis("one block", layer_mlp.count, "一个块"))),
    ]
    return Tally(rows, tuple(steps))


def exact(s: ModelConfig) -> Tally:
    """Every parameter tensor a checkpoint of this shape stores, grouped by what it does."""
    a = _Axes(s)
    L, D, H, Dh, F, V, T = a.L, a.D, a.H, a.Dh, a.F, a.V, a.T
    m = s.mlp_matrices
    # Biases: Q, K and V (GPT-2, Qwen2), O (GPT-2), or none (Llama by default).
    qkv = ([times(H, Dh), times(const(2), a.Hkv, Dh)] if gqa(s) else [times(const(3), H, Dh)]) if s.qkv_bias else []
    attn_bias = qkv + ([D] if s.o_bias else [])
    kind = NORMS[s.norm]
    norm = times(const(kind.vectors), D, sep=" × ") if kind.vectors > 1 else D  # LayerNorm: scale and shift
    rows = (
        Row("token_embedding", (V, D)),
        Row("position_embedding", (T, D)) if POSITIONS[s.positions].table
        else Row("position_embedding", note="RoPE: rotations, no parameters", note_zh="RoPE：旋转，没有参数"),
        Row("attn_q", (L, D, times(H, Dh))),
        Row("attn_k", (L, D, times(a.kv, Dh))),
        Row("attn_v", (L, D, times(a.kv, Dh))),
        Row("attn_o", (L, times(H, Dh), D)),
        Row("attn_bias", (L, plus(*attn_bias))) if attn_bias
        else Row("attn_bias", note="no biases", note_zh="没有偏置"),
        Row("mlp", (L, const(m), D, F), *(("gate, up, down", "门控、上投影、下投影") if m == 3
                                         else ("up, down", "上投影、下投影"))),
        Row("mlp_bias", (L, plus(times(const(2), F) if m == 3 else F, D))) if s.mlp_bias
        else Row("mlp_bias", note="no biases", note_zh="没有偏置"),
        Row("norms", (L, const(s.norms_per_block), norm), f"{s.norms_per_block} per block, {kind.stores}",
            f"每个块 {s.norms_per_block} 个，{STORES_ZH.get(s.norm, kind.stores)}"),
        *([Row("qk_norms", (L, const(2), Dh), "queries and keys, one scale of Dh each, shared by the heads",
               "查询和键各一个 Dh 维的缩放，各头共享")] if s.qk_norm else []),
        Row("final_norm", (norm,)),
        Row("unembedding", note="tied: shares the embedding", note_zh="共享：与嵌入是同一个矩阵")
        if s.tie_embeddings else Row("unembedding", (V, D)),
    )
    return Tally(rows)


def difference(s: ModelConfig) -> tuple[Sum, ...]:
    """Why the 3Blue1Brown tally and the exact count differ: rows that sum to tally - exact."""
    t, e = tally_3b1b(s), exact(s)
    if s.tie_embeddings:
        unembedding = Sum("diff_unembedding", (t.row("unembedding"),),
                          note="counted as its own matrix; a tied checkpoint stores it once",
                          note_zh="当作独立的矩阵计入；共享权重的检查点只存一次")
    else:
        unembedding = Sum("diff_unembedding", note="untied: both count it", note_zh="不共享：两边都计入")
    return (
        unembedding,
        Sum("diff_positions", (e.row("position_embedding"),), -1),
        Sum("diff_biases", (e.row("attn_bias"), e.row("mlp_bias")), -1),
        Sum("diff_norms", tuple(r for r in e.rows if r.key in ("norms", "qk_norms", "final_norm")), -1),
    )
