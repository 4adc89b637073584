"""What `tfcli attn` prints and writes: token labels, the worked example, masks, a model's heads.

Drawing only: the command (cli/attn.py) computes the weights (tfcli.analysis.attention) and hands
them here. Heatmap cells come from views/heatmap.py, PNG/SVG from tfcli/draw/images.py.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..console import note, out, warn
from . import heatmap

# --- tokens and their labels ------------------------------------------------------------------

from tfcli.draw.labels import token_labels, visible  # noqa: F401, E402  (moved: pictures need no terminal)


def offline_labels(text: str) -> tuple[list[str], str]:
    """Tokens without a model: words if the text has spaces, else characters (Chinese has no spaces)."""
    if any(c.isspace() for c in text.strip()):
        return text.split(), "one token per word"
    return [visible(c) for c in text], "one token per character"


def pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0%}"


def count(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.1f} K" if n >= 1e3 else str(n)


def _vec(v, digits: int = 2) -> str:
    return "[" + " ".join(f"{x:.{digits}f}" for x in v) + "]"


def _say(en: str, cn: str, zh: bool) -> None:
    """A line of the views (Rich markup), in Chinese with zh: wrapped between characters, never
    inside a formula (inside.chinese_markup)."""
    if zh:
        from .prose import chinese_markup

        chinese_markup(out, cn)
    else:
        out.print(en)


# --- the worked example lives in views/attn_demo.py (demo, demo_json) ----------------------------


# --- masks ------------------------------------------------------------------------------------


def mask_json(
    model, pat, labels: list[str], allowed: np.ndarray, w: np.ndarray, tokenizer=None, ids: list[int] | None = None
) -> None:
    """The mask as JSON. Its tokens are the objects `attn --json` gives (cli/json.token, with the
    position and the label); without a model there is no tokenizer: "id" is null and "text" the
    word or character the label shows."""
    from ..json import emit, token

    if tokenizer is not None and ids is not None:
        tokens = [token(tokenizer, int(t)) | {"position": i, "label": s} for i, (t, s) in enumerate(zip(ids, labels))]
    else:
        tokens = [{"id": None, "text": s, "position": i, "label": s} for i, s in enumerate(labels)]
    emit({"model": model, "pattern": pat.name, "tokens": tokens, "allowed": allowed.tolist(), "weights": w})


def mask(pat, labels: list[str], how: str, allowed: np.ndarray, w: np.ndarray, kept: int, zh: bool = False) -> None:
    """The mask's scores and weights for the first tokens that fit; allowed, w [n, n] for those
    n tokens (n <= len(labels)); kept: the scores the mask keeps over all the tokens."""

    def say(en: str, cn: str) -> None:
        _say(en, cn, zh)

    colour = heatmap.uses_colour(out)
    n, shown = len(labels), w.shape[0]
    say(f"[bold]Mask: {pat.name}[/] — {pat.describe()}", f"[bold]遮罩：{pat.name}[/] — {pat.describe_zh()}")
    how_zh = {"one token per word": "每个词一个词元", "one token per character": "每个字一个词元"}.get(
        how, how.replace("'s tokenizer", " 的分词器")
    )
    say(f"[dim]{n:,} tokens, {how}.[/]", f"[dim]{n:,} 个词元，{how_zh}。[/]")
    if shown < n:
        say(
            f"[dim]Showing the first {shown} of {n:,} tokens: the pattern goes on the same way (--png draws them "
            "all).[/]",
            f"[dim]显示 {n:,} 个词元中的前 {shown} 个：后面的模式相同（--png 会画出全部）。[/]",
        )
    sub = labels[:shown]
    scores = np.where(
        allowed, np.float32(0), np.float32(-np.inf)
    )  # [n, n]: all equal, so only the mask shapes the weights
    say(
        "\n[bold]1. Scores[/] q·k/√d_k with the mask applied: -inf where a token may not look. All scores are 0 here, "
        "so only the mask shapes the weights.",
        "\n[bold]1. 分数[/] q·k/√d_k 加上遮罩：词元不能看的地方为 -inf。这里所有分数都是 0，所以只有遮罩决定权重。",
    )
    out.print(
        heatmap.numbers(
            scores, allowed, sub, sub, False, masked_as="-inf", fmt="{:g}", row_sums=False, masked_style="red"
        )
    )
    say(
        "\n[bold]2. Softmax of each row[/]: e^-inf = 0, so the masked places get exactly 0 and each row still sums to "
        "1 (Σ).",
        "\n[bold]2. 对每一行做 softmax[/]：e^-inf = 0，所以被遮住的位置恰好得到 0，每一行之和仍是 1（Σ）。",
    )
    out.print(heatmap.numbers(w, allowed, sub, sub, colour))
    far = 2048
    this = "" if pat.kind == "causal" else f", {pat.name} {count(pat.kept(far))}"
    say(
        f"\n[bold]Cost[/]: this mask keeps {kept:,} of the {n:,}×{n:,} = {n * n:,} scores ({kept / (n * n):.0%}). "
        f"At {far:,} tokens: all pairs {count(far * far)} scores, causal {count(far * (far + 1) // 2)}{this}.",
        f"\n[bold]代价[/]：这个遮罩保留了 {n:,}×{n:,} = {n * n:,} 个分数中的 {kept:,} 个（{kept / (n * n):.0%}）。"
        f"在 {far:,} 个词元时：所有词元对 {count(far * far)} 个分数，因果遮罩 {count(far * (far + 1) // 2)}{this}。",
    )
    if pat.kind == "causal":
        say(
            "[dim]The mask only removes scores; the ones it keeps still grow as T², which is what sliding:W and "
            "banded:W avoid.[/]",
            "[dim]遮罩只是去掉分数；保留下来的仍按 T² 增长，sliding:W 和 banded:W 正是为了避免这一点。[/]",
        )


# --- a model's attention ----------------------------------------------------------------------


def panel_title(block: int, head: int, blocks, heads) -> str:
    if len(blocks) > 1 and len(heads) > 1:
        return f"B{block} H{head}"
    return f"block {block}" if len(blocks) > 1 else f"head {head}"


def which(picked: list[int], n: int, what: str) -> str:
    return f"all {n} {what}s" if len(picked) > 1 else f"{what} {picked[0]} of {n}"


def patterns_json(name, cfg, tokenizer, text, ids, labels, layers, heads, weights) -> None:
    from ..json import emit, model_shape, token

    emit({
        "model": name, "shape": model_shape(cfg), "text": text,
        "tokens": [token(tokenizer, int(t)) | {"position": i, "label": s} for i, (t, s) in enumerate(zip(ids, labels))],
        "blocks": layers, "heads": heads, "weights_shape": list(weights.shape), "weights": weights,
    })  # fmt: skip


def patterns(name, cfg, weights, allowed, labels, layers, heads, values: bool, how: str, zh: bool = False) -> None:
    """weights [nL, nH, T, T] of the picked layers and heads: one heatmap (or numbers) per head,
    or thumbnails side by side, then what each head mostly does."""
    from tfcli.analysis.attention import summarize

    colour = heatmap.uses_colour(out)
    summaries = [summarize(weights[a, b], l, h) for a, l in enumerate(layers) for b, h in enumerate(heads)]
    fitted_to = functools.partial(_fitted_to, allowed=allowed, labels=labels, how=how, zh=zh)
    single = len(layers) == 1 and len(heads) == 1
    if single or values:
        for a, l in enumerate(layers):
            for b, h in enumerate(heads):
                _one_head(
                    name,
                    cfg,
                    weights[a, b],
                    (l, h),
                    labels,
                    values,
                    colour,
                    fitted_to,
                    summaries[0] if single else None,
                    zh,
                )
        if single:
            return
    else:
        _thumbnails(weights, labels, layers, heads, colour, fitted_to, zh)
    _summary_table(summaries, labels, zh)


def _one_head(name, cfg, w, where: tuple[int, int], labels, values: bool, colour: bool, fitted_to, s, zh: bool) -> None:
    """One head's weights w [T, T] as a heatmap (or numbers), fitted to the terminal; with its
    summary `s` (a single head shown), what it mostly does."""
    (l, h), t_len = where, len(labels)
    width, extra = (5, 6) if values else (2, 0)
    w, al, rows, cols, msg = fitted_to(w, width, extra)
    window = cfg.windows[l] if cfg.windows else None
    kind = (
        ("", "")
        if not cfg.windows
        else (f" · sliding: the last {window:,} positions", f"· 滑动窗口（最近 {window:,} 个位置）")
        if window
        else (" · global", "· 全局")
    )
    _say(f"[bold]{name}[/] · block {l} of {cfg.n_layer}{kind[0]} · head {h} of {cfg.n_head} · {t_len} tokens",
         f"[bold]{name}[/] · 第 {l} 个块（共 {cfg.n_layer} 个）{kind[1]}· 第 {h} 个头（共 {cfg.n_head} 个）· {t_len} 个词元", zh)
    if msg:
        out.print(f"[dim]{msg}{'。' if zh else '.'}[/]")
    out.print(heatmap.numbers(w, al, rows, cols, colour) if values else heatmap.heatmap(w, al, rows, cols, colour))
    if not values:
        out.print(heatmap.legend(colour, zh))
    else:
        _say("[dim]Each row is one token looking back; it sums to 1 (Σ). 0 = masked (the future).[/]",
             "[dim]每一行是一个词元在回看；每行之和为 1（Σ）。0 = 被遮住（未来）。[/]", zh)  # fmt: skip
    if s is not None:
        _say(
            f"Rows are queries, columns the keys they look at. {_rates(s)} The one token that receives the most is "
            f"{labels[s.top_key]!r} (#{s.top_key}, {s.top_share:.0%} of all the attention of tokens 1..T-1).",
            f"行是查询，列是它们看向的键。{_rates(s, True)}得到最多注意力的单个词元是 "
            f"{labels[s.top_key]!r}（#{s.top_key}，占词元 1..T-1 全部注意力的 {s.top_share:.0%}）。",
            zh,
        )
    out.print()


def _fitted(w, n: int, allowed, labels, how: str, zh: bool):
    """(w, allowed, row labels, column labels, a note) for at most n tokens."""
    from tfcli.analysis.attention import fit as fit_cells

    t_len = len(labels)
    w2, allowed2, groups = fit_cells(w, allowed, n, how)
    if len(groups) == t_len:
        return w2, allowed2, labels, labels, None
    if how == "pool":  # rows name their block; columns its first position, which stacks shorter
        rows = [labels[g.start] if len(g) == 1 else f"{g.start}-{g.stop - 1}" for g in groups]
        cols = [labels[g.start] if len(g) == 1 else str(g.start) for g in groups]
        msg = (f"{t_len} 个词元合并成 {len(groups)} 组（显示位置）：行取平均、列求和，所以每行之和仍为 1" if zh
               else f"{t_len} tokens pooled into {len(groups)} blocks (positions shown): rows averaged, columns "
                    "summed, so rows still sum to 1")  # fmt: skip
    else:
        rows = cols = [labels[g.start] for g in groups]
        if zh:
            msg = f"显示 {t_len} 个词元中的{'后' if how == 'last' else '前'} {len(groups)} 个" + (
                "，所以各行缺少它们给更早词元的权重" if how == "last" else ""
            )
        else:
            msg = f"showing the {how} {len(groups)} of {t_len} tokens" + (
                ", so the rows miss their weight on earlier tokens" if how == "last" else ""
            )
    return (
        w2,
        allowed2,
        rows,
        cols,
        msg
        + ("（--fit last|first|pool；--png 会画出全部）" if zh else " (--fit last|first|pool; --png draws them all)"),
    )


def _fitted_to(w, cell_width: int, extra: int, panels: int = 1, gap: int = 0, *, allowed, labels, how: str, zh: bool):
    """_fitted() with as many tokens as `panels` grids side by side can show in the terminal's width
    (pooled blocks are labelled by positions, "40-47", often wider than the tokens were)."""
    room = lambda lw: (out.width - lw - 1 - extra - (panels - 1) * gap) // (cell_width * panels)  # noqa: E731
    n = max(1, room(heatmap.label_width(labels)))
    while True:
        got = _fitted(w, n, allowed, labels, how, zh)
        if n == 1 or len(got[2]) <= room(heatmap.label_width(got[2])):
            return got
        n -= 1


def _rates(s, zh: bool = False) -> str:
    """The head's mean shares to the first token, the previous one and itself, counted over the tokens
    where those are three different tokens (HeadSummary), so that they never add up past 100%."""
    if math.isnan(s.to_first):
        return ""
    if math.isnan(s.to_previous):  # two tokens: the second one's previous token is the first
        if zh:
            return f"词元 1 给第一个（也是前一个）词元 {pct(s.to_first)}，给它自己 {pct(s.to_self)}。"
        return f"Token 1 gives {pct(s.to_first)} to the first (and previous) token, {pct(s.to_self)} to itself."
    if zh:
        return f"词元 2..T-1 平均给第一个词元 {pct(s.to_first)}，给前一个词元 {pct(s.to_previous)}，给自己 {pct(s.to_self)}。"
    return (f"On average tokens 2..T-1 give {pct(s.to_first)} to the first token, {pct(s.to_previous)} to the previous "
            "one,"
            f" {pct(s.to_self)} to themselves.")


def _thumbnails(weights, labels, layers, heads, colour, fitted_to, zh: bool = False) -> None:
    """Small labelled heatmaps side by side: a line of panels per block (when both are 'all'), each
    line with the token labels on its left and above each panel."""
    gap = 3
    panels, rows, note_shown = [], labels, None
    for a, l in enumerate(layers):
        for b, h in enumerate(heads):
            w, al, rows, cols, msg = fitted_to(weights[a, b], 2, 0, panels=2, gap=gap)  # at least two panels a line
            note_shown = note_shown or msg
            panels.append((panel_title(l, h, layers, heads), heatmap.thumbnail(w, al, colour, cols)))
    n = len(rows)
    lw = heatmap.label_width(rows) + 1
    per_line = max(1, (out.width - lw + gap) // (n * 2 + gap))
    lines = [panels[i : i + len(heads)] for i in range(0, len(panels), len(heads))] if len(heads) > 1 else [panels]
    _say(
        f"[dim]Each panel: rows are queries, columns keys, {len(labels)} tokens from {labels[0]!r} to "
        f"{labels[-1]!r}.[/]",
        f"[dim]每个小图：行是查询，列是键，{len(labels)} 个词元，从 {labels[0]!r} 到 {labels[-1]!r}。[/]",
        zh,
    )
    if note_shown:
        out.print(f"[dim]{note_shown}{'。' if zh else '.'}[/]")
    for line in lines:
        for i in range(0, len(line), per_line):
            out.print(heatmap.side_by_side(line[i : i + per_line], n, gap, rows))
            out.print()
    out.print(heatmap.legend(colour, zh))


_KIND_ZH = {
    "first token": "第一个词元",
    "previous token": "前一个词元",
    "itself": "自己",
    "spread out": "分散",
    "mixed": "混合",
    "-": "-",
}


def _summary_table(summaries, labels, zh: bool = False) -> None:
    from rich.table import Table

    table = Table(
        box=None,
        padding=(0, 1),
        pad_edge=False,
        title="每个头主要看向哪里" if zh else "What each head attends to",
        title_justify="left",
    )
    names = (
        ("块", "头", "最多的词元", "份额", "first", "prev", "self", "bits", "主要")
        if zh
        else ("block", "head", "top token", "share", "first", "prev", "self", "bits", "mostly")
    )
    for i, col in enumerate(names):
        table.add_column(col, justify="left" if i in (2, 8) else "right", no_wrap=True)
    for s in summaries:
        table.add_row(
            str(s.layer), str(s.head), f"{heatmap.clip(labels[s.top_key], 8)} #{s.top_key}", f"{s.top_share:.0%}",
            pct(s.to_first), pct(s.to_previous), pct(s.to_self), f"{s.entropy:.2f}",
            _KIND_ZH.get(s.kind, s.kind) if zh else s.kind,
        )  # fmt: skip
    out.print(table)
    _say(
        "[dim]top token: the one receiving the largest share of the attention of tokens 1..T-1 (token 0 can only look "
        "at itself). first, prev, self: mean weight that "
        "tokens 2..T-1 give the first token, the one before them, themselves (three different tokens, so they never "
        "add up past 100%). "
        "bits: mean entropy of a row (0 = all on one token).[/]",
        "[dim]最多的词元：在词元 1..T-1 的注意力中得到最大份额的那个（词元 0 只能看它自己）。first、prev、self：词元 2..T-1 "
        "给第一个词元、给它们前一个词元、给自己的平均权重（三个不同的词元，所以加起来不会超过 100%）。bits：一行的平均熵（0 = 全部集中在一个词元上）。[/]",
        zh,
    )


# --- files ------------------------------------------------------------------------------------


def panel(title, w, allowed, labels):
    from tfcli.draw.images import Panel

    return Panel(title, w, allowed, labels, labels)


def write_files(png, svg, csv_path, heading, grid, weights, layers, heads, labels) -> None:
    """--png, --svg, --csv: the image(s) of the panels in `grid`, the weights [nL, nH, T, T] as rows."""
    from tfcli.draw import images

    if png or svg:
        images.check_size(grid, bool(png), bool(svg))
        fonts = images.fonts_or_none()  # None without Pillow: an SVG is then measured by estimate, a PNG refused
        if png and fonts is None:
            raise images.no_pillow()
        drawing = images.layout(grid, heading, measure=fonts.measure if fonts else images.estimate)
        if png:
            images.write_png(png, drawing, fonts)
            note(f"wrote {png} ({drawing.width}×{drawing.height} px)")
            if fonts.missing:
                chars = "".join(sorted(fonts.missing))
                warn(
                    f"no font found has {len(chars)} of the characters, drawn as boxes: {visible(chars[:20])} (set "
                    "TFCLI_FONT to a font that has them)"
                )
        if svg:
            images.write_svg(svg, drawing)
            note(f"wrote {svg} ({drawing.width}×{drawing.height} px)")
    if csv_path:
        import csv
        import io

        from tfcli.output import save
        from tfcli.draw.escape import csv_cell

        def write(f) -> None:
            text = io.TextIOWrapper(f, encoding="utf-8", newline="", write_through=True)
            rows = csv.writer(text)
            rows.writerow(["block", "head", "query", "key", "query_token", "key_token", "weight"])
            cells = [csv_cell(s) for s in labels]  # a token like '=HYPERLINK(...)' stays text in a spreadsheet
            for a, l in enumerate(layers):
                for b, h in enumerate(heads):
                    for q, row in enumerate(weights[a, b]):
                        rows.writerows([l, h, q, k, cells[q], cells[k], f"{x:.9g}"] for k, x in enumerate(row))
            text.flush()
            text.detach()  # f stays open for save() to finish

        save(csv_path, write)
        note(f"wrote {csv_path} ({weights.size:,} weights)")
