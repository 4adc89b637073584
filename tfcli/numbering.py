"""One numbering and one word, declared once (README, "Blocks and residual indices"):

- a **block** b is one transformer block, numbered 0 to L-1 (what papers and config files call a
  layer: `num_hidden_layers`); `--block B`, `"block"` in JSON, "block b" and "L blocks" in text;
- the **residual index** i names the residual stream *before* block i: 0 is the embeddings, i is
  the output of block i-1, and i = L is after the last block (what the model predicts from), as
  `transformers`' `output_hidden_states[i]`; `--resid I`, `"resid"` in JSON, "resid" on a row.

"Layer" is never a synonym for either. Older names still work where programs rely on them: the
flag `--layer` (a block for attn, neurons and steer; a residual index for embed) and the JSON keys
`"layer"` (lens, patch, embed: a residual index; steer: a block) and `"layers"` (a model's shape:
its number of blocks), each beside the right one.
"""

from __future__ import annotations

RESID = "resid"  # the row label and JSON key of a residual index
RESID_RULE = "residual index i: the stream before block i (0 = the embeddings, L = after the last block)"
RESID_RULE_ZH = "残差序号 i：第 i 个块之前的残差流（0 = 嵌入，L = 最后一个块之后）"


def blocks(n: int, zh: bool = False) -> str:
    """'4 blocks', '1 block', '4 个块'."""
    return f"{n:,} 个块" if zh else f"{n:,} block{'' if n == 1 else 's'}"


def resid_name(i: int) -> str:
    """A residual index as a row label: '0 emb' (the embeddings), then 1, ..., L."""
    return "0 emb" if i == 0 else str(i)
