"""The tensors a real weight file holds, grouped into the categories of the exact count.

Each family's CENSUS rules (tfcli.engine.families: a regex and a category for each tensor name its
checkpoints hold) say what a tensor is; this module counts them and sets them beside the exact count
of a shape, category by category, for `tfcli params --from`. It works on names and shapes read from
the file headers, never on the weights. Importing it loads the engine's families (and NumPy): only
--from does.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from tfcli.engine import families
from tfcli.engine.config import ModelConfig

from .tally import exact

BUFFER = "buffer"  # a stored constant (GPT-2's causal mask), not a parameter
QKV = "qkv"  # Q, K and V in one matrix (GPT-2's c_attn, Phi-3's qkv_proj), split by the heads' widths
CATEGORIES = ("token_embedding", "position_embedding", "attn_q", "attn_k", "attn_v", "attn_o", "attn_bias")
CATEGORIES += ("mlp", "mlp_bias", "norms", "qk_norms", "final_norm", "unembedding")


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


def census(shapes: dict[str, tuple[int, ...]], s: ModelConfig) -> Census:
    """Group tensors by name into the categories of `exact`, by the CENSUS rules of the family of
    `s` (a module of tfcli.engine.families).

    A fused Q, K and V tensor (GPT-2's c_attn [D, 3·D], Phi-3's qkv_proj) is split into its parts
    in the proportion H : Hkv : Hkv of the shape's heads.
    """
    rules = families.family(s.family).CENSUS
    heads = (s.n_head, s.n_kv_head, s.n_kv_head)
    c = Census()
    for name, shape in shapes.items():
        category = categorise(name, rules)
        n = math.prod(shape)
        if category == BUFFER:
            c.buffers.append(name)
        elif category == QKV and n % sum(heads) == 0:
            for part, h in zip(("attn_q", "attn_k", "attn_v"), heads):
                c.counts[part] += n // sum(heads) * h
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
    actual_total: int  # every parameter in the file, the uncategorised ones too

    @property
    def mismatched(self) -> list[str]:
        return [key for key, a, b in self.rows if a != b]

    @property
    def agree(self) -> bool:
        return not self.mismatched and not self.unknown


def compare(s: ModelConfig, shapes: dict[str, tuple[int, ...]]) -> Comparison:
    """The exact count for `s` beside what the tensors `shapes` actually hold, category by category."""
    e, c = exact(s), census(shapes, s)
    rows = tuple((r.key, r.count, c.counts[r.key]) for r in e.rows)
    return Comparison(rows, tuple(c.unknown), tuple(c.buffers), c.total)
