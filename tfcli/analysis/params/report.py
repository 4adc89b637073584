"""Every number `tfcli params` shows, in one JSON-able dict.

`--json` prints the report and the tables are drawn from it, so both always show the same numbers.
A Subject is what is counted: a shape with its name, title and source; flags that change it give a
new Subject, titled as the shape it has become.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from tfcli import numbers
from tfcli.engine.config import ModelConfig

from . import costs, presets
from .labels import LABELS
from .shape import SHAPE_KEYS, modify, shape_dict
from .tally import difference, exact, tally_3b1b


@dataclass(frozen=True)
class Subject:
    name: str  # the preset or the model folder the shape is, or "custom"
    title: str
    source: str  # where the shape came from
    config: ModelConfig
    preset: presets.Preset | None = None  # when the shape is a preset's (so its quoted figure applies)
    note: str = ""
    note_zh: str = ""
    changed: tuple[str, ...] = ()  # the SHAPE_KEYS that flags changed in the starting shape


def of_preset(p: presets.Preset) -> Subject:
    return Subject(p.name, p.title, p.source, p.config, p, p.note, p.note_zh)


def changed_by(base: Subject, flags: dict[str, Any], *, named: bool = True) -> Subject:
    """`base` with the shape flags applied (None: not given). The result is titled as what it is: the
    preset it now equals (`--layers 12 --d-model 768 --heads 12` on GPT-3 is GPT-3 Small), else a
    custom shape, named after `base` when the user named it (`named`), not when it was the default."""
    given = {k: v for k, v in flags.items() if v is not None}
    config = modify(base.config, **given) if given else base.config
    if config == base.config:
        return base
    new, old = shape_dict(config), shape_dict(base.config)
    changed = tuple(k for k in SHAPE_KEYS if new[k] != old[k])
    match = presets.matching(config)
    if match is not None:
        return replace(of_preset(match), config=config, changed=changed)
    if not named:
        return Subject("custom", "Custom shape", f"shape flags on {base.name} ({base.title})", config, changed=changed)
    title = f"Custom shape: {base.title}, changed: " + ", ".join(f"{k} {_value(new[k])}" for k in changed)
    return Subject(base.name, title, base.source, config, changed=changed)


def _value(value: object) -> str:
    return numbers.count(value) if isinstance(value, int) and not isinstance(value, bool) else str(value).lower()


def build(subject: Subject) -> dict[str, Any]:
    s = subject.config
    tally, ex = tally_3b1b(s), exact(s)
    comp, kv, pattern = costs.compute(s), costs.kv_cache(s), costs.attention_pattern(s)
    attention = costs.attention_flops(s)
    kv_rows = {dtype: costs.kv_per_token(s, dtype) for dtype in costs.cache_types(s)}
    untied_total = ex.total + (s.vocab_size * s.d_model if s.tie_embeddings else 0)
    report: dict[str, Any] = {
        "name": subject.name,
        "title": subject.title,
        "source": subject.source,
        "note": subject.note,
        "note_zh": subject.note_zh,
        "changed": list(subject.changed),
        "shape": shape_dict(s),
        "tally_3b1b": {"rows": [_row(r) for r in tally.rows], "steps": [_row(r) for r in tally.steps],
                       "total": tally.total},
        "exact": {"rows": [_row(r) for r in ex.rows], "total": ex.total, "untied_total": untied_total},
        "difference": {"rows": [_row(r) for r in difference(s)], "total": tally.total - ex.total},
        "quoted": None,
        "compute": asdict(comp)
        | {
            "formula": {
                "forward": f"2·N + {attention.formula}",
                "attention": attention.formula,
                "training": "3 × forward ≈ 6·N",
                "N": "weights a token is multiplied by: all block matrices + unembedding",
            },
            "numbers": {"attention": attention.numbers},
        },
        "memory": {
            "weights": costs.weight_bytes(ex.total),
            "kv_cache": asdict(kv)
            | {
                "formula": "2 × L × Hkv × Dh × bytes",
                "rows": {dtype: {"formula": r.formula, "numbers": r.numbers} for dtype, r in kv_rows.items()},
            },
            "attention_pattern": asdict(pattern) | {"formula": "T² per head per block"},
        },
    }
    p = subject.preset
    if p is not None:
        quoted = numbers.parse_figure(p.quoted)
        report["quoted"] = {
            "figure": p.quoted,
            "value": quoted,
            "source": p.source,
            "rounds_to": numbers.rounds_to(ex.total, p.quoted),
            "relative": (ex.total - quoted) / quoted,
        }
    return report


def _row(r) -> dict[str, Any]:
    en, zh = LABELS[r.key]
    return {"key": r.key, "name": en, "name_zh": zh, "count": r.count, "formula": r.formula, "formula_zh": r.formula_zh,
            "numbers": r.numbers,
            "note": r.note, "note_zh": r.note_zh}  # fmt: skip


def build_from(subject: Subject, path: str, shapes: dict[str, tuple[int, ...]], files: list[str],
               dtypes: dict[str, int]) -> dict[str, Any]:
    """The tensors of a weight file (names and shapes, read from its headers) beside the count for
    the shape. Imports the engine's families (census.py): only --from calls it."""
    from .census import compare

    c = compare(subject.config, shapes)
    return {
        "path": path,
        "files": files,
        "tensors": len(shapes),
        "dtypes": dtypes,
        "rows": [{"key": k, "name": LABELS[k][0], "name_zh": LABELS[k][1], "analytic": a, "actual": b}
                 for k, a, b in c.rows],
        "analytic_total": sum(a for _, a, _ in c.rows),
        "actual_total": c.actual_total,
        "mismatched": c.mismatched,
        "uncategorised": [{"name": n, "shape": list(sh)} for n, sh in c.unknown],
        "uncategorised_total": c.actual_total - sum(b for _, _, b in c.rows),
        "buffers": list(c.buffers),
        "agree": c.agree,
    }


def presets_list() -> list[dict[str, Any]]:
    """Every preset with its exact count, for --list-presets."""
    return [
        {"name": p.name, "title": p.title, "quoted": p.quoted, "source": p.source, "exact": exact(p.config).total,
         "shape": shape_dict(p.config), "note": p.note}
        for p in presets.PRESETS.values()
    ]
