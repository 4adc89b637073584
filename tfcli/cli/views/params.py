"""Drawing the `tfcli params` report: the header, the tally and its steps, the exact count, why the
totals differ, what a token costs, and the --from comparison; and the --list-presets table.

Drawing only: every number comes from the report dict (tfcli/analysis/params/report.py), which
--json prints as it is, and is written by tfcli/numbers.py.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.markup import escape

from tfcli import numbers as num
from tfcli.analysis.params.presets import SOURCES_ZH
from tfcli.engine.config import MLPS, NORMS, POSITIONS

from ..console import out
from .params_say import _NAME, _Say, _say, _table


def render(report: dict, zh: bool) -> None:
    """The whole report: its header, then the --from comparison, or the counts and the costs."""
    say = _Say(zh)
    _header(report, say)
    if "from" in report:
        from .params_from import _render_from

        _render_from(report, say)
        return
    _render_tally(report, say)
    _render_exact(report, say)
    _render_difference(report, say)
    _render_costs(report, say)
    _say(
        say.both(
            "Compare with the tensors of a real file: tfcli params --from MODEL_DIR",
            "与真实权重文件中的张量对照：tfcli params --from 模型目录",
        ),
        "dim",
    )


def _header(report: dict, say: _Say) -> None:
    s = report["shape"]
    if s["kv_heads"] == s["heads"]:
        heads, heads_zh = f"{s['heads']} heads × {s['head_dim']}", f"{s['heads']} 个头 × {s['head_dim']}"
    else:
        plural = "s" if s["kv_heads"] != 1 else ""
        heads = f"{s['heads']} query heads × {s['head_dim']} ({s['kv_heads']} key/value head{plural})"
        heads_zh = f"{s['heads']} 个查询头 × {s['head_dim']}（{s['kv_heads']} 个键值头）"
    source = SOURCES_ZH.get(report["source"], report["source"]) if say.zh else report["source"]
    out.print(f"[bold]{escape(report['title'])}[/]  [dim]{escape(report['name'])} · {escape(source)}[/]")
    d, ff = num.count(s["d_model"]), num.count(s["d_ff"])
    _items(
        say,
        [f"{num.count(s['layers'])} blocks", f"d_model {d}", heads, f"d_ff {ff}"],
        [f"{num.count(s['layers'])} 个块", f"d_model {d}", heads_zh, f"d_ff {ff}"],
    )
    _items(
        say,
        [f"vocabulary {num.count(s['vocab'])}", f"context {num.count(s['context'])}"],
        [f"词表 {num.count(s['vocab'])}", f"上下文 {num.count(s['context'])}"],
    )
    style = [
        MLPS[s["mlp"]].label,
        NORMS[s["norm"]].label + (f" ×{s['norms_per_block']} per block" if s["norms_per_block"] != 2 else ""),
        *(["Q/K norms"] if s["qk_norm"] else []),
        POSITIONS[s["positions"]].label,
        _biases(s),
        "tied embeddings" if s["tied"] else "untied embeddings",
    ]
    style_zh = [
        MLPS[s["mlp"]].label,
        NORMS[s["norm"]].label + (f"，每个块 {s['norms_per_block']} 个" if s["norms_per_block"] != 2 else ""),
        *(["Q/K 归一化"] if s["qk_norm"] else []),
        {"learned": "学到的位置表", "rope": "RoPE 位置编码"}.get(s["positions"], POSITIONS[s["positions"]].label),
        _biases(s, zh=True),
        "嵌入与反嵌入共享权重" if s["tied"] else "嵌入与反嵌入不共享权重",
    ]
    _items(say, style, style_zh, "dim")
    if report["note"]:  # where the preset departs from what its source printed
        _say(
            say.both(f"note: {report['note']}", f"注：{report['note_zh']}")
            if report.get("note_zh")
            else f"note: {report['note']}",
            "dim",
        )
    out.print()


def _items(say: _Say, en: list[str], zh: list[str], style: str = "") -> None:
    """A line of items joined by ' · ', in Chinese with --lang zh; a line too long for
    the width breaks between items (cli/layout.py), never inside one ('d_ff' / '3,072')."""
    for parts in (zh,) if say.zh else (en,):
        line = ""
        for item in parts:
            if line and cell_len(line + " · " + item) > out.width:
                out.print(escape(line), style=style or None)
                line = item
            else:
                line = f"{line} · {item}" if line else item
        out.print(escape(line), style=style or None)


# The words of _biases, English and Chinese: all biases, attention (Q/K/V and output), Q/K/V only, output only,
# MLP, the joiner, "... biases", none
_BIAS_WORDS = {False: ("biases", "attention", "Q/K/V", "attention output", "MLP", " and ", "{} biases", "no biases"),
               True: ("有偏置", "注意力", "Q/K/V", "注意力输出", "MLP", "和", "{}有偏置", "无偏置")}  # fmt: skip


def _biases(s: dict, zh: bool = False) -> str:
    """Which projections have biases: all, none, or which (Qwen2: Q, K and V only); in Chinese with `zh`."""
    every, attention, qkv, output, mlp, joiner, some, none = _BIAS_WORDS[zh]
    if s["qkv_bias"] and s["o_bias"] and s["mlp_bias"]:
        return every
    parts = [attention if s["o_bias"] else qkv] if s["qkv_bias"] else [output] if s["o_bias"] else []
    parts += [mlp] if s["mlp_bias"] else []
    return some.format(joiner.join(parts)) if parts else none


_FORMULA = ("formula", {"style": "dim", "no_wrap": True})
_NUMBERS = ("", {"style": "dim", "no_wrap": True})
_COUNT = ("parameters", {"justify": "right", "no_wrap": True, "style": "cyan"})


def _named(r: dict, say: _Say) -> str:
    """A row's name, and its note (dim) under it, in Chinese with --lang zh."""
    note = say.both(r["note"], r["note_zh"]) if r["note"] and r.get("note_zh") else r["note"]
    return escape(say.name(r)) + (f"\n[dim]{escape(note)}[/]" if note else "")


def _render_tally(report: dict, say: _Say) -> None:
    t, s = report["tally_3b1b"], report["shape"]
    out.print(
        _formula_table(
            say.both("3Blue1Brown's tally: weight matrices only", "3Blue1Brown 的统计：只计权重矩阵"),
            t["rows"],
            say,
            t["total"],
        )
    )
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
                f"Grouped-query attention: the Key and Value rows count the {s['kv_heads']} key/value heads, each "
                f"shared by {q} query heads.",
                f"分组查询注意力：键和值两行按 {s['kv_heads']} 个键值头计算，每个键值头由 {q} 个查询头共享。",
            )
        )
    if MLPS[s["mlp"]].matrices == 3:
        label = MLPS[s["mlp"]].label
        notes.append(
            say.both(
                f"{label}: the Up-projection holds two matrices, gate and up.",
                f"{label}：上投影包含门控和上投影两个矩阵。",
            )
        )
    for n in notes:
        _say(n, "dim")
    out.print()

    out.print(_formula_table(say.both("Step by step", "逐步计算"), t["steps"], say))


def _formula_table(title: str, rows: list[dict], say: _Say, total: int | None = None):
    """Rows of name, formula, the formula's numbers and the count. The layout rule (cli/layout.py):
    when the four columns do not fit the width, the numbers go under their formula, so that no
    name or number is cut."""

    def build(apart: bool):
        table = _table(title, _NAME, _FORMULA, *([_NUMBERS] if apart else []), _COUNT, say=say)
        for r in rows:
            formula = escape(say.formula(r)) if apart else escape(say.formula(r)) + "\n" + escape(r["numbers"])
            table.add_row(_named(r, say), formula, *([escape(r["numbers"])] if apart else []), num.count(r["count"]))
        if total is not None:
            table.add_section()
            table.add_row(
                f"[bold]{say.label('total')}[/]", "", *([""] if apart else []), f"[bold]{num.count(total)}[/]"
            )
        return table

    table = build(True)
    return table if out.measure(table, options=out.options.update_width(10_000)).maximum <= out.width else build(False)


def _render_exact(report: dict, say: _Say) -> None:
    e = report["exact"]
    table = _table(
        say.both("Exact count: every tensor a checkpoint stores", "精确计数：检查点中存放的每一个张量"),
        _NAME,
        _FORMULA,
        _COUNT,
        ("%", {"justify": "right", "no_wrap": True, "style": "dim"}),
        say=say,
    )
    for r in e["rows"]:
        table.add_row(_named(r, say), escape(say.formula(r)), num.count(r["count"]), num.share(r["count"], e["total"]))
    table.add_section()
    table.add_row(f"[bold]{say.label('total')}[/]", "", f"[bold]{num.count(e['total'])}[/]", "100")
    out.print(table)


def _render_difference(report: dict, say: _Say) -> None:
    d, e, t, s = report["difference"], report["exact"], report["tally_3b1b"], report["shape"]
    table = _table(
        say.both("Why the two totals differ", "两个总数为何不同"),
        _NAME,
        ("", {"justify": "right", "no_wrap": True, "style": "cyan"}),
    )
    table.show_header = False
    # From the exact count to the tally: each row is what the tally adds or leaves out.
    table.add_row(say.label("exact_total"), num.count(e["total"]))
    for r in d["rows"]:
        if r["count"]:
            table.add_row(_named({**r, "note": ""}, say), num.signed(r["count"]))
    table.add_section()
    table.add_row("[bold]3Blue1Brown[/]", f"[bold]{num.count(t['total'])}[/]")
    out.print(table)

    small = sum(r["count"] for r in d["rows"][1:])  # what the tally leaves out, besides counting the unembedding apart
    if s["tied"]:
        _say(
            say.both(
                "The tally counts the unembedding as a matrix of its own, but this model ties it to the embedding: a "
                "checkpoint "
                f"stores that {num.count(s['vocab'])} × {num.count(s['d_model'])} matrix once. Stored twice (untied, "
                "as some tools report), "
                f"the exact count would be {num.count(e['untied_total'])}.",
                f"统计把反嵌入当作独立的矩阵，但本模型的反嵌入与嵌入共享权重：检查点只存一次这个 {num.count(s['vocab'])} × {num.count(s['d_model'])} 矩阵。"
                f"若存两份（不共享，一些工具这样报告），精确计数将是 {num.count(e['untied_total'])}。",
            )
        )
    if small:
        left = [
            (r["count"], en, zh)
            for r, en, zh in zip(
                d["rows"][1:], ("the position table", "the biases", "the norms"), ("位置表", "偏置", "归一化参数")
            )
            if r["count"]
        ]
        en = " and ".join(", ".join(x[1] for x in left).rsplit(", ", 1))
        zh = "、".join(x[2] for x in left)
        _say(
            say.both(
                f"The tally also leaves out {en}: {num.count(-small)} parameters, {num.percent(-small, e['total'])} of "
                "the exact count.",
                f"统计还略去了{zh}：共 {num.count(-small)} 个，占精确计数的 {num.percent(-small, e['total'])}。",
            )
        )
    q = report["quoted"]
    if q:
        from tfcli.analysis.params.presets import SOURCES_ZH

        source_zh = SOURCES_ZH.get(q["source"], q["source"])
        if q["rounds_to"]:
            exact, off = num.count(e["total"]), num.signed_percent(q["relative"])
            en = f"{q['source']}: {q['figure']}. The exact {exact} rounds to it ({off})."
            zh = f"{source_zh}：{q['figure']}。精确值 {exact} 四舍五入后与之相符（{off}）。"
        else:
            exact, off = num.count(e["total"]), num.signed_percent(q["relative"])
            en = (f"{q['source']}: {q['figure']}. The exact {exact} is {off} from it:"
                  " the printed figure is not this count rounded.")
            zh = f"{source_zh}：{q['figure']}。精确值 {exact} 与之相差 {off}：印出的数字并非此计数的四舍五入。"
        _say(say.both(en, zh), "bold")
    out.print()


def _cost_names() -> tuple[str, dict]:
    """The cost rows' name column: from 80 columns each name on one line (they are short enough);
    narrower, they wrap, so that a formula that has no space to wrap at is not cut instead."""
    return ("", {"no_wrap": True}) if out.width >= 80 else _NAME


def _render_costs(report: dict, say: _Say) -> None:
    s, c, m = report["shape"], report["compute"], report["memory"]
    T = s["context"]
    table = _table(
        say.both("What a token costs", "一个词元的开销"),
        _cost_names(),
        ("formula", {"style": "dim", "ratio": 1}),
        ("", {"justify": "right", "no_wrap": True, "style": "cyan"}),
        say=say,
    )

    def row(en: str, zh: str, formula: tuple[str, str] | str, value: str, unit: tuple[str, str] | None = None) -> None:
        """A row: its name, its formula (English and Chinese when it has words), its value (and the
        value's unit, glossed in Chinese under it)."""
        f_en, f_zh = (formula, formula) if isinstance(formula, str) else formula
        text = f"{value} {unit[0]}" if unit else value
        table.add_row(
            escape(say.both(en, zh)),
            escape(say.both(f_en, f_zh) if f_zh != f_en else f_en),
            say.both(text, unit[1]) if unit else text,
        )

    row(
        "N: weights per token",
        "N：词元要乘过的权重",
        ("block matrices + unembedding", "块内矩阵 + 反嵌入"),
        num.count(c["matmul_params"]),
    )
    row(
        "attention FLOPs per token",
        "每词元注意力 FLOPs",
        f"{c['formula']['attention']}\n= {c['numbers']['attention']}",
        num.si(c["attention"], "FLOP"),
    )
    row(
        "forward FLOPs per token", "每词元前向 FLOPs", ("2·N + attention", "2·N + 注意力"), num.si(c["forward"], "FLOP")
    )
    row(
        "training FLOPs per token",
        "每词元训练 FLOPs",
        ("3 × forward ≈ 6·N", "3 × 前向 ≈ 6·N"),
        num.si(c["training"], "FLOP"),
    )
    table.add_section()
    for dtype, n in m["weights"].items():
        per = {"fp32": "4", "fp16": "2", "int8": "1", "int4": "½"}[dtype]
        row(
            f"weights in {dtype}",
            f"{dtype} 权重",
            (f"exact count × {per} byte{'' if per in '1½' else 's'}", f"精确计数 × {per} 字节"),
            num.size(n),
        )
    table.add_section()
    kv = m["kv_cache"]
    for dtype in kv["per_token"]:  # fp32, fp16, and q8_0 where a head's size allows its blocks
        row(
            f"KV cache per token, {dtype}",
            f"每词元 KV 缓存（{dtype}）",
            f"{kv['rows'][dtype]['formula']}\n= {kv['rows'][dtype]['numbers']}",
            num.size(kv["per_token"][dtype]),
        )
        row(
            f"  … for {num.count(T)} tokens",
            f"  … 完整上下文 {num.count(T)}",
            "× T",
            num.size(kv["full_context"][dtype]),
        )
    table.add_section()
    a = m["attention_pattern"]
    scores = ("scores", "个分数")
    row("one head's pattern", "一个头的注意力模式", f"T² = {num.count(T)}²", num.count(a["per_head"]), scores)
    row(
        "  … a block's heads, fp32",
        "  … 一个块的全部头（fp32）",
        ("H × T² × 4 bytes", "H × T² × 4 字节"),
        num.size(a["bytes_per_layer_fp32"]),
    )
    row("  … all blocks' heads", "  … 全部块的全部头", "L × H × T²", num.count(a["all_layers"]), scores)
    out.print(table)
    _say(
        say.both(
            "FLOPs count a multiply-add as 2 (Kaplan et al. 2020, Table 1); the attention term averages a causal "
            "context of T. "
            "Embedding lookups, biases and norms are left out. Doubling the context doubles the KV cache but "
            "quadruples "
            "the attention patterns: that square is what limits context length. GB = 10⁹ bytes.",
            "FLOPs 把一次乘加算作 2（Kaplan 等 2020，表 1）；注意力项按长度 T 的因果上下文取平均。嵌入查表、偏置和归一化未计入。"
            "上下文加倍，KV 缓存加倍，注意力模式却变为四倍：正是这个平方限制了上下文长度。GB = 10⁹ 字节。",
        ),
        "dim",
    )
    out.print()
