"""The results of an SAE on a text: the features per token, and the feature cards."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np

from tfcli.engine.errors import printable

from .result import Result, WIDTH, clip


# --- features ---------------------------------------------------------------------------------


@dataclass(repr=False)
class FeatureShow(Result):
    """Per token, the SAE features that fire on it (`tfcli features show`): `rows[t]` is a list of
    (feature index, activation), strongest first.

    >>> import tfcli
    >>> sae = tfcli.features(tfcli.load("shakespeare"), sae_folder)  # a folder 'tfcli features train -o' wrote
    >>> r = sae.show("To be", top=3)
    >>> len(r.rows), all(len(row) <= 3 for row in r.rows)
    (5, True)
    """

    model: str
    sae: str
    block: int
    site: str
    tokens: np.ndarray
    rows: list[list[tuple[int, float]]]
    _tokenizer: object = field(default=None, repr=False)

    def text(self) -> str:
        lines = [f"{self.model} · {self.sae} (block {self.block}, {self.site}) · features per token "
                 "(index:activation)"]
        for p, (i, row) in enumerate(zip(self.tokens, self.rows)):
            lines.append(
                clip(
                    f"{p:>4} {clip(repr(self._tokenizer.token_text(int(i)))[1:-1], 10):<10} "
                    + (" ".join(f"{j}:{a:.2f}" for j, a in row) or "-"),
                    WIDTH,
                )
            )
        return "\n".join(lines)

    def to_dict(self) -> dict:
        t = self._tokenizer
        return {
            "model": self.model,
            "sae": self.sae,
            "block": self.block,
            "site": self.site,
            "tokens": [
                {
                    "id": int(i),
                    "text": t.token_text(int(i)),
                    "features": [{"index": j, "activation": a} for j, a in row],
                }
                for i, row in zip(self.tokens, self.rows)
            ],
        }

    def _html_body(self) -> str:
        e = html.escape
        rows = "".join(
            f"<tr><td>{p}</td><td><code>{e(repr(self._tokenizer.token_text(int(i)))[1:-1])}</code></td><td>"
            + " ".join(f"{j}:{a:.2f}" for j, a in row)
            + "</td></tr>"
            for p, (i, row) in enumerate(zip(self.tokens, self.rows))
        )
        return (
            f"<div><b>{e(self.model)}</b> · {e(self.sae)} (block {self.block}, {self.site})<table>{rows}</table></div>"
        )


@dataclass(repr=False)
class FeatureCards(Result):
    """Feature cards (`tfcli features top`): for each feature, how often it fires, the contexts
    that fire it most (the token marked) and the tokens its decoder direction pushes up and down.
    `cards`: the command's --json cards.

    >>> import tfcli
    >>> sae = tfcli.features(tfcli.load("shakespeare"), sae_folder)
    >>> r = sae.top("To be, or not to be, that is the question", n=2, contexts=2)
    >>> len(r.cards) <= 2 and all(len(c["contexts"]) <= 2 for c in r.cards)
    True
    """

    model: str
    sae: str
    block: int
    site: str
    tokens: int
    cards: list[dict]

    def text(self) -> str:
        flat = lambda s: printable(s.replace("\n", "⏎"))  # noqa: E731
        lines = []
        for c in self.cards:
            lines.append(f"feature {c['index']}: fires on {100 * c['frequency']:.2f}% of tokens, max {c['max']:.3g}")
            for ctx in c["contexts"]:
                lines.append(
                    clip(
                        f"  {ctx['activation']:7.3f}  "
                        f"{flat(ctx['before'])[-30:]}[{flat(ctx['token'])}]{flat(ctx['after'])}",
                        WIDTH,
                    )
                )
            lines.append(clip("  pushes up: " + " ".join(repr(t["text"]) for t in c["up"]), WIDTH))
            lines.append(clip("  pushes down: " + " ".join(repr(t["text"]) for t in c["down"]), WIDTH))
        return "\n".join(lines) or "no feature fired"

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "sae": self.sae,
            "block": self.block,
            "site": self.site,
            "tokens": self.tokens,
            "features": self.cards,
        }

    def _html_body(self) -> str:
        e = html.escape
        out = []
        for c in self.cards:
            ctx = "".join(
                f"<div><code>{c_['activation']:.3f}</code> "
                f"{e(c_['before'])}<mark><b>{e(c_['token'])}</b></mark>{e(c_['after'])}</div>"
                for c_ in c["contexts"]
            )
            up = " ".join(f"<code>{e(repr(t['text']))}</code>" for t in c["up"])
            down = " ".join(f"<code>{e(repr(t['text']))}</code>" for t in c["down"])
            out.append(
                f'<div style="border:1px solid #ccc;border-radius:6px;padding:8px;margin:6px 0">'
                f"<b>feature {c['index']}</b> · fires on {100 * c['frequency']:.2f}% of tokens, max {c['max']:.3g}"
                f"{ctx}<div>pushes up: {up}</div><div>pushes down: {down}</div></div>"
            )
        return "".join(out) or "<i>no feature fired</i>"
