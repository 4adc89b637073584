"""The results that show attention: a model's weights over a text, and a mask."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfcli.engine.errors import printable

from .result import Result, grid_text, tok


# --- attention and the mask -------------------------------------------------------------------


@dataclass(repr=False)
class Attention(Result):
    """A model's attention weights over a text (`tfcli attn`): `weights` [nB, nH, T, T] for the
    blocks and heads picked (`blocks`, `heads`); row t of a head: how much token t looks at each
    token up to itself (each row sums to 1).

    >>> import tfcli
    >>> r = tfcli.attention(tfcli.load("shakespeare"), "To be", block=-1)
    >>> r.blocks, r.weights.shape
    ([3], (1, 8, 5, 5))
    >>> r.svg().startswith("<svg")
    True
    """

    model: str
    tokens: np.ndarray
    blocks: list[int]
    heads: list[int]
    weights: np.ndarray
    _tokenizer: object = field(default=None, repr=False)
    _n: tuple[int, int] = (0, 0)  # the model's blocks and heads

    def text(self) -> str:
        t = self._tokenizer
        labels = [tok(t, i) for i in self.tokens]
        lines = [
            f"{self.model} · attention · {len(self.blocks)} block(s) x {len(self.heads)} head(s) · "
            f"{len(self.tokens)} tokens"
        ]
        if len(self.blocks) == 1 and len(self.heads) == 1:
            lines.append(
                f"block {self.blocks[0]}, head {self.heads[0]}: row = the token looking, column = the token looked at"
            )
            lines.append(
                grid_text(
                    labels, labels, np.where(np.tri(len(labels), dtype=bool), self.weights[0, 0], np.nan), "{:.2f}", 6
                )
            )
        else:
            lines.append(
                "where each head looks most (mean weight over the text's rows): previous token, itself, the first token"
            )
            t_len = len(self.tokens)
            for a, b in enumerate(self.blocks):
                row = []
                for c, h in enumerate(self.heads):
                    w = self.weights[a, c]
                    prev = w[np.arange(1, t_len), np.arange(t_len - 1)].mean() if t_len > 1 else 0.0
                    diag, first = np.diagonal(w).mean(), w[:, 0].mean()
                    kind = max((prev, "prev"), (diag, "self"), (first, "first"))
                    row.append(f"h{h}:{kind[1]} {kind[0]:.2f}")
                lines.append(f"block {b}: " + ", ".join(row))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        t = self._tokenizer
        return {
            "model": self.model,
            "tokens": [{"id": int(i), "text": t.token_text(int(i)), "position": p} for p, i in enumerate(self.tokens)],
            "blocks": self.blocks,
            "heads": self.heads,
            "weights_shape": list(self.weights.shape),
            "weights": self.weights.tolist(),
        }

    def _drawing(self):
        import math

        from tfcli.analysis.attention import causal_mask
        from tfcli.draw import images
        from tfcli.draw.labels import token_labels

        labels = token_labels(self._tokenizer, self.tokens.tolist())
        allowed = causal_mask(len(self.tokens))
        several = len(self.blocks) > 1 and len(self.heads) > 1

        def title(b: int, h: int) -> str:
            return f"B{b} H{h}" if several else f"block {b}" if len(self.blocks) > 1 else f"head {h}"

        panels = [
            images.Panel(title(b, h), self.weights[i, j], allowed, labels, labels)
            for i, b in enumerate(self.blocks)
            for j, h in enumerate(self.heads)
        ]
        per_row = len(self.heads) if several else math.ceil(math.sqrt(len(panels)))
        grid = [panels[i : i + per_row] for i in range(0, len(panels), per_row)]
        images.check_size(grid, False, True)
        fonts = images.fonts_or_none()

        def which(picked: list[int], n: int, what: str) -> str:
            return (
                f"all {n} {what}s"
                if len(picked) == n > 1
                else f"{what}s {picked}"
                if len(picked) > 1
                else f"{what} {picked[0]} of {n}"
            )

        blocks, heads = which(self.blocks, self._n[0], "block"), which(self.heads, self._n[1], "head")
        heading = f"{self.model} · {blocks} · {heads} · {len(self.tokens)} tokens"
        return images.layout(grid, heading, measure=fonts.measure if fonts else images.estimate)


@dataclass(repr=False)
class Mask(Result):
    """An attention mask (`tfcli attn --show-mask`): `allowed` [T, T] (True where token t may look at
    token i) and `weights` [T, T], the softmax of equal scores under the mask.

    >>> import tfcli
    >>> tfcli.mask("the cat sat on the mat", pattern="sliding:2").weights[3].tolist()
    [0.0, 0.0, 0.5, 0.5, 0.0, 0.0]
    """

    pattern: str
    labels: list[str]
    allowed: np.ndarray
    weights: np.ndarray

    def text(self) -> str:
        return f"{self.pattern} mask · {len(self.labels)} tokens (row: the token looking; 1 = may look)\n" + grid_text(
            [printable(s) for s in self.labels],
            [printable(s) for s in self.labels],
            self.allowed.astype(float),
            "{:.0f}",
            4,
        )

    def to_dict(self) -> dict:
        return {
            "model": None,
            "pattern": self.pattern,
            "tokens": [{"id": None, "text": s, "position": i, "label": s} for i, s in enumerate(self.labels)],
            "allowed": self.allowed.tolist(),
            "weights": self.weights.tolist(),
        }

    def _drawing(self):
        from tfcli.draw import images

        grid = [[images.Panel("softmax(masked scores)", self.weights, self.allowed, self.labels, self.labels)]]
        images.check_size(grid, False, True)
        fonts = images.fonts_or_none()
        return images.layout(
            grid,
            f"{self.pattern} mask · {len(self.labels)} tokens",
            measure=fonts.measure if fonts else images.estimate,
        )
