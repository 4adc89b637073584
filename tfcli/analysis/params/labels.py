"""The name of every row of the accounting, in English and in Chinese: a run shows one of the two, the
Chinese alone under `--lang zh` (the one rule of cli/lang.py); `--json` carries both (name, name_zh)."""

from __future__ import annotations

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
    "layer_attention": ("one block's attention", "一个块的注意力"),
    "layer_mlp": ("one block's MLP", "一个块的 MLP"),
    "all_attention": ("attention, all blocks", "所有块的注意力"),
    "all_mlp": ("MLP, all blocks", "所有块的 MLP"),
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
    "qk_norms": ("Q/K norms", "Q/K 归一化"),
    "final_norm": ("Final norm", "最终归一化"),
    "uncategorised": ("Not categorised", "未归类"),
    # the difference
    "diff_unembedding": ("+ unembedding counted apart", "+ 单独计入的反嵌入"),
    "diff_positions": ("− position embedding", "− 位置嵌入"),
    "diff_biases": ("− biases", "− 偏置"),
    "diff_norms": ("− norms", "− 归一化"),
}
