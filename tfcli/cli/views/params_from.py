"""Drawing the `tfcli params --from` comparison (the counts against a folder's real tensors) and the
--list-presets table; the rest of the report is views/params.py. Drawing only."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

from tfcli import numbers as num

from ..console import out
from .params import _NAME, _Say, _say, _table


def _render_from(report: dict, say: _Say) -> None:
    """--from: the file's tensors against the count from the shape, category by category."""
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
    _from_table(f, say)
    _from_remarks(report, say)


def _from_table(f: dict, say: _Say) -> None:
    """Each category's count from the shape beside the file's, marked where they differ."""
    count = {"justify": "right", "no_wrap": True, "style": "cyan"}
    table = _table(
        "",
        _NAME,
        (say.both("from the shape", "按形状计算"), count),
        (say.both("in the file", "文件中"), count),
        ("", {"no_wrap": True}),
    )
    for r in f["rows"]:
        diff = r["actual"] - r["analytic"]
        mark = f"[bold red]✗ {num.signed(diff)}[/]" if diff else "[green]✓[/]"
        table.add_row(escape(say.name(r)), num.count(r["analytic"]), num.count(r["actual"]), mark)
    if f["uncategorised"]:
        n = f["uncategorised_total"]
        table.add_row(escape(say.label("uncategorised")), "0", num.count(n), f"[bold red]✗ {num.signed(n)}[/]")
    table.add_section()
    same = f["analytic_total"] == f["actual_total"]
    table.add_row(
        f"[bold]{say.label('total')}[/]",
        f"[bold]{num.count(f['analytic_total'])}[/]",
        f"[bold]{num.count(f['actual_total'])}[/]",
        "[green]✓[/]" if same else "[bold red]✗[/]",
    )
    out.print(table)


def _from_remarks(report: dict, say: _Say) -> None:
    """What the table cannot say: tensors left out, mismatches, buffers, a stored copy of a tied matrix."""
    f = report["from"]
    for u in f["uncategorised"]:
        _say(say.both(f"not categorised: {u['name']} {u['shape']}", f"未归类：{u['name']} {u['shape']}"), "red")
    if f["mismatched"]:
        _say(
            say.both(
                "A category that differs holds a tensor that is missing, extra, or of another shape than config.json "
                "implies.",
                "数目不符的类别中，有张量缺失、多余，或形状与 config.json 所示不同。",
            ),
            "red",
        )
    if f["buffers"]:
        _say(
            say.both(
                f"{len(f['buffers'])} stored buffer(s) not counted: constants such as GPT-2's causal mask (attn.bias), "
                "not parameters.",
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
        _say(
            say.both(
                "The tensors in the file agree with the count from the shape, category by category.",
                "文件中的张量与按形状计算的结果逐类一致。",
            ),
            "bold green",
        )


def render_presets(rows: list[dict], zh: bool) -> None:
    """The --list-presets table (rows from tfcli.analysis.params.report.presets_list)."""
    say = _Say(zh)
    names = ("preset", "L", "D", "H×Dh", "Hkv", "V", "T", "exact", "quoted")
    cells = [
        (escape(r["name"]), str(r["shape"]["layers"]), num.count(r["shape"]["d_model"]),
         f"{r['shape']['heads']}×{r['shape']['head_dim']}", str(r["shape"]["kv_heads"]), num.count(r["shape"]["vocab"]),
         num.count(r["shape"]["context"]), num.count(r["exact"]), r["quoted"])
        for r in rows
    ]  # fmt: skip

    def table(columns: list[int], title: bool):
        t = Table(
            title=say.both("Presets", "预设") if title else None,
            title_justify="left",
            title_style="bold",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        for i in columns:
            t.add_column(names[i], justify="left" if i == 0 else "right", no_wrap=True)
        for row in cells:
            t.add_row(*(row[i] for i in columns))
        return t

    # The layout rule (cli/layout.py): numbers are never cut; the counts go on in a second table
    # (the preset's name again first) when the shape and the counts do not fit side by side.
    whole = table(list(range(len(names))), True)
    if out.measure(whole, options=out.options.update_width(10_000)).maximum <= out.width:  # its natural width
        out.print(whole)
    else:
        out.print(table([0, 1, 2, 3, 4, 5, 6], True))
        out.print(table([0, 7, 8], False))
    _say(
        say.both(
            "exact: every tensor a checkpoint stores; quoted: the figure the authors printed (GPT-3 paper Table 2.1, "
            "GPT-2 paper Table 2).",
            "exact：检查点存放的全部参数；quoted：作者公布的数字（GPT-3 论文表 2.1，GPT-2 论文表 2）。",
        ),
        "dim",
    )
