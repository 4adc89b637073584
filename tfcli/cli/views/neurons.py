"""tfcli neurons drawn: each token's strongest neurons, or one neuron across the text and the tokens
its output pushes. Drawing only: the numbers come from the report dict that --json prints."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from tfcli.engine.config import MLPS

from ..console import out
from .inside import bar, cell, say, uses_colour


def _questions(report: dict, zh: bool) -> None:
    f, d = report["d_ff"], report["d_model"]
    how, how_zh = MLPS[report["mlp"]].hidden, MLPS[report["mlp"]].hidden_zh
    say(out, zh,
        f"Block {report['block']}'s MLP asks every token's vector F = {f:,} questions at once ({f / d:.2f} × D = {d}): "
        "each "
        f"neuron is a direction in the vector's space, its activation {how} the answer. The answers, each times its "
        "row of "
        f"W_down, are added to the vector; each token is on its own here (no looking at other tokens).",
        f"第 {report['block']} 个块的 MLP 同时向每个词元的向量提出 F = {f:,} 个问题（{f / d:.2f} × D = {d}）：每个神经元是向量空间中的一个方向，"
        f"它的激活值 {how_zh} 就是答案。这些答案各自乘以 W_down 中对应的一行，再加回到向量上；这里每个词元各自独立（不看其他词元）。")  # fmt: skip


def table(report: dict, labels: list[str], zh: bool) -> None:
    colour = uses_colour(out)
    if zh:
        out.print(f"[bold]{report['model']}[/] · 第 {report['block']} 个块 · 每个词元激活最强的神经元")
    else:
        out.print(f"[bold]{report['model']}[/] · block {report['block']} · the neurons each token turns on most")
    rows = report["tokens"]
    top = max((n["activation"] for r in rows for n in r["neurons"]), default=1.0)
    t = Table(box=None, padding=(0, 1), pad_edge=False)
    t.add_column("#", justify="right", style="dim")
    t.add_column("词元" if zh else "token", no_wrap=True)
    k = len(rows[0]["neurons"]) if rows else 0
    for j in range(k):
        t.add_column(f"{j + 1}", no_wrap=True)
    for r in rows:
        t.add_row(
            str(r["position"]),
            repr(labels[r["position"]]),
            *[
                cell(f"{n['neuron']:>5} {n['activation']:6.2f}", max(n["activation"], 0.0), 12, colour, 0.0, top)
                for n in r["neurons"]
            ],
        )
    out.print(t)
    if zh:
        common = "，".join(f"#{c['neuron']}（{c['tokens']} 个词元）" for c in report["most_common"])
        out.print(f"最常出现在前 {k} 名中的：{common}")
    else:
        common = ", ".join(
            f"#{c['neuron']} ({c['tokens']} token{'' if c['tokens'] == 1 else 's'})" for c in report["most_common"]
        )
        out.print(f"most often among the top {k}: {common}")
    _questions(report, zh)
    say(out, zh,
        "Each cell: a neuron's number and its activation. A neuron that fires for nearly every token is usually doing "
        "bookkeeping, not detecting a feature; try --neuron N on one that fires for a few.",
        "每个格子：神经元编号和它的激活值。几乎对每个词元都激活的神经元通常在做“记账”，而不是识别某种特征；对只在少数词元上激活的神经元试试 --neuron N。")  # fmt: skip


def one(report: dict, labels: list[str], names: dict[int, str], zh: bool) -> None:
    n, block = report["neuron"], report["block"]
    colour = uses_colour(out)
    out.print(
        f"[bold]{report['model']}[/] · 第 {block} 个块 · 神经元 {n}"
        if zh
        else f"[bold]{report['model']}[/] · block {block} · neuron {n}"
    )
    acts = report["activations"]
    top = max((abs(a["activation"]) for a in acts), default=1.0) or 1.0
    out.print(
        Text("它在每个词元上的激活" if zh else "its activation at each token", style="italic")
    )  # above, not a title: a title wraps to the table's width
    t = Table(box=None, padding=(0, 1), pad_edge=False)
    t.add_column("#", justify="right", style="dim")
    t.add_column("词元" if zh else "token", no_wrap=True)
    t.add_column("激活" if zh else "activation", justify="right")
    t.add_column("", no_wrap=True)
    for a in acts:
        v = a["activation"]
        # Without colour the sign is in the bar too: solid for yes (positive), light shade for no.
        shown = bar(v, top, 24) if v > 0 or colour else "░" * max(1, round(-v / top * 24)) if v < 0 else ""
        t.add_row(
            str(a["position"]),
            repr(labels[a["position"]]),
            f"{v:+.3f}",
            Text(shown, style=("green" if v > 0 else "red") if colour else ""),
        )
    out.print(t)
    out.print(
        Text(
            "它的输出推动什么：W_down 中它那一行的直接 logit"
            if zh
            else "what its output pushes: direct logits of its row of W_down",
            style="italic",
        )
    )
    ends = Table(box=None, padding=(0, 1), pad_edge=False)
    ends.add_column("推高" if zh else "pushes up", no_wrap=True)
    ends.add_column("logit", justify="right")
    ends.add_column("压低" if zh else "pushes down", no_wrap=True)
    ends.add_column("logit", justify="right")
    for u, d in zip(report["pushes_up"], report["pushes_down"]):
        ends.add_row(repr(names[u["id"]]), f"{u['logit']:+.2f}", repr(names[d["id"]]), f"{d['logit']:+.2f}")
    out.print(ends)
    how = (
        "Green bars: the token's vector answers this neuron's question with yes (positive activation), red: negative. "
        if colour
        else "Solid bars (█): the token's vector answers this neuron's question with yes (positive activation); "
        "light ones (░): negative. "
    )
    how_zh = (
        "绿色条：这个词元的向量对该神经元的问题回答“是”（激活为正），红色：为负。"
        if colour
        else "实心条（█）：这个词元的向量对该神经元的问题回答“是”（激活为正）；浅色条（░）：为负。"
    )
    say(out, zh,
        how + "The neuron then adds activation × its row of W_down to the vector. That row alone, put through the "
              "final norm "
        "(its gain, without its bias) and the unembedding, raises the logits on the left and lowers those on the "
        "right: the "
        "answer it adds. Later blocks can still change what that does to the prediction.",
        how_zh + "神经元随后把“激活值 × 它在 W_down 中的那一行”加到向量上。"
        "这一行单独经过最终归一化（只用其增益，不加偏置）和反嵌入后，会抬高左边词元的 logit、压低右边词元的 logit：这就是它加上的答案。"
        "后面的层仍可能改变它对预测的作用。")  # fmt: skip
    _questions(report, zh)
