"""tfcli features: the quality lines, the per-token table of `show`, the cards of `top`."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ..console import err, for_terminal, out, shown
from ..lang import say, zh


def quality_lines(q: dict) -> list[str]:
    """SAELens's measures, one line each, with what they mean; the error is the mean squared error
    per element in the model's own units, as the training bar shows it (cli/features.py)."""
    c = zh()
    if not q:
        return [
            "没有留出的向量：不测质量（--val-fraction 0）"
            if c
            else "no held-out vectors: no quality measured (--val-fraction 0)"
        ]
    mse, ev, l0, dead = q["mse"], 100 * q["explained_variance"], q["l0"], 100 * q["dead_features"]
    if c:
        lines = [
            f"留出：{q['tokens']:,} 个向量",
            f"{MSE_LABEL[c]} {mse:.4g}；解释方差 {ev:.1f}%",
            f"L0 {l0:.1f}：每个向量上平均激活的特征数；死特征 {dead:.1f}%（从未激活）",
        ]
    else:
        lines = [
            f"held out: {q['tokens']:,} vectors",
            f"{MSE_LABEL[c]} {mse:.4g}; explained variance {ev:.1f}%",
            f"L0 {l0:.1f} features on per vector; dead {dead:.1f}% of features never fired",
        ]
    if "loss_recovered" in q:
        rec, clean, sae, zero = 100 * q["loss_recovered"], q["loss_clean"], q["loss_sae"], q["loss_zero"]
        # two lines, so that each fits 80 columns
        lines.append(f"恢复的损失 {rec:.1f}%" if c else f"loss recovered {rec:.1f}%")
        lines.append(
            f"  下一个词元的损失：原样 {clean:.4f}，用 SAE 重建 {sae:.4f}，该处置零 {zero:.4f}"
            if c
            else f"  next-token loss: clean {clean:.4f}, with the SAE {sae:.4f}, site zeroed {zero:.4f}"
        )
    return lines


# The error's one label, in the bar of `features train` and in every summary: per element, model's units.
MSE_LABEL = {False: "MSE per element", True: "每个元素的均方误差"}


def show_table(tokens: list[str], rows: list[list[tuple[int, float]]]) -> None:
    t = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    t.add_column("#", justify="right", style="dim")
    t.add_column(say("token", "词元"))
    t.add_column(say("features (index: activation)", "特征（编号：激活值）"))
    for i, (tok, row) in enumerate(zip(tokens, rows)):
        t.add_row(str(i), Text(repr(tok)[1:-1]), " ".join(f"{j}:{a:.2f}" for j, a in row) or Text("-", style="dim"))
    out.print(t)


def _flat(text: str) -> str:
    """A context on one line: a line break shown as ⏎."""
    return for_terminal(text.replace("\r", "").replace("\n", "⏎"))


def cards(cards: list[dict]) -> None:
    """One block per feature: its numbers, its contexts with the token marked, its logit effects."""
    for c in cards:
        freq, top = 100 * c["frequency"], c["max"]
        said = say(
            f"feature {c['index']}: fires on {freq:.2f}% of tokens, max {top:.3g}",
            f"特征 {c['index']}：在 {freq:.2f}% 的词元上激活，最大 {top:.3g}",
        )
        out.print(shown(said, "bold"), soft_wrap=True)
        for ctx in c["contexts"]:
            line = Text(f"  {ctx['activation']:7.3f}  ", style="dim")
            line += (
                Text(_flat(ctx["before"]))
                + Text("[" + _flat(ctx["token"]) + "]", style="bold reverse")
                + Text(_flat(ctx["after"]))
            )
            out.print(line, soft_wrap=True, no_wrap=True, overflow="ellipsis")
        up = " ".join(repr(t["text"]) for t in c["up"])
        down = " ".join(repr(t["text"]) for t in c["down"])
        out.print(shown(f"  {say('pushes up', '推高')}: {up}"), soft_wrap=True)
        out.print(shown(f"  {say('pushes down', '压低')}: {down}"), soft_wrap=True)


def feature_steering(lm, s, feature: str, seed: int, runs: dict) -> None:
    """steer --feature: the header, then the plain and the steered continuation."""
    out.print(
        shown(
            f"{lm.name} · feature {feature} added at block {s.layer} with activation {s.scale:g}, |direction| "
            f"= {s.norm:.3g} · seed {seed}",
            "bold",
        ),
        soft_wrap=True,
    )
    for name in ("plain", "steered"):
        out.print(shown(f"{name}:", "bold"))
        out.print(Text(for_terminal(runs[name][0])), soft_wrap=True)


__all__ = ["quality_lines", "show_table", "cards", "err"]
