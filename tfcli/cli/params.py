"""tfcli params: where a transformer's parameters live, what one token costs, and the memory it takes.

The numbers come from the shape alone (tfcli/analysis/params.py, pure Python), so --preset and the
shape flags run without NumPy or the engine. Only -m and --from read files; they import the engine's
config reader and safetensors header reader inside the functions that need them.

One report dict is built first; --json prints it and the tables are drawn from it, so both always
show the same numbers.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from . import options
from .console import note, out, warn


class Mlp(str, Enum):
    gelu = "gelu"
    swiglu = "swiglu"


class Lang(str, Enum):
    en = "en"
    zh = "zh"


_SIZE = {"show_default": False, "rich_help_panel": "Shape"}


def params(
    preset: Annotated[
        Optional[str],
        typer.Option("--preset", "-p", help="A published shape: gpt3 (175B), gpt3-small ... gpt3-13b, gpt2 ... gpt2-xl, smollm2-135m. Default: gpt3.", show_default=False),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m", help="A model name or folder: take the shape from its config.json (wins over --preset).", show_default=False),
    ] = None,
    from_path: Annotated[
        Optional[Path],
        typer.Option("--from", help="A .safetensors file or model folder: count the tensors it stores and compare them with the count from the shape.", show_default=False),
    ] = None,
    layers: Annotated[Optional[int], typer.Option("--layers", help="L: transformer blocks.", **_SIZE)] = None,
    d_model: Annotated[Optional[int], typer.Option("--d-model", help="D: width of the residual stream.", **_SIZE)] = None,
    heads: Annotated[Optional[int], typer.Option("--heads", help="H: query heads.", **_SIZE)] = None,
    head_dim: Annotated[Optional[int], typer.Option("--head-dim", help="Dh: size of one head (default: d_model / heads).", **_SIZE)] = None,
    kv_heads: Annotated[Optional[int], typer.Option("--kv-heads", help="Hkv: key/value heads; fewer than --heads is grouped-query attention.", **_SIZE)] = None,
    d_ff: Annotated[Optional[int], typer.Option("--d-ff", help="F: MLP width (default: 4 x d_model for gelu; for swiglu LLaMA's 8/3 x d_model, rounded up to 256).", **_SIZE)] = None,
    vocab: Annotated[Optional[int], typer.Option("--vocab", help="V: vocabulary size.", **_SIZE)] = None,
    context: Annotated[Optional[int], typer.Option("--context", help="T: context length.", **_SIZE)] = None,
    tied: Annotated[Optional[bool], typer.Option("--tied/--untied", help="Whether the unembedding is the embedding matrix.", **_SIZE)] = None,
    bias: Annotated[Optional[bool], typer.Option("--bias/--no-bias", help="Biases on the attention and MLP projections.", **_SIZE)] = None,
    mlp: Annotated[Optional[Mlp], typer.Option("--mlp", help="gelu (up, down) or swiglu (gate, up, down).", **_SIZE)] = None,
    list_presets: Annotated[bool, typer.Option("--list-presets", help="List the presets and exit.")] = False,
    lang: Annotated[
        Optional[Lang],
        typer.Option("--lang", help="zh: names and explanations in Chinese as well as English (default: from LC_ALL / LANG).", show_default=False),
    ] = None,
    as_json: options.Json = False,
) -> None:
    """Count a GPT's parameters two ways, and what a token costs in FLOPs and memory.

    3Blue1Brown's tally (weight matrices only) is shown step by step beside the
    exact count of every tensor a checkpoint stores, with why the two differ.

    The shape comes from --preset, -m or the default gpt3. The shape flags
    change it; sizes you do not give follow from those you do (head_dim =
    d_model / heads, d_ff = 4 x d_model). --from compares the count with the
    tensors of a real weight file, and exits with 1 if they differ.

    Examples:

      tfcli params --preset gpt3

      tfcli params --preset gpt2 --untied

      tfcli params --preset gpt3 --layers 48 --context 8192

      tfcli params --from path/to/model --json

      tfcli params --preset smollm2-135m --lang zh
    """
    zh = _chinese(lang)
    if list_presets:
        _list_presets(as_json, zh)
        return
    flags = {"layers": layers, "d_model": d_model, "heads": heads, "head_dim": head_dim, "kv_heads": kv_heads}
    flags |= {"d_ff": d_ff, "vocab": vocab, "context": context, "tied": tied, "bias": bias, "mlp": mlp.value if mlp else None}
    subject = _subject(preset, model, from_path, flags)
    report = build_report(subject)
    if from_path is not None:
        report["from"] = _from_report(subject, from_path)
    if as_json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        _render(report, zh)
    agree = report.get("from", {}).get("agree", True)
    if not agree:
        bad = report["from"]
        warn(
            f"the tensors in {bad['path']} differ from the count for this shape: "
            f"{len(bad['mismatched'])} categor{'y' if len(bad['mismatched']) == 1 else 'ies'} differ, {len(bad['uncategorised'])} tensor(s) not categorised"
        )
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------------------------
# What to count


@dataclass
class Subject:
    name: str  # the preset, or the model folder, the shape started from
    title: str
    source: str  # where the shape came from
    shape: Any  # a tfcli.engine.config.ModelConfig
    preset: Any = None  # the Preset, when the shape is exactly a preset's (so its quoted figure applies)
    note: str = ""
    changed: tuple[str, ...] = ()  # flags that changed the starting shape


def _subject(preset: str | None, model: str | None, from_path: Path | None, flags: dict) -> Subject:
    """The shape to count: flags applied to -m's config.json, else --preset, else the config.json
    beside --from, else gpt3."""
    from tfcli.analysis.params import presets
    from tfcli.analysis.params import shape as P

    chosen = presets.get(preset) if preset is not None else None
    if model is not None:

        folder = options.model_folder(model)
        if chosen is not None:
            note(f"-m {model}: its config.json replaces --preset {chosen.name}")
        base = Subject(folder.name, folder.name, f"{folder / 'config.json'}", _config_shape(folder / "config.json"))
    elif chosen is not None:
        base = Subject(chosen.name, chosen.title, chosen.source, chosen.config, chosen, chosen.note)
    elif from_path is not None:
        config = (from_path if from_path.is_dir() else from_path.parent) / "config.json"
        if not config.exists():
            from tfcli.engine.errors import ConfigError

            raise ConfigError(f"no config.json beside {from_path} to say what shape to expect", "give the shape with --preset or -m")
        base = Subject(config.parent.name, config.parent.name, str(config), _config_shape(config))
    else:
        chosen = presets.get(presets.DEFAULT)
        base = Subject(chosen.name, chosen.title, chosen.source, chosen.config, chosen, chosen.note)

    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return base
    shape = P.modify(base.shape, **given)
    if shape == base.shape:
        return base
    new, old = P.shape_dict(shape), P.shape_dict(base.shape)
    changed = tuple(k for k in P.SHAPE_KEYS if new[k] != old[k])
    title = f"{base.title}, changed: " + ", ".join(f"{k} {_v(new[k])}" for k in changed)
    return Subject(base.name, title, base.source, shape, None, "", changed)


def _v(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value).lower()


def _config_shape(path: Path):
    from tfcli.analysis.params.shape import check
    from tfcli.engine.families import load_config

    return check(load_config(path))


# ---------------------------------------------------------------------------------------------------
# The report: every number, in one JSON-able dict


def build_report(subject: Subject) -> dict[str, Any]:
    from tfcli import numbers
    from tfcli.analysis.params import costs, tally as T
    from tfcli.analysis.params.shape import shape_dict

    s = subject.shape
    tally, ex = T.tally_3b1b(s), T.exact(s)
    comp, kv, pattern = costs.compute(s), costs.kv_cache(s), costs.attention_pattern(s)
    untied_total = ex.total + (s.vocab_size * s.d_model if s.tie_embeddings else 0)
    report: dict[str, Any] = {
        "name": subject.name,
        "title": subject.title,
        "source": subject.source,
        "note": subject.note,
        "changed": list(subject.changed),
        "shape": shape_dict(s),
        "tally_3b1b": {"rows": [_row(r) for r in tally.rows], "steps": [_row(r) for r in tally.steps], "total": tally.total},
        "exact": {"rows": [_row(r) for r in ex.rows], "total": ex.total, "untied_total": untied_total},
        "difference": {"rows": [_row(r) for r in T.difference(s)], "total": tally.total - ex.total},
        "quoted": None,
        "compute": asdict(comp)
        | {
            "formula": {
                "forward": "2·N + 2·L·T·H·Dh",
                "attention": "2·L·T·H·Dh",
                "training": "3 × forward ≈ 6·N",
                "N": "weights a token is multiplied by: all layer matrices + unembedding",
            }
        },
        "memory": {
            "weights": costs.weight_bytes(ex.total),
            "kv_cache": asdict(kv) | {"formula": "2 × L × Hkv × Dh × bytes"},
            "attention_pattern": asdict(pattern) | {"formula": "T² per head per layer"},
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
    from tfcli.analysis.params.labels import LABELS

    en, zh = LABELS[r.key]
    return {"key": r.key, "name": en, "name_zh": zh, "count": r.count, "formula": r.formula, "numbers": r.numbers, "note": r.note}


def _from_report(subject: Subject, path: Path) -> dict[str, Any]:
    """Read the tensor names and shapes of `path` and set them beside the count for the shape."""
    from tfcli.analysis.params.census import compare
    from tfcli.analysis.params.labels import LABELS

    shapes, files, dtypes = _read_shapes(path)
    c = compare(subject.shape, shapes)

    return {
        "path": str(path),
        "files": files,
        "tensors": len(shapes),
        "dtypes": dtypes,
        "rows": [{"key": k, "name": LABELS[k][0], "name_zh": LABELS[k][1], "analytic": a, "actual": b} for k, a, b in c.rows],
        "analytic_total": sum(a for _, a, _ in c.rows),
        "actual_total": c.actual_total,
        "mismatched": c.mismatched,
        "uncategorised": [{"name": n, "shape": list(sh)} for n, sh in c.unknown],
        "buffers": list(c.buffers),
        "agree": c.agree,
    }


def _read_shapes(path: Path) -> tuple[dict[str, tuple[int, ...]], list[str], dict[str, int]]:
    """{tensor name: shape} of a safetensors file or a model folder (sharded or not), read from the
    headers only; the files holding them; how many tensors of each dtype."""
    from tfcli.engine.errors import CheckpointError

    if path.is_dir():
        from tfcli.engine.checkpoint import open_tensors

        t = open_tensors(path)
        shapes = {name: t.shape(name) for name in t.names}
        dtypes = [t.dtype(name) for name in t.names]
        files = [wf.path.name for wf in t.files]
    elif path.is_file():
        from tfcli.engine.weightfile import read_header

        _, infos = read_header(path)
        shapes = {name: info.shape for name, info in infos.items()}
        dtypes = [info.dtype for info in infos.values()]
        files = [path.name]
    else:
        raise CheckpointError(f"no such file or folder: {path}")
    return shapes, files, {d: dtypes.count(d) for d in sorted(set(dtypes))}


# ---------------------------------------------------------------------------------------------------
# Drawing the report


def _chinese(lang: Lang | None) -> bool:
    """--lang, else the locale the way POSIX picks it: LC_ALL, then LC_MESSAGES, then LANG."""
    if lang is not None:
        return lang is Lang.zh
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var)
        if value:
            return value.lower().startswith("zh")
    return False


class _Say:
    """Names and sentences in English, and in Chinese too when asked."""

    def __init__(self, zh: bool):
        self.zh = zh

    def name(self, item: dict) -> str:
        return f"{item['name']}\n{item['name_zh']}" if self.zh else item["name"]

    def label(self, key: str) -> str:
        from tfcli.analysis.params.labels import LABELS

        en, zh = LABELS[key]
        return f"{en}\n{zh}" if self.zh else en

    def both(self, en: str, zh: str) -> str:
        return f"{en}\n{zh}" if self.zh else en


def _render(report: dict, zh: bool) -> None:
    say = _Say(zh)
    _header(report, say)
    if "from" in report:
        _render_from(report, say)
        return
    _render_tally(report, say)
    _render_exact(report, say)
    _render_difference(report, say)
    _render_costs(report, say)
    _say(say.both("Compare with the tensors of a real file: tfcli params --from MODEL_DIR", "与真实权重文件中的张量对照：tfcli params --from 模型目录"), "dim")


def _say(text: str, style: str = "") -> None:
    from rich.markup import escape

    out.print(escape(text), style=style or None)


def _header(report: dict, say: _Say) -> None:
    from rich.markup import escape

    s = report["shape"]
    heads = f"{s['heads']} heads × {s['head_dim']}"
    if s["kv_heads"] != s["heads"]:
        heads = f"{s['heads']} query heads × {s['head_dim']} ({s['kv_heads']} key/value heads)"
    out.print(f"[bold]{escape(report['title'])}[/]  [dim]{escape(report['name'])} · {escape(report['source'])}[/]")
    _say(f"{s['layers']:,} layers · d_model {s['d_model']:,} · {heads} · d_ff {s['d_ff']:,}")
    _say(f"vocabulary {s['vocab']:,} · context {s['context']:,}")
    style = [
        {"gelu": "GELU MLP", "swiglu": "SwiGLU MLP"}[s["mlp"]],
        {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[s["norm"]],
        {"learned": "learned positions", "rope": "RoPE positions"}[s["positions"]],
        _biases(s),
        "tied embeddings" if s["tied"] else "untied embeddings",
    ]
    _say(" · ".join(style), "dim")
    if report["note"]:
        _say(f"note: {report['note']}", "dim")
    out.print()


def _biases(s: dict) -> str:
    """Which projections have biases: all, none, or which (Qwen2: Q, K and V only)."""
    if s["qkv_bias"] and s["o_bias"] and s["mlp_bias"]:
        return "biases"
    parts = ["attention" if s["o_bias"] else "Q/K/V"] if s["qkv_bias"] else ["attention output"] if s["o_bias"] else []
    parts += ["MLP"] if s["mlp_bias"] else []
    return " and ".join(parts) + " biases" if parts else "no biases"


def _table(title: str, *columns: tuple[str, dict]):
    """A borderless table with a bold title; columns are (header, Rich column options)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for header, opts in columns:
        table.add_column(header, **opts)
    return table


_NAME = ("", {"ratio": 1})
_FORMULA = ("formula", {"style": "dim", "no_wrap": True})
_NUMBERS = ("", {"style": "dim", "no_wrap": True})
_COUNT = ("parameters", {"justify": "right", "no_wrap": True, "style": "cyan"})


def _named(r: dict, say: _Say) -> str:
    from rich.markup import escape

    return escape(say.name(r)) + (f"\n[dim]{escape(r['note'])}[/]" if r["note"] else "")


def _render_tally(report: dict, say: _Say) -> None:
    from rich.markup import escape

    t, s = report["tally_3b1b"], report["shape"]
    table = _table(say.both("3Blue1Brown's tally: weight matrices only", "3Blue1Brown 的统计：只计权重矩阵"), _NAME, _FORMULA, _NUMBERS, _COUNT)
    for r in t["rows"]:
        table.add_row(_named(r, say), escape(r["formula"]), escape(r["numbers"]), f"{r['count']:,}")
    table.add_section()
    table.add_row(f"[bold]{say.label('total')}[/]", "", "", f"[bold]{t['total']:,}[/]")
    out.print(table)
    notes = [
        say.both(
            "Embedding and unembedding are counted as two matrices. Per head, Value is the value-down map (D → Dh) "
            "and Output the value-up map (Dh → D).",
            "嵌入与反嵌入按两个矩阵计。每个头的“值”是值降维映射（D → Dh），“输出”是值升维映射（Dh → D）。",
        )
    ]
    if s["kv_heads"] != s["heads"]:
        q = s["heads"] // s["kv_heads"]
        notes.append(
            say.both(
                f"Grouped-query attention: the Key and Value rows count the {s['kv_heads']} key/value heads, each shared by {q} query heads.",
                f"分组查询注意力：键和值两行按 {s['kv_heads']} 个键值头计算，每个键值头由 {q} 个查询头共享。",
            )
        )
    if s["mlp"] == "swiglu":
        notes.append(say.both("SwiGLU MLP: the Up-projection holds two matrices, gate and up.", "SwiGLU MLP：上投影包含门控和上投影两个矩阵。"))
    for n in notes:
        _say(n, "dim")
    out.print()

    steps = _table(say.both("Step by step", "逐步计算"), _NAME, _FORMULA, _NUMBERS, _COUNT)
    for r in t["steps"]:
        steps.add_row(_named(r, say), escape(r["formula"]), escape(r["numbers"]), f"{r['count']:,}")
    out.print(steps)


def _render_exact(report: dict, say: _Say) -> None:
    from rich.markup import escape

    e = report["exact"]
    table = _table(say.both("Exact count: every tensor a checkpoint stores", "精确计数：检查点中存放的每一个张量"), _NAME, _FORMULA, _COUNT, ("%", {"justify": "right", "no_wrap": True, "style": "dim"}))
    for r in e["rows"]:
        share = 100 * r["count"] / e["total"]
        table.add_row(_named(r, say), escape(r["formula"]), f"{r['count']:,}", f"{share:.1f}" if share >= 0.1 or not r["count"] else "<0.1")
    table.add_section()
    table.add_row(f"[bold]{say.label('total')}[/]", "", f"[bold]{e['total']:,}[/]", "100")
    out.print(table)


def _render_difference(report: dict, say: _Say) -> None:
    d, e, t, s = report["difference"], report["exact"], report["tally_3b1b"], report["shape"]
    table = _table(say.both("Why the two totals differ", "两个总数为何不同"), _NAME, ("", {"justify": "right", "no_wrap": True, "style": "cyan"}))
    table.show_header = False
    # From the exact count to the tally: each row is what the tally adds or leaves out.
    table.add_row(say.label("exact_total"), f"{e['total']:,}")
    for r in d["rows"]:
        if r["count"]:
            table.add_row(_named({**r, "note": ""}, say), f"{r['count']:+,}".replace("-", "−"))
    table.add_section()
    table.add_row("[bold]3Blue1Brown[/]", f"[bold]{t['total']:,}[/]")
    out.print(table)

    vd = s["vocab"] * s["d_model"]
    small = t["total"] - e["total"] - (vd if s["tied"] else 0)
    if s["tied"]:
        _say(
            say.both(
                f"The tally counts the unembedding as a matrix of its own, but this model ties it to the embedding: a checkpoint "
                f"stores that {s['vocab']:,} × {s['d_model']:,} matrix once. Stored twice (untied, as some tools report), "
                f"the exact count would be {e['untied_total']:,}.",
                f"统计把反嵌入当作独立的矩阵，但本模型的反嵌入与嵌入共享权重：检查点只存一次这个 {s['vocab']:,} × {s['d_model']:,} 矩阵。"
                f"若存两份（不共享，一些工具这样报告），精确计数将是 {e['untied_total']:,}。",
            )
        )
    if small:
        left = [(r["count"], en, zh) for r, en, zh in zip(d["rows"][1:], ("the position table", "the biases", "the norms"), ("位置表", "偏置", "归一化参数")) if r["count"]]
        en = " and ".join(", ".join(x[1] for x in left).rsplit(", ", 1))
        zh = "、".join(x[2] for x in left)
        _say(
            say.both(
                f"The tally also leaves out {en}: {-small:,} parameters, {100 * -small / e['total']:.2f}% of the exact count.",
                f"统计还略去了{zh}：共 {-small:,} 个，占精确计数的 {100 * -small / e['total']:.2f}%。",
            )
        )
    q = report["quoted"]
    if q:
        if q["rounds_to"]:
            en = f"{q['source']}: {q['figure']}. The exact {e['total']:,} rounds to it ({q['relative']:+.1%})."
            zh = f"{q['source']}：{q['figure']}。精确值 {e['total']:,} 四舍五入后与之相符（{q['relative']:+.1%}）。"
        else:
            en = f"{q['source']}: {q['figure']}. The exact {e['total']:,} is {q['relative']:+.1%} from it: the printed figure is not this count rounded."
            zh = f"{q['source']}：{q['figure']}。精确值 {e['total']:,} 与之相差 {q['relative']:+.1%}：印出的数字并非此计数的四舍五入。"
        _say(say.both(en, zh), "bold")
    out.print()


def _render_costs(report: dict, say: _Say) -> None:
    from rich.markup import escape

    s, c, m = report["shape"], report["compute"], report["memory"]
    L, T, H, Hkv, Dh = s["layers"], s["context"], s["heads"], s["kv_heads"], s["head_dim"]
    table = _table(say.both("What a token costs", "一个词元的开销"), _NAME, ("formula", {"style": "dim", "ratio": 1}), ("", {"justify": "right", "no_wrap": True, "style": "cyan"}))

    def row(en: str, zh: str, formula: str, value: str) -> None:
        table.add_row(escape(f"{en}\n{zh}" if say.zh else en), escape(formula), value)

    row("N: weights a token is multiplied by", "N：词元要乘过的权重", "layer matrices + unembedding", f"{c['matmul_params']:,}")
    row("attention FLOPs per token", "每词元注意力 FLOPs", f"2·L·T·H·Dh\n= 2 × {L} × {T:,} × {H * Dh:,}", _si(c["attention"], "FLOP"))
    row("forward FLOPs per token", "每词元前向 FLOPs", "2·N + attention", _si(c["forward"], "FLOP"))
    row("training FLOPs per token", "每词元训练 FLOPs", "3 × forward ≈ 6·N", _si(c["training"], "FLOP"))
    table.add_section()
    for dtype, n in m["weights"].items():
        per = {"fp32": "4 bytes", "fp16": "2 bytes", "int8": "1 byte", "int4": "½ byte"}[dtype]
        row(f"weights in {dtype}", f"{dtype} 权重", f"exact count × {per}", _bytes(n))
    table.add_section()
    kv = m["kv_cache"]
    for dtype, b in (("fp32", 4), ("fp16", 2)):
        row(f"KV cache per token, {dtype}", f"每词元 KV 缓存（{dtype}）", f"2 × L × Hkv × Dh × {b}\n= 2 × {L} × {Hkv} × {Dh} × {b}", _bytes(kv["per_token"][dtype]))
        row(f"  … for the full context of {T:,}", f"完整上下文 {T:,}", "× T", _bytes(kv["full_context"][dtype]))
    table.add_section()
    a = m["attention_pattern"]
    row("one attention pattern (a head, a layer)", "一个注意力模式（一头一层）", f"T² = {T:,}²", f"{a['per_head']:,} scores")
    row("  … all heads of one layer, fp32", "一层全部头（fp32）", "H × T² × 4 bytes", _bytes(a["bytes_per_layer_fp32"]))
    row("  … all heads of all layers", "全部层全部头", "L × H × T²", f"{a['all_layers']:,} scores")
    out.print(table)
    _say(
        say.both(
            "FLOPs count a multiply-add as 2 (Kaplan et al. 2020, Table 1); the attention term averages a causal context of T. "
            "Embedding lookups, biases and norms are left out. Doubling the context doubles the KV cache but quadruples "
            "the attention patterns: that square is what limits context length. GB = 10⁹ bytes.",
            "FLOPs 把一次乘加算作 2（Kaplan 等 2020，表 1）；注意力项按长度 T 的因果上下文取平均。嵌入查表、偏置和归一化未计入。"
            "上下文加倍，KV 缓存加倍，注意力模式却变为四倍：正是这个平方限制了上下文长度。GB = 10⁹ 字节。",
        ),
        "dim",
    )
    out.print()


def _render_from(report: dict, say: _Say) -> None:
    from rich.markup import escape

    f = report["from"]
    dtypes = ", ".join(f"{n} {d}" for d, n in f["dtypes"].items())
    files = f"{len(f['files'])} file" + ("s" if len(f["files"]) != 1 else "")
    _say(
        say.both(
            f"{f['path']}: {f['tensors']} tensors in {files} ({dtypes}), read from the header only",
            f"{f['path']}：{len(f['files'])} 个文件中的 {f['tensors']} 个张量（{dtypes}），只读文件头",
        ),
        "bold",
    )
    count = {"justify": "right", "no_wrap": True, "style": "cyan"}
    table = _table("", _NAME, (say.both("from the shape", "按形状计算"), count), (say.both("in the file", "文件中"), count), ("", {"no_wrap": True}))
    for r in f["rows"]:
        diff = r["actual"] - r["analytic"]
        mark = "[bold red]✗ " + f"{diff:+,}".replace("-", "−") + "[/]" if diff else "[green]✓[/]"
        table.add_row(escape(say.name(r)), f"{r['analytic']:,}", f"{r['actual']:,}", mark)
    if f["uncategorised"]:
        n = sum(_prod(u["shape"]) for u in f["uncategorised"])
        table.add_row(escape(say.label("uncategorised")), "0", f"{n:,}", f"[bold red]✗ {n:+,}[/]")
    table.add_section()
    same = f["analytic_total"] == f["actual_total"]
    table.add_row(f"[bold]{say.label('total')}[/]", f"[bold]{f['analytic_total']:,}[/]", f"[bold]{f['actual_total']:,}[/]", "[green]✓[/]" if same else "[bold red]✗[/]")
    out.print(table)
    for u in f["uncategorised"]:
        _say(say.both(f"not categorised: {u['name']} {u['shape']}", f"未归类：{u['name']} {u['shape']}"), "red")
    if f["mismatched"]:
        _say(
            say.both(
                "A category that differs holds a tensor that is missing, extra, or of another shape than config.json implies.",
                "数目不符的类别中，有张量缺失、多余，或形状与 config.json 所示不同。",
            ),
            "red",
        )
    if f["buffers"]:
        _say(
            say.both(
                f"{len(f['buffers'])} stored buffer(s) not counted: constants such as GPT-2's causal mask (attn.bias), not parameters.",
                f"未计入 {len(f['buffers'])} 个缓冲张量：它们是常量（如 GPT-2 的因果掩码 attn.bias），不是参数。",
            ),
            "dim",
        )
    unembedding = next(r for r in f["rows"] if r["key"] == "unembedding")
    if report["shape"]["tied"] and unembedding["actual"]:
        _say(
            say.both(
                "config.json ties the unembedding to the embedding, yet the file also stores lm_head.weight: a copy.",
                "config.json 让反嵌入与嵌入共享权重，但文件中还存了 lm_head.weight：一份副本。",
            ),
            "dim",
        )
    if f["agree"]:
        _say(say.both("The tensors in the file agree with the count from the shape, category by category.", "文件中的张量与按形状计算的结果逐类一致。"), "bold green")


def _prod(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _si(n: int, unit: str) -> str:
    for scale, prefix in ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:,} {unit}"


def _bytes(n: int) -> str:
    for scale, unit in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:,} bytes"


def _list_presets(as_json: bool, zh: bool) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from tfcli.analysis.params.presets import PRESETS
    from tfcli.analysis.params.shape import shape_dict
    from tfcli.analysis.params.tally import exact

    rows = []
    for p in PRESETS.values():
        rows.append({"name": p.name, "title": p.title, "quoted": p.quoted, "source": p.source, "exact": exact(p.config).total, "shape": shape_dict(p.config), "note": p.note})
    if as_json:
        print(json.dumps({"presets": rows}, ensure_ascii=False))
        return
    say = _Say(zh)
    table = Table(title=say.both("Presets", "预设"), title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name in ("preset", "L", "D", "H×Dh", "Hkv", "V", "T", "exact", "quoted"):
        table.add_column(name, justify="left" if name == "preset" else "right", no_wrap=True)
    for r in rows:
        s = r["shape"]
        table.add_row(
            escape(r["name"]),
            str(s["layers"]),
            f"{s['d_model']:,}",
            f"{s['heads']}×{s['head_dim']}",
            str(s["kv_heads"]),
            f"{s['vocab']:,}",
            f"{s['context']:,}",
            f"{r['exact']:,}",
            r["quoted"],
        )
    out.print(table)
    _say(
        say.both(
            "exact: every tensor a checkpoint stores; quoted: the figure the authors printed (GPT-3 paper Table 2.1, GPT-2 paper Table 2).",
            "exact：检查点存放的全部参数；quoted：作者公布的数字（GPT-3 论文表 2.1，GPT-2 论文表 2）。",
        ),
        "dim",
    )
