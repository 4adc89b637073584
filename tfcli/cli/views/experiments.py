"""The experiments drawn: grids of signed values (patching, ablation, attribution, detectors).

A cell is a number, always: the number is the result, the colour only helps the eye. With colour,
its background runs from blue (negative) through a dark grey (0) to red (positive), as far as the
largest |value| of the grid; without colour (NO_COLOR, a pipe) the number alone. Cells are 7
characters wide, so that 10 columns and their labels fit 80 columns.

Ablation and attribution grids hold one or two large values and many small ones that matter
(block 0's MLP at -11.35, a head at -1.11): on a linear scale every cell but one looked like 0. Their
colour follows a symmetric log scale (LOG_SPAN: the colour grows by as much from top/100 to
top/10 as from top/10 to top), and a legend line under the grid says so; their --png/--svg pictures
use the same scale, named under the colour bar.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.markup import escape
from rich.style import Style
from rich.text import Text

# moved to tfcli/draw/ (the pictures need no terminal); imported here for the views
from tfcli.draw.images import picture_scale  # noqa: F401
from tfcli.draw.scales import LOG_SPAN, shade, top_of  # noqa: F401


CELL = 7


def legend(top: float, log: bool, zh: bool = False) -> str:
    """The line under a coloured grid that says its scale."""
    lo = top / LOG_SPAN
    if zh:
        scale = f"对数刻度，|值| 从 {lo:.2g} 到 {top:.2f}" if log else f"线性刻度，到 ±{top:.2f}"
        return f"颜色：蓝 = 负，红 = 正；{scale}"
    scale = f"log scale, |value| {lo:.2g} to {top:.2f}" if log else f"linear scale to ±{top:.2f}"
    return f"colour: blue negative, red positive; {scale}"


def _style(value: float, top: float, log: bool = False) -> Style:
    x = shade(value, top, log)
    a = abs(x)
    # From a dark grey towards red (positive) or blue (negative); white ink reads on all of them.
    base = np.array([48, 48, 48])
    end = np.array([200, 40, 40]) if x > 0 else np.array([40, 90, 210])
    rgb = (base + a * (end - base)).round().astype(int)
    return Style(bgcolor=Color.from_rgb(*rgb), color=Color.from_rgb(255, 255, 255))


def number(value: float, fmt: str) -> str:
    return "  nan" if not np.isfinite(value) else fmt.format(value)


def grid(
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    values: np.ndarray,
    colour: bool,
    fmt: str = "{:+.2f}",
    top: float | None = None,
    log: bool = False,
    width: int | None = None,
    key: str = "columns",
) -> Text:
    """values [R, C] as a table: one line of column labels, then a row label and C cells per row;
    with colour, coloured on a linear scale, or a symmetric log scale (`log`), to `top`.

    The layout rule (cli/layout.py): labels are never cut. When one is wider than a cell, the
    columns are numbered and a line under the grid, headed `key` (what the columns are), gives each
    number's label. Columns that do not fit `width` go on in a second grid below the first."""
    values = np.asarray(values, dtype=np.float64)
    top = top_of(values) if top is None else top
    lw = max([cell_len(s) for s in row_labels] + [3])
    numbered = any(cell_len(c) > CELL - 1 for c in col_labels)
    heads = [str(j) for j in range(len(col_labels))] if numbered else list(col_labels)
    per = len(col_labels) if width is None else max(1, (width - lw - 1) // CELL)
    t = Text()
    for start in range(0, len(col_labels), per):
        if start:
            t.append("\n")
        t.append(" " * (lw + 1))
        for c in heads[start : start + per]:
            t.append(" " * (CELL - cell_len(c)) + c)
        t.append("\n")
        for label, row in zip(row_labels, values):
            t.append(" " * (lw - cell_len(label)) + label + " ")
            for v in row[start : start + per]:
                s = number(v, fmt)
                s = " " * (CELL - len(s)) + s
                t.append(s, style=_style(v, top, log) if colour else None)
            t.append("\n")
    if numbered:
        t.append(f"{key}: " + "  ".join(f"{j}:{c}" for j, c in enumerate(col_labels)) + "\n")
    t.rstrip()
    return t


def ranked(items: list[tuple[str, float]], fmt: str = "{:+.3f}") -> str:
    return ", ".join(
        f"{name} ({number(v, fmt).strip()})" for name, v in items
    )  # the value in brackets: a line that breaks between them still pairs them


def write_pictures(
    png,
    svg,
    heading: str,
    title: str,
    values: np.ndarray,
    row_labels: list[str],
    col_labels: list[str],
    top: float,
    log: bool = False,
    zh: bool = False,
) -> None:
    """--png / --svg: the grid as one heatmap panel on a signed scale from -top to +top (blue,
    white, red, as the terminal's colours), linear or log (`log`) as the terminal's grid is, the
    scale written on its colour bar."""
    from ..console import note
    from tfcli.draw import images

    top = top or 1.0
    panel = images.Panel(title, shade(values, top, log), np.ones(values.shape, dtype=bool), row_labels, col_labels)
    images.check_size([[panel]], bool(png), bool(svg))
    fonts = images.fonts_or_none()
    if png and fonts is None:
        raise images.no_pillow()
    drawing = images.layout(
        [[panel]], heading, measure=fonts.measure if fonts else images.estimate, signed=picture_scale(top, log, zh)
    )
    for path, write in (
        (png, lambda p: images.write_png(p, drawing, fonts)),
        (svg, lambda p: images.write_svg(p, drawing)),
    ):
        if path:
            write(path)
            note(f"wrote {path} ({drawing.width}×{drawing.height} px)")


# --- one function per command: what it prints after its numbers are computed ------------------


def patching(lm, r, clean_ids, corrupt_ids, zh: bool, png, svg) -> None:
    from ..console import out, shown
    from .attn import token_labels
    from .inside import say, token_str, uses_colour

    tok = lm.tokenizer
    labels = [f"{c}/{d}" if c != d else c for c, d in zip(token_labels(tok, clean_ids), token_labels(tok, corrupt_ids))]
    if r.site == "heads":
        rows, cols = [str(b) for b in range(r.grid.shape[0])], [f"h{h}" for h in range(r.grid.shape[1])]
    else:
        rows = (
            ["emb", *map(str, range(1, r.grid.shape[0]))]
            if r.site == "resid"
            else [str(b) for b in range(r.grid.shape[0])]
        )
        cols = labels
    what = {"resid": ("residual index × position", "残差序号 × 位置"), "heads": ("block × head (context vector at every "
                                                                           "position)", "块 × 头（每个位置的上下文向量）"),
            "mlp": ("block × position (MLP output)", "块 × 位置（MLP 的输出）")}[r.site][zh]  # fmt: skip
    answer, wrong = token_str(tok, r.answer), token_str(tok, r.wrong)
    out.print(f"[bold]{escape(lm.name)}[/] · " + (f"激活修补 · {what}" if zh else f"activation patching · {what}"))
    out.print(
        shown(
            f"答案 {answer!r} 对 {wrong!r}：logit 差，干净运行 {r.clean_ld:+.2f}，改动后 {r.corrupt_ld:+.2f}"
            if zh
            else f"answer {answer!r} vs {wrong!r}: logit difference {r.clean_ld:+.2f} clean, "
            f"{r.corrupt_ld:+.2f} corrupt"
        )
    )
    out.print(
        grid(
            rows,
            cols,
            r.grid,
            uses_colour(out),
            top=1.0,
            width=out.width,
            key=("位置" if zh else "positions") if r.site != "heads" else "columns",
        )
    )
    flat = np.argsort(-np.nan_to_num(r.grid, nan=-np.inf), axis=None)[:3]
    best = ranked(
        [(f"{rows[i]}@{cols[j]}", r.grid[i, j]) for i, j in zip(*np.unravel_index(flat, r.grid.shape))], "{:.2f}"
    )
    say(out, zh,
        "Each cell: the corrupt text run again with that one activation from the clean run, and how much of the logit "
        "difference between the answer and the wrong token comes back (1 = all of it, 0 = none). "
        + ("Rows are residual-stream indices (emb = the embeddings, i = after block i-1); " if r.site == "resid"
           else "Rows are blocks; ")
        + f"the strongest: {best}.",
        "每个格子：把干净文本这一处的激活放进被改动文本的运行中，答案与错误词元的 logit 差恢复了多少（1 = 全部，0 = 没有）。"
        + ("行是残差流的序号（emb 是嵌入，i 是第 i-1 个块之后）；" if r.site == "resid" else "行是块；")
        + f"最强的：{best}。")  # fmt: skip
    if png or svg:
        answer = f"{token_str(tok, r.answer)!r} rather than {token_str(tok, r.wrong)!r}"
        heading = (
            f"{lm.name} · 把干净运行的一处放回后，答案 {answer} 恢复了多少"
            if zh
            else f"{lm.name} · how much of the answer {answer} one part of the clean run brings back"
        )
        title = {
            "resid": ("rows: residual index, columns: position", "行：残差序号，列：位置"),
            "heads": ("rows: block, columns: head", "行：块，列：头"),
            "mlp": ("rows: block (its MLP), columns: position", "行：块（其 MLP），列：位置"),
        }[r.site][zh]
        # 1 = all of it; a cell can pass 1 or fall below 0 (it pushes the other way): the scale holds both.
        write_pictures(
            png,
            svg,
            heading,
            title + (" · 1 = 全部，0 = 没有" if zh else " · 1 = all of it, 0 = none"),
            r.grid,
            rows,
            cols,
            max(1.0, top_of(r.grid)),
            zh=zh,
        )


def ablation(lm, r, zh: bool, png, svg) -> None:
    from ..console import out, shown
    from .inside import say, token_str, uses_colour

    cfg, tok = lm.config, lm.tokenizer
    rows = [str(b) for b in range(cfg.n_layer)]
    cols = [f"h{h}" for h in range(cfg.n_head)] + ["mlp"]
    values = np.concatenate([r.heads, r.mlps[:, None]], axis=1)  # [L, H+1]
    answer = token_str(tok, r.answer)
    out.print(
        f"[bold]{escape(lm.name)}[/] · ",
        shown(
            f"消融 · 答案 {answer!r}（对数概率 {r.logprob:.2f}，p = {np.exp(r.logprob):.0%}）"
            if zh
            else f"ablation · answer {answer!r} (log-probability {r.logprob:.2f}, p = {np.exp(r.logprob):.0%})"
        ),
        sep="",
    )
    colour = uses_colour(out)
    out.print(grid(rows, cols, values, colour, log=True, width=out.width))
    if colour:
        out.print(legend(top_of(values), True, zh), style="dim")
    order = np.argsort(r.heads, axis=None)[:3]
    worst = ranked([(f"{b}.{h}", r.heads[b, h]) for b, h in zip(*np.unravel_index(order, r.heads.shape))], "{:+.2f}")
    mlp = int(np.argmin(r.mlps))
    say(out, zh,
        "Rows are blocks (from 0), columns heads; each cell: the change in the answer's log-probability with that head "
        "(or the block's MLP, last column) taken out. Negative: the answer needed it. "
        f"Most needed heads: {worst}; MLP of block {mlp} ({r.mlps[mlp]:+.2f}).",
        "行是块（从 0 开始），列是注意力头；每个格子：去掉这个头（最后一列是这个块的 MLP）之后，答案的对数概率变化了多少。"
        f"负数表示答案需要它。最需要的头：{worst}；第 {mlp} 块的 MLP（{r.mlps[mlp]:+.2f}）。")  # fmt: skip
    if png or svg:
        answer = repr(token_str(tok, r.answer))
        heading = (
            f"{lm.name} · 去掉每个头或 MLP 后，答案 {answer} 的对数概率变化"
            if zh
            else f"{lm.name} · the log-probability of the answer {answer} with each head or MLP taken out"
        )
        title = (
            "行：块，列：头与 MLP；蓝 = 答案需要它"
            if zh
            else "rows: block, columns: heads and MLP; blue = the answer needed it"
        )
        write_pictures(
            png, svg, heading, title, values, rows, cols, top_of(values), log=True, zh=zh
        )  # the grid's log scale


DETECTORS = (("previous_token", "previous-token", "前一个词元"), ("first_token", "first-token", "第一个词元"),
             ("induction", "induction", "归纳"), ("duplicate_token", "duplicate-token", "重复词元"))  # fmt: skip


def heads(lm, ids, a, d, repeat: int, zh: bool) -> None:
    from ..console import out, shown
    from .inside import say, token_str, uses_colour

    cfg, tok, colour = lm.config, lm.tokenizer, uses_colour(out)
    rows, cols = [str(b) for b in range(cfg.n_layer)], [f"h{h}" for h in range(cfg.n_head)]
    target, at = token_str(tok, a.target), token_str(tok, ids[a.position])
    out.print(
        f"[bold]{escape(lm.name)}[/] · ",
        shown(
            f"{target!r} 的直接 logit 归因，在位置 {a.position}（{at!r}）之后：logit {a.logit:.2f}"
            if zh
            else f"direct logit attribution of {target!r} after position {a.position} ({at!r}): logit {a.logit:.2f}"
        ),
        sep="",
    )
    parts = np.concatenate([a.heads, a.mlps[:, None]], axis=1)  # [L, H+1]
    out.print(grid(rows, [*cols, "mlp"], parts, colour, log=True, width=out.width))
    if colour:
        out.print(legend(top_of(parts), True, zh), style="dim")
    out.print(
        f"嵌入 {a.embedding:+.2f} · 偏置 {a.bias:+.2f} · 头 {a.heads.sum():+.2f} · MLP {a.mlps.sum():+.2f} · 合计 "
        f"{a.total:.2f}"
        if zh
        else f"embeddings {a.embedding:+.2f} · biases {a.bias:+.2f} · heads {a.heads.sum():+.2f} · MLPs "
        f"{a.mlps.sum():+.2f} · total {a.total:.2f}"
    )
    say(out, zh, *total_against_logit(a.total, a.logit))
    for name, en, cn in DETECTORS:
        g = getattr(d, name)
        top = [(f"{b}.{h}", g[b, h]) for b, h in zip(*np.unravel_index(np.argsort(-g, axis=None)[:3], g.shape))]
        out.print(f"[bold]{cn + '头' if zh else en + ' heads'}[/] (0-1): {ranked(top, '{:.2f}')}")
    out.print(grid(rows, cols, d.induction, colour, fmt="{:.2f}", top=1.0, width=out.width))
    say(out, zh,
        "Attribution: each cell is what that head (or the block's MLP) adds directly to the logit of "
        f"{token_str(tok, a.target)!r}; "
        "they sum, with the embeddings and the biases, to the logit. The grid at the end is the induction score: on "
        f"{repeat} random tokens seen twice, how much each head attends, in the second copy, to the token that "
        "followed the "
        "current token the first time (what a head that copies patterns forward does).",
        f"归因：每个格子是这个头（或这个块的 MLP）直接加到 {token_str(tok, a.target)!r} 的 logit 上的量；它们与嵌入和偏置相加等于这个 logit。"
        f"最后的网格是归纳分数：把 {repeat} 个随机词元重复两遍，在第二遍中每个头有多少注意力落在上一次紧跟当前词元的那个词元上（复制模式的头就是这样做的）。")  # fmt: skip


def total_against_logit(total: float, logit: float) -> tuple[str, str]:
    """Why the parts' total and the header's logit agree, or by how much they do not (English, Chinese).

    The parts are the pass's own float32 vectors, each read through the final norm with its scale
    frozen at this position and summed in float64; the header is the logit the pass computed in
    float32. The two differ only by float32 rounding, which is said when it shows at two decimals."""
    if f"{total:.2f}" == f"{logit:.2f}":
        return (
            "The total equals the logit in the header (to two decimals): with the final norm's scale frozen at "
            "this "
            "position, the logit is the sum of these parts.",
            "合计等于标题中的 logit（两位小数）：最终归一化的缩放在这个位置上固定后，logit 就是这些部分之和。",
        )
    diff = total - logit
    return (
        f"The total differs from the logit in the header by {diff:+.3g}: float32 rounding in the pass (the parts "
        "are "
        "summed in float64, with the final norm's scale frozen at this position).",
        f"合计与标题中的 logit 相差 {diff:+.3g}：这是前向计算中 float32 的舍入（各部分以 float64 相加，最终归一化的缩放在这个位置上固定）。",
    )


def steering(lm, s, prompt: str, toward: str, away: str, seed: int, runs: dict, zh: bool) -> None:
    from rich.table import Table

    from ..console import out, shown
    from .inside import say

    seeded = "" if seed is None else (f" · 种子 {seed}" if zh else f" · seed {seed}")  # greedy (-t 0): no seed to tell
    out.print(
        f"[bold]{escape(lm.name)}[/] · ",
        shown(
            (
                f"在第 {s.layer} 块转向：{s.scale:g} × （{toward!r} 的均值 − {away!r} 的均值），|v| = {s.norm:.2f}"
                if zh
                else f"steering at block {s.layer}: {s.scale:g} × (mean of {toward!r} − "
                f"mean of {away!r}), |v| = {s.norm:.2f}"
            )
            + seeded
        ),
        sep="",
    )
    table = Table(show_header=True, expand=True, show_lines=False)
    table.add_column("原样" if zh else "plain", ratio=1, overflow="fold")
    table.add_column(f"转向后（×{s.scale:g}）" if zh else f"steered (×{s.scale:g})", ratio=1, overflow="fold")
    table.add_row(prompt + runs["plain"][0], prompt + runs["steered"][0])
    out.print(table)
    say(out, zh,
        f"Both continuations draw with the same seed and knobs; the right one has {s.scale:g}·v added to block "
        f"{s.layer}'s output at "
        "every position. A small model often drifts toward the words of A, or breaks into repetition when the push is "
        "too "
        "strong: try smaller and larger --scale, and other --block values.",
        f"两段续写使用同样的种子和参数；右边一段在每个位置都把 {s.scale:g}·v 加到第 {s.layer} 块的输出上。小模型常常会偏向 A 的词语，"
        "推得太猛时则会陷入重复：试试更小或更大的 --scale，以及别的 --block。")  # fmt: skip
