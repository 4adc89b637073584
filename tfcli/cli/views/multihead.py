"""`tfcli attn --explain`: how D splits into heads, with the numbers of one model (an HeadSplit).

The steps follow Vaswani et al. 2017 (section 3.2.2) and 3Blue1Brown's chapter on attention, whose
Value↓ / Value↑ are one head's slice of W_V (D down to Dh) and of W_O (Dh back up to D).
"""

from __future__ import annotations

import functools

from rich.markup import escape as esc

from ..console import out
from tfcli.draw.escape import json_text


def _n(x: int) -> str:
    return f"{x:,}"


def explain_json(s, model: str | None) -> None:
    print(json_text({
        "model": model, "title": s.name,  # model: -m MODEL, or the --preset name
        "shape": {"blocks": s.config.n_layer, "layers": s.config.n_layer, "d_model": s.config.d_model,
                  "heads": s.config.n_head, "head_dim": s.config.head_dim, "kv_heads": s.config.n_kv_head,
                  "d_attn": s.config.d_attn, "d_kv": s.config.d_kv},
        "q_per_kv": s.config.q_per_kv,
        "groups": [{"kv_head": k, "query_heads": list(g)} for k, g in enumerate(s.groups())],
        # "weights_per_layer": the older name
        "weights_per_block": s.weights_per_layer(), "weights_per_layer": s.weights_per_layer(),
        "value_down": [s.config.d_model, s.config.head_dim], "value_up": [s.config.head_dim, s.config.d_model],
    }))  # fmt: skip


def explain(s, zh: bool, brief: bool = False) -> None:
    """The split of one layer, step by step; brief: only the split and the grouping (for --demo)."""
    say = functools.partial(_say, zh)
    _split(s, say)
    if not brief:
        out.print()
        _steps(s, zh)
        out.print()
        _value_down_and_up(s, say)
        out.print()
        _weights(s, say)
    out.print()
    _grouping(s, say)


def _say(zh: bool, en: str, cn: str, style: str = "", bold: tuple[str, str] = ("", "")) -> None:
    """A sentence, in Chinese only when asked (cli/lang.py's rule); `bold` is a lead-in of each, shown in bold."""
    for lead, line, chinese in ((bold[1], cn, True),) if zh else ((bold[0], en, False),):
        text = (f"[bold]{esc(lead)}[/]" if lead else "") + esc(line)
        text = f"[{style}]{text}[/]" if style else text
        if chinese:  # wrapped between characters, never inside a formula
            from .prose import chinese_markup

            chinese_markup(out, text)
        else:
            out.print(text, highlight=False)


def _split(s, say) -> None:
    """D numbers into H heads of Dh, and the path of one token through them."""
    D, H, Hkv, Dh = s.config.d_model, s.config.n_head, s.config.n_kv_head, s.config.head_dim
    say(f": the shape of each of its {s.config.n_layer} blocks", f"：它 {s.config.n_layer} 个块中每一个的形状",
        bold=(f"Multi-head attention in {s.name}", f"{s.name} 的多头注意力"))  # fmt: skip
    equal = "=" if s.config.d_attn == D else "≠"
    say(
        f"Each token's vector of D = {_n(D)} numbers is projected to H = {H} heads of Dh = {Dh}: {H} × {Dh} = "
        f"{_n(s.config.d_attn)} {equal} D. "
        "Each head asks its own question of the text, with its own queries, keys and values.",
        f"每个词元的向量有 D = {_n(D)} 个数，投影成 H = {H} 个头，每头 Dh = {Dh} 个数：{H} × {Dh} = {_n(s.config.d_attn)} {equal} D。"
        "每个头用自己的查询、键和值，向文本提出自己的问题。",
    )
    heads = f"{H} heads of q, k, v [{Dh}]" if Hkv == H else f"{H} heads of q [{Dh}], {Hkv} of k, v [{Dh}]"
    heads_zh = f"{H} 个头的 q, k, v [{Dh}]" if Hkv == H else f"{H} 个头的 q [{Dh}]，{Hkv} 个头的 k, v [{Dh}]"
    end = f"concat [{_n(s.config.d_attn)}] → W_O → [{_n(D)}]"
    say(f"x [{_n(D)}] → W_Q, W_K, W_V → {heads} → {H} context vectors c_h [{Dh}] → {end}",
        f"x [{_n(D)}] → W_Q, W_K, W_V → {heads_zh} → {H} 个上下文向量 c_h [{Dh}] → {end}", "cyan")  # fmt: skip
    if s.config.d_attn != D:
        say(f"Here H × Dh is not D: W_Q widens the token to {_n(s.config.d_attn)} numbers and W_O maps the "
            f"concatenation back to {_n(D)}.",
            f"这里 H × Dh 不等于 D：W_Q 把词元变成 {_n(s.config.d_attn)} 个数，W_O 再把拼接结果映射回 {_n(D)} 个。", "dim")  # fmt: skip


def _steps(s, zh: bool) -> None:
    """The table of the nine steps, with this model's shapes."""
    from rich.table import Table

    D, H, Hkv, Dh = s.config.d_model, s.config.n_head, s.config.n_kv_head, s.config.head_dim
    last = H - 1
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=True, header_style="bold")
    table.add_column("")
    for col, col_zh in (("step", "步骤"), ("shape", "形状"), (s.name, "此模型")):
        table.add_column(esc(col_zh if zh else col), no_wrap=True)
    kv = f"[{Hkv} × {Dh}]" if Hkv != H else f"[{H} × {Dh}]"
    rows = [
        ("the token's vector", "词元的向量", "x", "[D]", f"[{_n(D)}]"),
        ("queries of all heads", "所有头的查询", "q = x W_Q", "[D] → [H × Dh]", f"[{_n(D)}] → [{H} × {Dh}]"),
        ("keys", "键", "k = x W_K", "[D] → [Hkv × Dh]", f"[{_n(D)}] → {kv}"),
        ("values (Value↓)", "值（Value↓）", "v = x W_V", "[D] → [Hkv × Dh]", f"[{_n(D)}] → {kv}"),
        (
            "head h's weights over i ≤ t",
            "第 h 个头对 i ≤ t 的权重",
            "w_h = softmax(q_h·k_h,i / √Dh)",
            "[T] 每个头" if zh else "[T] per head",
            f"√{Dh} = {Dh**0.5:.3g}",
        ),
        (
            "head h's context vector",
            "第 h 个头的上下文向量",
            "c_h = Σ_i w_h,i v_h,i",
            "[Dh] 每个头" if zh else "[Dh] per head",
            f"[{Dh}] × {H} 个头" if zh else f"[{Dh}] × {H} heads",
        ),
        ("the concatenation", "拼接", f"[c_0 c_1 … c_{last}]", "[H × Dh]", f"[{_n(s.config.d_attn)}]"),
        (
            "the output (Value↑)",
            "输出（Value↑）",
            "o = concat W_O",
            "[H × Dh] → [D]",
            f"[{_n(s.config.d_attn)}] → [{_n(D)}]",
        ),
        ("added to the residual stream", "加回残差流", "x + o", "[D]", f"[{_n(D)}]"),
    ]
    for i, (en, cn, formula, shape, here) in enumerate(rows, 1):
        what = f"[dim]{esc(cn if zh else en)}[/]"
        table.add_row(f"{i}.", f"{esc(formula)}\n{what}", esc(shape), esc(here))
    out.print(table)


def _value_down_and_up(s, say) -> None:
    """3Blue1Brown's Value↓ and Value↑ as slices of W_V and W_O."""
    D, Dh, last = s.config.d_model, s.config.head_dim, s.config.n_head - 1
    say(
        f"Value↓ and Value↑ (3Blue1Brown): head h's slice of W_V, [D, Dh] = [{_n(D)}, {Dh}], takes a token down to "
        f"{Dh} numbers; "
        f"its slice of W_O, [Dh, D] = [{Dh}, {_n(D)}], brings the head's context vector back up to D. "
        f"Models store the Value↑ of all heads as one W_O [H × Dh, D]: concat(c_0 … c_{last}) W_O = Σ_h c_h "
        "W_O[h·Dh:(h+1)·Dh], "
        "the sum of what each head adds.",
        f"Value↓ 和 Value↑（3Blue1Brown）：第 h 个头在 W_V 中的一块 [D, Dh] = [{_n(D)}, {Dh}] 把词元降到 {Dh} 个数；"
        f"它在 W_O 中的一块 [Dh, D] = [{Dh}, {_n(D)}] 把该头的上下文向量升回 D。"
        f"模型把所有头的 Value↑ 存成一个 W_O [H × Dh, D]：concat(c_0 … c_{last}) W_O = Σ_h c_h W_O[h·Dh:(h+1)·Dh]，即各头所加之和。",
    )


def _weights(s, say) -> None:
    """The weights of one layer's attention, matrix by matrix."""
    D, Dh = s.config.d_model, s.config.head_dim
    w = s.weights_per_layer()
    total = sum(w.values())
    shapes = {
        "W_Q": (D, s.config.d_attn),
        "W_K": (D, s.config.d_kv),
        "W_V": (D, s.config.d_kv),
        "W_O": (s.config.d_attn, D),
    }
    parts = ", ".join(f"{k} [{_n(a)}, {_n(b)}] {_n(w[k])}" for k, (a, b) in shapes.items())
    say(f"Weights of one block: {parts}; {_n(total)} in all, {_n(total * s.config.n_layer)} over {s.config.n_layer} "
        "blocks (no biases). "
        f"One head's Value↓ or Value↑: {_n(D)} × {Dh} = {_n(D * Dh)}.",
        f"一个块的权重：{parts}；共 {_n(total)}，{s.config.n_layer} 个块共 {_n(total * s.config.n_layer)}（不计偏置）。"
        f"一个头的 Value↓ 或 Value↑：{_n(D)} × {Dh} = {_n(D * Dh)}。", "dim")  # fmt: skip


def _grouping(s, say) -> None:
    """Which query heads read which key/value head."""
    H, Hkv, G = s.config.n_head, s.config.n_kv_head, s.config.q_per_kv
    if Hkv == H:
        say(f"Every one of the {H} query heads has its own keys and values (plain multi-head attention: Hkv = H = "
            f"{H}).",
            f"{H} 个查询头各有自己的键和值（普通多头注意力：Hkv = H = {H}）。")  # fmt: skip
        return
    span = lambda g: f"{g.start}" if len(g) == 1 else f"{g.start}-{g.stop - 1}"  # noqa: E731
    shared = "; ".join(
        f"{'K' if k == 0 else 'k'}ey/value head {k} serves query heads {span(g)}" for k, g in enumerate(s.groups())
    )
    shared_zh = "；".join(f"键/值头 {k} 供查询头 {span(g)} 使用" for k, g in enumerate(s.groups()))
    kind, kind_zh = (
        ("multi-query attention", "多查询注意力") if Hkv == 1 else ("grouped-query attention", "分组查询注意力")
    )
    say(
        f": the {H} query heads share {Hkv} key/value head{'s' if Hkv > 1 else ''}, {G} each. {shared}. "
        f"Query head h reads key/value head h // {G}. W_K and W_V are [{s.config.d_model:,}, {s.config.d_kv:,}] "
        f"instead of [{s.config.d_model:,}, {s.config.d_attn:,}], "
        f"and the KV cache is {G}× smaller.",
        f"：{H} 个查询头共用 {Hkv} 个键/值头，每个键/值头供 {G} 个查询头使用。{shared_zh}。"
        f"查询头 h 读取键/值头 h // {G}。W_K 和 W_V 是 [{s.config.d_model:,}, {s.config.d_kv:,}] 而不是 [{s.config.d_model:,}, "
        f"{s.config.d_attn:,}]，KV 缓存小 {G} 倍。",
        bold=(kind.capitalize(), kind_zh),
    )
