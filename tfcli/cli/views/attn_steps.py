"""What `tfcli attn --steps` prints and writes: one head's attention, one panel per step.

Drawing only: tfcli.analysis.attention_steps computes every array (AttentionSteps); this module
lays them out as numbered steps, each with its formula and shape, in English or in Chinese with
the note's words (查询、键、值、权重、上下文向量), as JSON, and as a PNG/SVG of the arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.text import Text

from ..console import out
from . import heatmap
from .attn import _say

CELL = 6  # characters a number takes in a grid: "-12.34" and "123.4" fit, larger ones in e notation
DIMS = 8  # the first dimensions of a vector shown in the terminal


def num(x: float) -> str:
    """A number in at most CELL - 1 characters (a space before it keeps the cells apart)."""
    if not np.isfinite(x):
        return "-inf" if x < 0 else "inf"
    a = abs(x)
    s = f"{x:.2f}" if a < 10 else f"{x:.1f}" if a < 100 else f"{x:.0f}" if a < 1e4 else f"{x:.0e}"
    return s.replace("e+0", "e").replace("e-0", "e-")


def json_document(name, cfg, tokenizer, text, ids, labels, s) -> dict:
    """The document `attn --steps --json` prints: every array of the steps, whole."""
    from tfcli.json_shapes import token

    return {
        "model": name, "family": cfg.family, "block": s.block, "head": s.head, "kv_head": s.kv_head,
        "heads_sharing_kv": s.sharing, "rope": s.rope, "window": s.window, "softcap": s.softcap, "text": text,
        "tokens": [token(tokenizer, int(t)) | {"position": i, "label": lab}
                   for i, (t, lab) in enumerate(zip(ids, labels))],
        "x": s.x, "q": s.q, "k": s.k, "v": s.v, "scores": s.scores, "scaled": s.scaled, "scale": np.float32(s.scale),
        "weights": s.weights, "context": s.context, "output": s.output,
    }  # fmt: skip


def _grid(
    a: np.ndarray, allowed: np.ndarray | None, rows, cols, row_end=None, end_title: str = "", masked_as: str = "-inf"
) -> Text:
    """a [R, C] as numbers in cells of CELL characters, labelled; masked cells show masked_as, red."""

    def cell(i: int, j: int):
        if allowed is not None and not allowed[i, j]:
            return f"{masked_as:>{CELL}}", "red"
        return f"{num(float(a[i, j])):>{CELL}}", None

    return heatmap.matrix(rows, cols, CELL, cell, row_end, end_title)


def _vectors(a: np.ndarray, labels, dims: int, norm: str) -> Text:
    """[T, n] vectors: their first `dims` numbers and each one's length |a_t|."""
    lengths = np.linalg.norm(a.astype(np.float64), axis=1)  # [T]
    return _grid(
        a[:, :dims],
        None,
        labels,
        [str(d) for d in range(dims)],
        lambda i: f"{lengths[i]:>{CELL + 1}.2f}",
        f"{norm:>{CELL + 1}}",
    )


def fits(width: int, labels) -> int:
    """How many tokens' rows and columns a [T, T] grid can show: labels, cells, and a Σ column."""
    return heatmap.columns_that_fit(width, labels, CELL, extra=CELL + 1)


@dataclass(frozen=True)
class _Shown:
    """What fits the terminal: the first n tokens' labels, dims of a head's vectors, xdims of the model's."""

    lab: list[str]
    dims: int
    xdims: int
    zh: bool

    @property
    def n(self) -> int:
        return len(self.lab)

    def say(self, en: str, cn: str) -> None:
        _say(en, cn, self.zh)


def steps(name, cfg, labels, s, zh: bool) -> None:
    """The note's derivation on a real head, step by step, for the first tokens that fit."""
    T, H = len(labels), cfg.n_head
    n = min(T, fits(out.width, labels))
    dims = min(cfg.head_dim, DIMS, max(1, (out.width - heatmap.label_width(labels[:n]) - 1 - CELL - 1) // CELL))
    v = _Shown(labels[:n], dims, min(cfg.d_model, dims), zh)
    v.say(
        f"[bold]{name}[/] · block {s.block} of {cfg.n_layer} · head {s.head} of {H} · {T} tokens: one head's "
        "attention, step by step",
        f"[bold]{name}[/] · 第 {s.block} 个块（共 {cfg.n_layer} 个）· 第 {s.head} 个头（共 {H} 个）· {T} 个词元：一个头的注意力，一步一步",
    )
    if cfg.n_kv_head != H:
        others = ", ".join(str(h) for h in s.sharing)
        v.say(
            f"[dim]Grouped-query attention: {H} query heads share {cfg.n_kv_head} key/value heads; head {s.head} "
            f"reads key/value head {s.kv_head}, with heads {others}.[/]",
            f"[dim]分组查询注意力：{H} 个查询头共用 {cfg.n_kv_head} 个键/值头；第 {s.head} 个头读第 {s.kv_head} 个键/值头，与第 {others} 个头共用。[/]",
        )
    if n < T:
        v.say(
            f"[dim]Showing the first {n} of {T} tokens (--json has every array whole; --png draws them all).[/]",
            f"[dim]显示 {T} 个词元中的前 {n} 个（--json 给出全部数组；--png 画出全部）。[/]",
        )
    _projections(cfg, s, T, v)
    _scores(cfg, s, T, v)
    _results(cfg, s, T, v)


def _projections(cfg, s, T: int, v: _Shown) -> None:
    """Steps 1-4: the token vectors, then q, k and v (and q before RoPE)."""
    n, lab, dims, xdims, D, Dh = v.n, v.lab, v.dims, v.xdims, cfg.d_model, cfg.head_dim
    cut = f"the first {xdims} of {D} dimensions" if xdims < D else f"all {D} dimensions"
    cut_zh = f"{D} 维中的前 {xdims} 维" if xdims < D else f"全部 {D} 维"
    v.say(
        f"\n[bold]1. The token vectors X[/] [T, D] = [{T}, {D}]: block {s.block}'s input after its norm, a row per "
        f"token ({cut}; |x| is the length).",
        f"\n[bold]1. 词元向量 X[/] [T, D] = [{T}, {D}]：第 {s.block} 个块的输入经过归一化，每个词元一行（{cut_zh}；|x| 是长度）。",
    )
    out.print(_vectors(s.x[:n], lab, xdims, "|x|"))
    dcut = f"first {dims} of {Dh} dimensions" if dims < Dh else f"all {Dh} dimensions"
    dcut_zh = f"{Dh} 维中的前 {dims} 维" if dims < Dh else f"全部 {Dh} 维"
    rope, rope_zh = (", after RoPE", "，已旋转（RoPE）") if s.rope else ("", "")
    v.say(
        f"\n[bold]2. Queries[/] q_t = x_t W_Q [T, Dh] = [{T}, {Dh}]{rope}: what token t is looking for ({dcut}).",
        f"\n[bold]2. 查询[/] q_t = x_t W_Q [T, Dh] = [{T}, {Dh}]{rope_zh}：词元 t 在找什么（{dcut_zh}）。",
    )
    out.print(_vectors(s.q[:n], lab, dims, "|q|"))
    v.say(
        f"\n[bold]3. Keys[/] k_i = x_i W_K [T, Dh]{rope}: what token i offers to a query that looks for it.",
        f"\n[bold]3. 键[/] k_i = x_i W_K [T, Dh]{rope_zh}：词元 i 向寻找它的查询提供什么。",
    )
    out.print(_vectors(s.k[:n], lab, dims, "|k|"))
    v.say(
        "\n[bold]4. Values[/] v_i = x_i W_V [T, Dh]: what token i hands over to the tokens that attend to it.",
        "\n[bold]4. 值[/] v_i = x_i W_V [T, Dh]：词元 i 交给关注它的词元的内容。",
    )
    out.print(_vectors(s.v[:n], lab, dims, "|v|"))
    if s.rope:
        v.say(
            "[dim]RoPE: q_t and k_t above are turned by their position t: each pair of dimensions (i, i + Dh/2) by "
            "the angle "
            "t·θ_i, so that q_t·k_i depends on how far apart t and i are. A rotation keeps lengths. q before it:[/]",
            "[dim]RoPE：上面的 q_t 和 k_t 按位置 t 旋转：每一对维度 (i, i + Dh/2) 转过角度 t·θ_i，"
            "所以 q_t·k_i 取决于 t 和 i 相距多远。旋转不改变长度。旋转前的 q：[/]",
        )
        out.print(_vectors(s.q_unrotated[:n], lab, dims, "|q|"))
    else:
        v.say(
            "[dim]Positions entered with the token embeddings (learned position vectors): q and k are not rotated.[/]",
            "[dim]位置信息随词元嵌入一起进入（学到的位置向量）：q 和 k 不旋转。[/]",
        )


def _scores(cfg, s, T: int, v: _Shown) -> None:
    """Steps 5-8: the scores, scaled, masked, and their softmax: the weight table."""
    n, lab, Dh = v.n, v.lab, cfg.head_dim
    v.say(
        f"\n[bold]5. Scores[/] q_t · k_i [T, T] = [{T}, {T}]: how well token t's query matches token i's key; every "
        "pair has one, the future too.",
        f"\n[bold]5. 分数[/] q_t · k_i [T, T] = [{T}, {T}]：词元 t 的查询与词元 i 的键有多匹配；每一对都有，未来的也有。",
    )
    out.print(_grid(s.scores[:n, :n], None, lab, lab))
    v.say(
        f"\n[bold]6. Divided by √Dh[/] = √{Dh} = {Dh**0.5:.3g} (× scale {s.scale:.4g}), so that the scores do not "
        "grow with the head's size.",
        f"\n[bold]6. 除以 √Dh[/] = √{Dh} = {Dh**0.5:.3g}（即乘以 {s.scale:.4g}），使分数不随头的大小而变大。",
    )
    out.print(_grid(s.scaled[:n, :n], None, lab, lab))
    window = (
        (f" and further back than the window of {s.window}", f"以及比 {s.window} 个位置的窗口更远的地方")
        if s.window
        else ("", "")
    )
    cap = (
        (
            f"; the scores are first capped: {s.softcap:g}·tanh(s / {s.softcap:g})",
            f"；分数先被限幅：{s.softcap:g}·tanh(s / {s.softcap:g})",
        )
        if s.softcap
        else ("", "")
    )
    v.say(
        f"\n[bold]7. The mask[/]: -inf above the diagonal (i > t){window[0]}: a token may not look at the "
        f"future{cap[0]}.",
        f"\n[bold]7. 遮罩[/]：对角线上方（i > t）{window[1]}设为 -inf：词元不能看未来{cap[1]}。",
    )
    out.print(_grid(s.masked[:n, :n], s.allowed[:n, :n], lab, lab))
    v.say(
        "\n[bold]8. Softmax of each row: the weights[/] w_ti = e^s_ti / Σ_j e^s_tj [T, T]: each row sums to 1 (Σ), "
        "the future gets exactly 0.",
        "\n[bold]8. 对每一行做 softmax：权重[/] w_ti = e^s_ti / Σ_j e^s_tj [T, T]：每一行之和为 1（Σ），未来恰好为 0。",
    )
    sums = lambda i: f"{s.weights[i].sum():>{CELL + 1}.2f}"  # noqa: E731  over the whole row, the tokens not shown too
    out.print(_grid(s.weights[:n, :n], s.allowed[:n, :n], lab, lab, sums, f"{'Σ':>{CELL + 1}}", masked_as="0"))


def _results(cfg, s, T: int, v: _Shown) -> None:
    """Steps 9-10: the context vectors and the head's output."""
    D, Dh, H = cfg.d_model, cfg.head_dim, cfg.n_head
    v.say(
        f"\n[bold]9. The context vectors[/] c_t = Σ_i w_ti v_i [T, Dh] = [{T}, {Dh}]: each token's weighted average "
        "of the values it may see.",
        f"\n[bold]9. 上下文向量[/] c_t = Σ_i w_ti v_i [T, Dh] = [{T}, {Dh}]：每个词元对它能看到的值的加权平均。",
    )
    out.print(_vectors(s.context[: v.n], v.lab, v.dims, "|c|"))
    v.say(
        f"\n[bold]10. The head's output[/] c_t W_O\\[h] [T, D] = [{T}, {D}]: head {s.head}'s {Dh} rows of W_O carry "
        "c_t back to the model's width. "
        f"The block adds the {H} heads' outputs (and W_O's bias) to the residual stream.",
        f"\n[bold]10. 这个头的输出[/] c_t W_O\\[h] [T, D] = [{T}, {D}]：W_O 中属于第 {s.head} 个头的 {Dh} 行把 c_t 变回模型的宽度。"
        f"块把 {H} 个头的输出（加上 W_O 的偏置）加到残差流上。",
    )
    out.print(_vectors(s.output[: v.n], v.lab, v.xdims, "|o|"))


def images_grid(s, labels):
    """The PNG/SVG panels: q, k, v on one row; the masked scores, the weights, the context on the next.
    Each panel is scaled to its own largest |value| (a signed scale: blue < 0 < red)."""
    from tfcli.draw.images import Panel

    T, Dh = s.q.shape
    n = min(Dh, max(16, T))  # dimensions drawn: as many as tokens, at least 16, so that the [T, T] cells stay readable
    dims = [str(d) for d in range(n)]
    everything = np.ones((T, n), dtype=bool)
    shape = "[T, Dh]" if n == Dh else f"[T, Dh], first {n} of {Dh}"

    def scaled(a):  # [R, C] -> [-1, 1], the columns drawn
        a = a[:, :n] if a.shape[1] == Dh else a
        top = float(np.abs(a[np.isfinite(a)]).max(initial=0.0))
        return np.where(np.isfinite(a), a / top if top else a, 0.0)

    after = " (after RoPE)" if s.rope else ""
    return [
        [Panel(f"q = x W_Q {shape}{after}", scaled(s.q), everything, labels, dims),
         Panel(f"k = x W_K {shape}{after}", scaled(s.k), everything, labels, dims),
         Panel(f"v = x W_V {shape}", scaled(s.v), everything, labels, dims)],
        [Panel("q·k / √Dh, masked [T, T]", scaled(s.masked), s.allowed, labels, labels),
         Panel("w = softmax [T, T]", s.weights, s.allowed, labels, labels),
         Panel(f"c = Σ w v {shape}", scaled(s.context), everything, labels, dims)],
    ]  # fmt: skip


def write_images(png, svg, heading: str, grid) -> None:
    """--png, --svg: the panels of images_grid, on a signed colour bar."""
    from ..console import note, warn
    from tfcli.draw import images
    from .attn import visible

    images.check_size(grid, bool(png), bool(svg))
    fonts = images.fonts_or_none()  # None without Pillow: an SVG is then measured by estimate, a PNG refused
    if png and fonts is None:
        raise images.no_pillow()
    bar = images.Signed(((1.0, "+max"), (0.0, "0"), (-1.0, "-max")), "each panel / its largest |value|")
    drawing = images.layout(grid, heading, measure=fonts.measure if fonts else images.estimate, signed=bar)
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
