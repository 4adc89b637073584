"""tfcli features: the quality lines, the per-token table of `show`, the cards of `top`."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ..console import err, for_terminal, out, shown


def quality_lines(q: dict) -> list[str]:
    """SAELens's measures, one line each, with what they mean."""
    if not q:
        return ["no held-out vectors: no quality measured (--val-fraction 0)"]
    lines = [
        f"held out: {q['tokens']:,} vectors",
        f"mean squared error {q['mse']:.4g} per element; explained variance {100 * q['explained_variance']:.1f}%",
        f"L0 {q['l0']:.1f} features on per vector; dead {100 * q['dead_features']:.1f}% of features never fired",
    ]
    if "loss_recovered" in q:
        lines.append(f"loss recovered {100 * q['loss_recovered']:.1f}% (next-token loss: clean {q['loss_clean']:.4f}, "
                     f"with the SAE {q['loss_sae']:.4f}, site zeroed {q['loss_zero']:.4f})")  # fmt: skip
    return lines


def show_table(tokens: list[str], rows: list[list[tuple[int, float]]]) -> None:
    t = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    t.add_column("#", justify="right", style="dim")
    t.add_column("token")
    t.add_column("features (index: activation)")
    for i, (tok, row) in enumerate(zip(tokens, rows)):
        t.add_row(str(i), Text(repr(tok)[1:-1]), " ".join(f"{j}:{a:.2f}" for j, a in row) or Text("-", style="dim"))
    out.print(t)


def _flat(text: str) -> str:
    """A context on one line: a line break shown as ⏎."""
    return for_terminal(text.replace("\r", "").replace("\n", "⏎"))


def cards(cards: list[dict]) -> None:
    """One block per feature: its numbers, its contexts with the token marked, its logit effects."""
    for c in cards:
        out.print(shown(f"feature {c['index']}: fires on {100 * c['frequency']:.2f}% of tokens, max {c['max']:.3g}", "bold"), soft_wrap=True)
        for ctx in c["contexts"]:
            line = Text(f"  {ctx['activation']:7.3f}  ", style="dim")
            line += Text(_flat(ctx["before"])) + Text("[" + _flat(ctx["token"]) + "]", style="bold reverse") + Text(_flat(ctx["after"]))
            out.print(line, soft_wrap=True, no_wrap=True, overflow="ellipsis")
        up = " ".join(repr(t["text"]) for t in c["up"])
        down = " ".join(repr(t["text"]) for t in c["down"])
        out.print(shown(f"  pushes up: {up}"), soft_wrap=True)
        out.print(shown(f"  pushes down: {down}"), soft_wrap=True)


def feature_steering(lm, s, feature: str, seed: int, runs: dict) -> None:
    """steer --feature: the header, then the plain and the steered continuation."""
    out.print(shown(f"{lm.name} · feature {feature} added at block {s.layer} with activation {s.scale:g}, |direction| = {s.norm:.3g} · seed {seed}", "bold"), soft_wrap=True)
    for name in ("plain", "steered"):
        out.print(shown(f"{name}:", "bold"))
        out.print(Text(for_terminal(runs[name][0])), soft_wrap=True)


__all__ = ["quality_lines", "show_table", "cards", "err"]
