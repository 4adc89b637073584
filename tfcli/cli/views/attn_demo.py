"""`tfcli attn --demo`: attention worked by hand on a small example (the numbers of
tfcli.analysis.attention's worked example), in English or Chinese. Drawing only."""

from __future__ import annotations

import functools

import numpy as np

from ..console import out
from . import heatmap
from .attn import _say, _vec

_ZH_DIMS = {"animal": "动物", "action": "动作", "place": "地点"}  # the worked example's hand-set dimensions


def demo_json(ex) -> None:
    t = ex.row
    finite = lambda a: [[None if not np.isfinite(x) else float(x) for x in r] for r in a]  # noqa: E731
    from ..json import emit

    emit(
        {
            "model": None,
            "tokens": ex.tokens,
            "scores": ex.scores,
            "masked_scores": finite(ex.masked),
            "weights": ex.weights,
            "values": ex.values,
            "value_dims": ex.value_dims,
            "row": t,
            "context": ex.context(t),
        }
    )  # fmt: skip: a worked example by hand, no model


def demo(ex, zh: bool = False) -> None:
    """The worked example (analysis.attention.WorkedExample), step by step (in Chinese with zh)."""
    say = functools.partial(_say, zh=zh)
    _demo_grids(ex, say)
    _demo_row(ex, say, zh)
    _demo_meaning(ex, say)


def _demo_grids(ex, say) -> None:
    """Steps 1-3 on the whole grid: the scores, the mask, the softmax."""
    tokens = ex.tokens
    masked = ex.masked
    colour = heatmap.uses_colour(out)
    everything = np.ones_like(ex.allowed)
    say(
        f"[bold]Attention, worked by hand[/]: [italic]{' '.join(tokens)}[/] ({len(tokens)} tokens)\n",
        f"[bold]手算注意力[/]：[italic]{' '.join(tokens)}[/]（{len(tokens)} 个词元）\n",
    )
    say(
        "[bold]1. Scores[/] s_ti = q_t · k_i / √d_k: how well token t's query matches token i's key (set by hand "
        "here).",
        "[bold]1. 分数[/] s_ti = q_t · k_i / √d_k：词元 t 的查询与词元 i 的键有多匹配（这里是手工设定的）。",
    )
    out.print(heatmap.numbers(ex.scores, everything, tokens, tokens, False, fmt="{:.1f}", row_sums=False))
    say(
        "\n[bold]2. The causal mask[/] sets the future (i > t) to -inf, [italic]before[/] softmax.",
        "\n[bold]2. 因果遮罩[/]在 softmax [italic]之前[/]把未来（i > t）设为 -inf。",
    )
    out.print(
        heatmap.numbers(
            masked,
            ex.allowed,
            tokens,
            tokens,
            False,
            masked_as="-inf",
            fmt="{:.1f}",
            row_sums=False,
            masked_style="red",
        )
    )
    say(
        "\n[bold]3. Softmax[/] of each row: e^s / Σ e^s. e^-inf = 0, so the future gets exactly 0 and each row still "
        "sums to 1 (Σ).",
        "\n[bold]3. 对每一行做 softmax[/]：e^s / Σ e^s。e^-inf = 0，所以未来恰好得到 0，每一行之和仍是 1（Σ）。",
    )
    out.print(heatmap.numbers(ex.weights, ex.allowed, tokens, tokens, colour))


def _demo_row(ex, say, zh: bool) -> None:
    """Step 4: one row, token by token, as a table: score, mask, exponential, weight, value."""
    from rich.table import Table

    t, tokens = ex.row, ex.tokens
    w, masked = ex.weights, ex.masked
    c = ex.context(t)
    say(
        f"\n[bold]4. One row, step by step[/]: token {t} [bold]{tokens[t]!r}[/] mixes the value vectors x_i of the "
        "tokens it may see.",
        f"\n[bold]4. 一行，一步一步[/]：词元 {t} [bold]{tokens[t]!r}[/] 把它能看到的词元的值向量 x_i 混合起来。",
    )
    say(
        f"[dim]Each x_i is ({', '.join(ex.value_dims)}), set by hand.[/]",
        f"[dim]每个 x_i 是（{'、'.join(_ZH_DIMS.get(d, d) for d in ex.value_dims)}），手工设定。[/]",
    )
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_footer=True)
    exps = ex.exps(t)
    table.add_column("i", justify="right")
    table.add_column("词元" if zh else "token", footer="Σ")
    table.add_column("分数" if zh else "score", justify="right")
    table.add_column("遮罩后" if zh else "masked", justify="right")
    table.add_column("e^(s-max)", justify="right", footer=f"{exps.sum():.3f}")
    table.add_column("权重 w" if zh else "weight w", justify="right", footer=f"{w[t].sum():.3f}")
    table.add_column("x_i", footer="c =")
    table.add_column("w · x_i", footer=_vec(c), footer_style="bold")
    for i, tok in enumerate(tokens):
        future = i > t
        table.add_row(
            str(i), tok, f"{ex.scores[t, i]:.1f}", "-inf" if future else f"{masked[t, i]:.1f}",
            f"{exps[i]:.3f}", f"{w[t, i]:.3f}", _vec(ex.values[i], 1), _vec(w[t, i] * ex.values[i]),
            style="dim" if future else None,
        )  # fmt: skip
    out.print(table)


def _demo_meaning(ex, say) -> None:
    """What the row's context vector carries, and what the future would have taken without the mask."""
    t, tokens, w = ex.row, ex.tokens, ex.weights
    c = ex.context(t)
    leak = ex.unmasked_weights(t)
    top, future = tokens[int(w[t].argmax())], tokens[int(leak[t + 1 :].argmax()) + t + 1]
    say(
        f"\nc_{t} = Σ_i w_{t}i x_i = {_vec(c)}: {tokens[t]!r} now carries mostly {top!r} "
        f"({w[t].max():.0%} of its weight). Without the mask, {future!r} from the future "
        f"would have taken {leak[t + 1 :].max():.0%}: at training time the model would read the answer it must "
        "predict.",
        f"\nc_{t} = Σ_i w_{t}i x_i = {_vec(c)}：{tokens[t]!r} 现在主要携带 {top!r} 的信息（占它权重的 {w[t].max():.0%}）。"
        f"如果没有遮罩，来自未来的 {future!r} 会拿走 {leak[t + 1 :].max():.0%}：训练时模型就会读到它要预测的答案。",
    )
    say(
        "[dim]In a model, q, k and the values come from learned matrices (x·W_Q, x·W_K, x·W_V); see 'tfcli attn TEXT' "
        "for real weights.[/]",
        "[dim]在模型中，q、k 和值来自学到的矩阵（x·W_Q、x·W_K、x·W_V）；真实的权重见 'tfcli attn TEXT'。[/]",
    )
