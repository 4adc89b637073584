"""tfcli geometry drawn: a table of angle statistics, one histogram line per dimension, what the
theory promises; and the histograms as an image. Drawing only: the numbers come from the report."""

from __future__ import annotations

import math

import numpy as np
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from ..console import out
from .inside import chinese, say, uses_colour

BLOCKS = " ▁▂▃▄▅▆▇█"


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    if 0.999 < x < 1:
        return ">99.9%"  # not 100%: some pairs fall outside
    return f"{x:.1%}"


def spark(hist: list[float]) -> str:
    """A histogram as one line of eighth blocks, scaled to its own peak."""
    h = np.asarray(hist)
    top = h.max() or 1.0
    return "".join(BLOCKS[int(round(v / top * 8))] if v > 0 else " " for v in h)


def _short(label: str, zh: bool) -> str:
    """A row's name in the table and the histograms: its D has a column of its own, so that the
    table fits 80 columns (the JSON keeps the full label)."""
    if label.startswith("random"):
        return "随机" if zh else "random"
    centred = "centred" in label
    if zh:
        return "中心化" if centred else "词元嵌入"
    return "centred" if centred else "tokens"


def render(report: dict, zh: bool) -> None:
    """The angle table, the histograms, what the theory promises, and what it means."""
    _table(report, zh)
    _histograms(report, zh)
    _promises(report, zh)
    _meaning(report, zh)


def _table(report: dict, zh: bool) -> None:
    rows = report["rows"]
    pairs = f"{rows[0]['pairs']:,}"
    if zh:
        out.print(f"[bold]方向之间的夹角[/] · 每行 {report['sample']} 个向量（{pairs} 对），种子 {report['seed']} · 模型 "
                  f"{report['model']}（D = {report['d_model']}）")
    else:
        out.print(f"[bold]Angles between directions[/] · {report['sample']} vectors a row ({pairs} pairs), seed "
                  f"{report['seed']} · {report['model']} (D = {report['d_model']})")
    t = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False)  # one space between columns: 78 cells in all
    exact = "精确" if zh else "exact"
    for name, j in (("向量" if zh else "vectors", "left"), ("D", "right"), ("平均 θ" if zh else "mean θ", "right"),
                    ("sd θ", "right"), ("sd cos", "right"), ("1/√D", "right"),
                    ("90±1°", "right"), (exact, "right"), ("90±5°", "right"), (exact, "right")):  # fmt: skip
        t.add_column(name, justify=j, no_wrap=True, style="dim" if name in (exact, "1/√D") else None)
    for r in rows:
        ex = r["exact_within"] or {}
        t.add_row(
            _short(r["label"], zh), f"{r['d']:,}", f"{r['mean_angle']:.2f}°", f"{r['std_angle']:.2f}°",
            f"{r['std_cos']:.4f}", f"{r['expected_std_cos']:.4f}",
            _pct(r["within"]["1"]), _pct(ex.get("1")), _pct(r["within"]["5"]), _pct(ex.get("5")),
            style="bold" if r["d"] == report["d_model"] else None,
        )  # fmt: skip
    out.print(t)
    say(out, zh,
        "tokens: the model's token embeddings; centred: the same minus their mean; random: random directions in D "
        "dimensions. "
        "90±1°, 90±5°: the share of pairs in that band.",
        "词元嵌入：模型的词元嵌入向量；中心化：同一组向量减去它们的均值；随机：D 维空间中的随机方向。平均 θ、sd θ：夹角的平均值和标准差（sd）；"
        "90±1°、90±5°：落在这个范围内的向量对的比例。")  # fmt: skip


def _histograms(report: dict, zh: bool) -> None:
    colour = uses_colour(out)
    rows = report["rows"]
    out.print(
        "\n[bold]夹角的直方图[/]（3° 一格，每行按自己的峰值缩放）"
        if zh
        else "\n[bold]Histograms of the angle[/] (3° bins, each line scaled to its peak)"
    )
    labels = [f"{_short(r['label'], zh)} {r['d']:,}" for r in rows]
    width = max(cell_len(x) for x in labels) + 1
    for label, r in zip(labels, rows):
        line = Text(label + " " * (width - cell_len(label)))
        line.append(spark(r["histogram"]).rstrip(), style="cyan" if colour else None)
        out.print(line, no_wrap=True, overflow="crop")
    bins = len(rows[0]["histogram"])
    axis = [" "] * (bins + 4)
    for deg, mark in ((0, "0°"), (45, "45°"), (90, "90°"), (135, "135°"), (180, "180°")):
        start = min(round(deg / 180 * (bins - 1)), bins - len(mark))  # the last mark ends at the last bin, not past it
        for k, ch in enumerate(mark):
            axis[start + k] = ch
    out.print(" " * width + "".join(axis).rstrip(), style="dim", no_wrap=True, overflow="crop")


def _promises(report: dict, zh: bool) -> None:
    out.print("\n[bold]这意味着什么[/]" if zh else "\n[bold]What this promises[/]")
    for p in report["promises"]:
        miss = p["random_before_a_miss"]
        n = 10 ** min(p["log10_guaranteed"], 300)
        if zh:
            miss_s = (
                "永远不会"
                if miss is None
                else f"约 {miss:,.0f} 个向量之后"
                if miss < 1e6
                else f"约 10^{np.log10(miss):.1f} 个向量之后"
            )
            fit = (
                "这个界在这里什么也保证不了（少于 2 个）"
                if n < 2
                else f"至少 {math.floor(n):,} 个"
                if n < 1e6
                else f"至少 10^{p['log10_guaranteed']:.1f} 个"
            )
            chinese(
                out,
                f"  D = {p['d']:,}，90 ± {p['band']:g}°：一对随机向量越界的概率是 "
                f"{p['exact_outside']:.3g}；逐个抽取随机向量，第一对越界出现在{miss_s}；可证明容纳的方向：{fit}",
            )
        else:
            miss_s = (
                "never"
                if miss is None
                else f"about {miss:,.0f} vectors"
                if miss < 1e6
                else f"about 10^{np.log10(miss):.1f} vectors"
            )
            fit = (
                "the bound promises nothing here (fewer than 2)"
                if n < 2
                else f"at least {math.floor(n):,}"
                if n < 1e6
                else f"at least 10^{p['log10_guaranteed']:.1f}"
            )
            out.print(
                f"  D = {p['d']:,}, 90 ± {p['band']:g}°: a random pair falls outside with probability "
                f"{p['exact_outside']:.3g}; "
                f"drawing random vectors, the first pair outside comes after {miss_s}; directions that provably fit: "
                f"{fit}"
            )
    for j in report["jl"]:
        d, eps, log10_n = f"{j['d']:,}", f"{j['eps']:g}", j["log10_points"]
        if log10_n < math.log10(2):  # fewer than 2 points: there is no distance to keep
            if zh:
                chinese(
                    out,
                    f"  Johnson–Lindenstrauss：{d} 维、1 ± {eps} 倍时，这个界保证的点少于 2 个：在这里它什么也不保证",
                )
            else:
                out.print(
                    f"  Johnson–Lindenstrauss: at {d} dimensions and 1 ± {eps}, the bound holds for fewer than 2 "
                    "points: it promises nothing here"
                )
        elif zh:
            chinese(
                out,
                f"  Johnson–Lindenstrauss：任意 10^{log10_n:.1f} 个点都能映射到 {d} 维，且每个距离都保持在 1 ± {eps} 倍以内",
            )
        else:
            out.print(
                f"  Johnson–Lindenstrauss: any 10^{log10_n:.1f} points map into {d} dimensions with every "
                f"distance kept within 1 ± {eps}"
            )


def _meaning(report: dict, zh: bool) -> None:
    rows = report["rows"]
    d12 = next((p for p in report["promises"] if p["d"] == 12288 and p["band"] == 1), None)
    d12_5 = next((p for p in report["promises"] if p["d"] == 12288 and p["band"] == 5), None)
    say(out, zh,
        "sd cos: the measured spread of the cosine, beside the exact 1/√D; exact: the share from the density ∝ "
        "sin^(D−2) θ. "
        "'Provably fit' is the union bound P(|cos| > ε) ≤ 2·exp(−D ε²/2), ε = sin(band): exp(D ε²/4) random directions "
        "have fewer than one bad pair on average, so such a set exists (a lower bound; better packings exist).",
        "sd cos：实测的余弦标准差，旁边是精确值 1/√D；精确：由密度 ∝ sin^(D−2) θ 算出的比例。“可证明容纳”来自联合界 "
        "P(|cos| > ε) ≤ 2·exp(−D ε²/2)，ε = sin(角度带)：exp(D ε²/4) 个随机方向平均不到一对越界，所以这样的一组方向存在（这是下界，更好的排布还存在）。")  # fmt: skip
    if d12 and d12_5:
        say(out, zh,
            f"So in GPT-3's 12,288 dimensions, 'between 89° and 91°' is a tight band: {1 - d12['exact_outside']:.1%} "
            "of random pairs "
            "fall in it, and random vectors leave it after a handful. 'Exponentially many' holds for a wider band: "
            "between 85° and 95° "
            f"a random pair falls outside with probability {d12_5['exact_outside']:.1e}, and at least "
            f"10^{d12_5['log10_guaranteed']:.0f} "
            "directions fit.",
            f"所以在 GPT-3 的 12,288 维中，“89° 到 91° 之间”是一个很窄的范围：随机向量对中有 {1 - d12['exact_outside']:.1%} 落在其中，"
            f"随机取几个向量就会有一对越界。“指数多”对更宽的范围才成立：在 85° 到 95° 之间，一对随机向量越界的概率是 "
            f"{d12_5['exact_outside']:.1e}，并且至少能容纳 10^{d12_5['log10_guaranteed']:.0f} 个方向。")  # fmt: skip
    emb = next((r for r in rows if r["exact_within"] is None), None)
    same = next((r for r in rows if r["exact_within"] is not None and r["d"] == report["d_model"]), None)
    if emb and same:
        say(out, zh,
            f"{report['model']}'s token embeddings are not random directions: their mean cosine is "
            f"{emb['mean_cos']:.3f} "
            f"(random in {same['d']:,} dimensions: {same['mean_cos']:.3f}), the angle's spread {emb['std_angle']:.1f}° "
            f"(random: {same['std_angle']:.1f}°), and {emb['within']['5']:.1%} of their pairs lie within 90 ± 5° "
            f"(random: {same['within']['5']:.1%}).",
            f"{report['model']} 的词元嵌入并不是随机方向：它们的平均余弦为 {emb['mean_cos']:.3f}（{same['d']:,} 维随机向量："
            f"{same['mean_cos']:.3f}），夹角的标准差为 {emb['std_angle']:.1f}°（随机：{same['std_angle']:.1f}°），"
            f"有 {emb['within']['5']:.1%} 的词元对落在 90 ± 5° 以内（随机：{same['within']['5']:.1%}）。")  # fmt: skip


def drawing(report: dict):
    """One bar histogram per row (3° bins, each scaled to its own peak), labelled, as a Drawing
    for images.write_png / write_svg: one rectangle per bar."""
    from .heatmap import viridis
    from tfcli.draw.images import PAD, Drawing

    rows = report["rows"]
    bins = len(rows[0]["histogram"])
    bw, bh, label_w, size = 8, 48, 230, 12
    gap = 14
    top = PAD + 30
    width = PAD * 2 + label_w + bins * bw
    height = top + len(rows) * (bh + gap) + 24 + PAD
    d = Drawing(width, height)
    d.text(
        PAD,
        PAD + 10,
        f"Angles between directions: {report['sample']} vectors per row, seed {report['seed']}; "
        f"{report['model']} D = {report['d_model']}",
        size + 2,
    )
    for i, r in enumerate(rows):
        y0 = top + i * (bh + gap)
        d.text(PAD, y0 + bh / 2, f"{r['label']}", size)
        h = np.asarray(r["histogram"])
        peak = h.max() or 1.0
        colour = viridis(0.35 if "random" in r["label"] else 0.8)  # [3]
        for j, v in enumerate(h):
            px = int(round(v / peak * bh))
            if px > 0:
                d.bitmaps.append(
                    (
                        PAD + label_w + j * bw,
                        y0 + bh - px,
                        bw - 1,
                        px,
                        np.asarray(colour, dtype=np.uint8).reshape(1, 1, 3),
                    )
                )
        d.bitmaps.append((PAD + label_w, y0 + bh, bins * bw, 1, np.full((1, 1, 3), 160, dtype=np.uint8)))  # the axis
    y = top + len(rows) * (bh + gap) + 6
    for deg in (0, 45, 90, 135, 180):
        d.text(PAD + label_w + (deg / 180 * (bins - 1) + 0.5) * bw, y, f"{deg}°", size, "mm")
    return d
