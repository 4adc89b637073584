"""`tfcli attribute` drawn: the first-order grid above the real patch's, drawn as `patch` draws its
grid (views/experiments.py), their correlation, and saliency as one row of tokens."""

from __future__ import annotations

import numpy as np
from rich.markup import escape

from .experiments import grid, picture_scale, ranked, shade, top_of

WHAT = {
    "resid": ("residual index × position", "残差序号 × 位置"),
    "heads": ("block × head (context vector at every position)", "块 × 头（每个位置的上下文向量）"),
    "mlp": ("block × position (MLP output)", "块 × 位置（MLP 的输出）"),
}
PICTURE = {
    "resid": ("rows: residual index, columns: position", "行：残差序号，列：位置"),
    "heads": ("rows: block, columns: head", "行：块，列：头"),
    "mlp": ("rows: block (its MLP), columns: position", "行：块（其 MLP），列：位置"),
}


def labels(tok, r) -> tuple[list[str], list[str]]:
    """Row and column labels of a grid, as `patch` labels its own."""
    from .attn import token_labels

    if r.site == "heads":
        return [str(b) for b in range(r.grid.shape[0])], [f"h{h}" for h in range(r.grid.shape[1])]
    cols = [
        f"{c}/{d}" if c != d else c for c, d in zip(token_labels(tok, r.clean_ids), token_labels(tok, r.corrupt_ids))
    ]
    rows = (
        ["emb", *map(str, range(1, r.grid.shape[0]))] if r.site == "resid" else [str(b) for b in range(r.grid.shape[0])]
    )
    return rows, cols


def attribution(lm, r, real, r_value: float, zh: bool, png, svg) -> None:
    from ..console import out, shown
    from .inside import say, token_str, uses_colour

    tok, colour = lm.tokenizer, uses_colour(out)
    rows, cols = labels(tok, r)
    answer, wrong = token_str(tok, r.answer), token_str(tok, r.wrong)
    top = max(1.0, top_of(r.grid), top_of(real.grid))  # one colour scale for both grids
    key = ("位置" if zh else "positions") if r.site != "heads" else "columns"
    what = WHAT[r.site][zh]
    out.print(f"[bold]{escape(lm.name)}[/] · " + (f"归因修补 · {what}" if zh else f"attribution patching · {what}"))
    out.print(shown(f"答案 {answer!r} 对 {wrong!r}：logit 差，干净运行 {r.clean_ld:+.2f}，改动后 {r.corrupt_ld:+.2f}" if zh
                    else f"answer {answer!r} vs {wrong!r}: logit difference {r.clean_ld:+.2f} clean, "
                         f"{r.corrupt_ld:+.2f} corrupt"))  # fmt: skip
    out.print(
        "[bold]一阶估计[/]（梯度 ×（干净 − 改动））"
        if zh
        else "[bold]first order[/] (gradient × (clean - corrupt)), one backward pass:"
    )
    out.print(grid(rows, cols, r.grid, colour, top=top, width=out.width, key=key))
    out.print("[bold]真实修补[/]（tfcli patch）" if zh else "[bold]real patch[/] (tfcli patch), one pass per cell:")
    out.print(grid(rows, cols, real.grid, colour, top=top, width=out.width, key=key))
    r_text = "nan" if not np.isfinite(r_value) else f"{r_value:.2f}"
    out.print(f"两个网格的相关系数 r = {r_text}" if zh else f"correlation of the two grids: r = {r_text}")
    gap = np.abs(np.nan_to_num(r.grid - real.grid, nan=0.0))
    flat = np.argsort(-gap, axis=None)[:3]
    worst = ranked(
        [(f"{rows[i]}@{cols[j]}", r.grid[i, j] - real.grid[i, j]) for i, j in zip(*np.unravel_index(flat, gap.shape))],
        "{:+.2f}",
    )
    say(out, zh,
        "Each cell of the first grid is the gradient of the logit difference at the corrupt run times the clean "
        "activation "
        "minus the corrupt one: a straight-line guess of the cell below it, which reruns the model with that "
        "activation "
        f"(1 = all of the difference, 0 = none). The guess is furthest off at: {worst} (guess - real).",
        "第一个网格的每个格子：logit 差在改动后运行处的梯度，乘以干净激活与改动后激活之差，是对下面那个格子的直线估计；"
        f"下面的格子真的把这处激活放回去重新运行（1 = 全部，0 = 没有）。估计偏得最远的：{worst}（估计 − 真实）。")  # fmt: skip
    if png or svg:
        heading = (f"{lm.name} · 答案 {answer!r} 而非 {wrong!r}：一阶估计与真实修补，r = {r_text}" if zh
                   else f"{lm.name} · the answer {answer!r} rather than {wrong!r}: first order and real patch, r = "
                        f"{r_text}")  # fmt: skip
        titles = ("一阶估计 · " if zh else "first order · ", "真实修补 · " if zh else "real patch · ")
        panels = [(titles[0] + PICTURE[r.site][zh], r.grid), (titles[1] + PICTURE[r.site][zh], real.grid)]
        pictures(png, svg, heading, panels, rows, cols, top, zh)


def saliency(lm, s, zh: bool, png, svg) -> None:
    from ..console import out, shown
    from .attn import token_labels
    from .inside import say, token_str, uses_colour

    tok = lm.tokenizer
    answer = token_str(tok, s.answer)
    metric = f"logit({answer!r})" + ("" if s.wrong is None else f" - logit({token_str(tok, s.wrong)!r})")
    out.print(f"[bold]{escape(lm.name)}[/] · " + ("显著性 · 梯度 × 输入" if zh else "saliency · gradient × input"))
    out.print(shown(f"指标 {metric} = {s.metric:+.2f}" if zh else f"metric {metric} = {s.metric:+.2f}"))
    cols = token_labels(tok, s.ids)
    top = top_of(s.values)
    # one row per token (position and token as its label): a text's tokens rarely fit 80 columns side by side
    out.print(
        grid(
            [f"{p} {c}" for p, c in enumerate(cols)],
            ["g·x" if not zh else "梯度·输入"],
            s.values[:, None],
            uses_colour(out),
            top=top,
            width=out.width,
        )
    )
    order = np.argsort(-np.abs(s.values))[:3]
    best = ranked([(f"{p}:{cols[p]}", s.values[p]) for p in order], "{:+.2f}")
    say(
        out,
        zh,
        "Each token's embedding times the gradient of the metric with respect to it, summed over its numbers: how much "
        "the "
        f"metric would move, to first order, if that token's vector were taken away. The largest: {best}.",
        f"每个词元的嵌入乘以指标对它的梯度，再对各分量求和：去掉这个词元的向量，指标一阶地会变化多少。最大的：{best}。",
    )
    if png or svg:
        heading = (
            f"{lm.name} · {metric}：每个词元的梯度 × 输入"
            if zh
            else f"{lm.name} · {metric}: gradient × input of each token"
        )
        pictures(
            png,
            svg,
            heading,
            [("行：指标，列：词元" if zh else "row: the metric, columns: tokens", s.values[None])],
            [""],
            cols,
            max(top, 1e-9),
            zh,
        )


def pictures(
    png,
    svg,
    heading: str,
    panels: list[tuple[str, np.ndarray]],
    row_labels: list[str],
    col_labels: list[str],
    top: float,
    zh: bool,
) -> None:
    """--png / --svg: the grids as heatmap panels one above the other, on one signed linear scale
    (as `patch` draws its grid: views/experiments.write_pictures)."""
    from ..console import note
    from tfcli.draw import images

    top = top or 1.0
    grid_ = [
        [images.Panel(title, shade(values, top), np.ones(values.shape, dtype=bool), row_labels, col_labels)]
        for title, values in panels
    ]
    images.check_size(grid_, bool(png), bool(svg))
    fonts = images.fonts_or_none()
    if png and fonts is None:
        raise images.no_pillow()
    drawing = images.layout(
        grid_, heading, measure=fonts.measure if fonts else images.estimate, signed=picture_scale(top, False, zh)
    )
    for path, write in (
        (png, lambda p: images.write_png(p, drawing, fonts)),
        (svg, lambda p: images.write_svg(p, drawing)),
    ):
        if path:
            write(path)
            note(f"wrote {path} ({drawing.width}×{drawing.height} px)")
