"""The results of the experiments that trace an answer: the logit lens, patching, ablation, heads, steering."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np

from tfcli.engine.errors import printable

from .result import Result, WIDTH, clip, grid_text, signed_drawing, tok, tokens_json


# --- the logit lens ---------------------------------------------------------------------------


@dataclass(repr=False)
class Lens(Result):
    """The logit lens of a text: at each residual index (0 the embeddings, i the stream after block
    i-1, L the model's output) and position, the top tokens of softmax(unembed(final_norm(h))).

    Attributes: `ids` [L+1, T, k] token ids, most likely first; `probs` [L+1, T, k]; `entropy`
    [L+1, T] in bits; `tokens` [T] the text's ids.

    >>> import tfcli
    >>> r = tfcli.lens(tfcli.load("shakespeare"), "To be, or not to b")
    >>> print(str(r).splitlines()[0])
    shakespeare · logit lens · 4 blocks, residual indices 0-4 · 18 tokens
    >>> r.save(tmp / "lens.svg").exists()
    True
    """

    model: str
    tokens: np.ndarray
    ids: np.ndarray
    probs: np.ndarray
    entropy: np.ndarray
    _tokenizer: object = field(default=None, repr=False)

    def text(self) -> str:
        t = self._tokenizer
        n = self.ids.shape[0]
        rows = ["emb", *map(str, range(1, n))]
        lead, cell = 4, 8
        fit = max(1, (WIDTH - lead) // cell)
        cols = list(range(len(self.tokens)))[-fit:]
        out = [
            f"{self.model} · logit lens · {n - 1} blocks, residual indices 0-{n - 1} · {len(self.tokens)} tokens",
            " " * lead + "".join(clip(tok(t, self.tokens[j]), cell - 1).rjust(cell) for j in cols),
        ]
        for i in range(n):
            out.append(
                rows[i].rjust(lead - 1)
                + " "
                + "".join(clip(tok(t, self.ids[i, j, 0]), cell - 1).rjust(cell) for j in cols)
            )
        if len(cols) < len(self.tokens):
            out.append(f"(the last {len(cols)} of {len(self.tokens)} positions)")
        out.append("each cell: the top next token at that residual index (row) and position (column)")
        return "\n".join(out)

    def to_dict(self) -> dict:
        t = self._tokenizer
        entry = lambda layer, p: {  # noqa: E731
            "position": p,
            "token_id": int(self.ids[layer, p, 0]),
            "token": t.token_text(int(self.ids[layer, p, 0])),
            "prob": float(self.probs[layer, p, 0]),
            **(
                {
                    "top": [
                        {"token_id": int(i), "token": t.token_text(int(i)), "prob": float(v)}
                        for i, v in zip(self.ids[layer, p], self.probs[layer, p])
                    ]
                }
                if self.ids.shape[2] > 1
                else {}
            ),
        }
        return {
            "model": self.model,
            "tokens": tokens_json(t, self.tokens),
            "layers": [
                {"resid": layer, "layer": layer, "positions": [entry(layer, p) for p in range(len(self.tokens))]}
                for layer in range(len(self.ids))
            ],
        }

    def next_tokens(self, position: int = -1) -> list[tuple[str, float]]:
        """The model's own top tokens after `position` (the last residual index): (text, probability)."""
        return [
            (self._tokenizer.token_text(int(i)), float(p))
            for i, p in zip(self.ids[-1, position], self.probs[-1, position])
        ]

    def _html_body(self) -> str:
        """The grid, then the next-token bars of the last position."""
        e = html.escape
        bars = "".join(
            f'<div style="display:flex;align-items:center;gap:6px;font-family:monospace">'
            f'<span style="width:9em;text-align:right;white-space:pre">{e(repr(t))}</span>'
            f'<span '
            f'style="display:inline-block;height:12px;width:{max(1, round(300 * p))}px;background:#3b6fb6"></span>'
            f"<span>{100 * p:.1f}%</span></div>"
            for t, p in self.next_tokens()
        )
        return (
            f'<div style="overflow:auto">{self.svg()}</div><div><b>next token</b> after the last position{bars}</div>'
        )

    def _drawing(self):
        from tfcli.draw.labels import token_labels, token_str
        from tfcli.draw.lens import lens_drawing

        t = self._tokenizer
        names = [[token_str(t, int(i)) for i in row] for row in self.ids[:, :, 0]]
        return lens_drawing(
            f"{self.model} · logit lens · {len(self.tokens)} tokens",
            self.probs[:, :, 0],
            token_labels(t, self.tokens.tolist()),
            names,
        )


# --- patching, ablation, heads, steering ------------------------------------------------------


@dataclass(repr=False)
class Patching(Result):
    """Activation patching (`tfcli patch`): `grid` [rows, columns] says how much of the logit
    difference answer - wrong the clean run's activation brings back into the corrupt run (1: all
    of it). site "resid": rows are residual indices, columns positions; "heads": blocks x heads;
    "mlp": blocks x positions.

    >>> import tfcli
    >>> r = tfcli.patch(tfcli.load("shakespeare"), "To be, or not to b", "To go, or not to g", site="mlp")
    >>> r.grid.shape, r.to_dict()["grid"][0]["block"]
    ((4, 18), 0)
    """

    model: str
    site: str
    clean: np.ndarray
    corrupt: np.ndarray
    answer: int
    wrong: int
    clean_logit_diff: float
    corrupt_logit_diff: float
    grid: np.ndarray
    _tokenizer: object = field(default=None, repr=False)

    def _labels(self):
        t = self._tokenizer
        cols = [
            a if a == b else f"{a}/{b}" for a, b in ((tok(t, c), tok(t, d)) for c, d in zip(self.clean, self.corrupt))
        ]
        if self.site == "heads":
            return [str(b) for b in range(self.grid.shape[0])], [f"h{h}" for h in range(self.grid.shape[1])]
        rows = (
            ["emb", *map(str, range(1, self.grid.shape[0]))]
            if self.site == "resid"
            else [str(b) for b in range(self.grid.shape[0])]
        )
        return rows, cols

    def text(self) -> str:
        t = self._tokenizer
        rows, cols = self._labels()
        return (
            f"{self.model} · activation patching · {self.site}\n"
            f"answer {tok(t, self.answer)!r} vs {tok(t, self.wrong)!r}: logit difference "
            f"{self.clean_logit_diff:+.2f} clean, {self.corrupt_logit_diff:+.2f} corrupt\n"
            + grid_text(rows, cols, self.grid, "{:.2f}")
            + "\neach cell: the share of the logit difference that one activation of the clean run brings "
              "back (1 = all)"
        )

    def to_dict(self) -> dict:
        t = self._tokenizer
        keys = (
            ("resid", "layer") if self.site == "resid" else ("block",) if self.site == "heads" else ("block", "layer")
        )
        return {
            "model": self.model,
            "site": self.site,
            "clean": {"tokens": tokens_json(t, self.clean)},
            "corrupt": {"tokens": tokens_json(t, self.corrupt)},
            "answer": {"id": self.answer, "text": t.token_text(self.answer)},
            "wrong": {"id": self.wrong, "text": t.token_text(self.wrong)},
            "clean_logit_diff": self.clean_logit_diff,
            "corrupt_logit_diff": self.corrupt_logit_diff,
            "grid": [{**dict.fromkeys(keys, i), "values": row} for i, row in enumerate(self.grid.tolist())],
        }

    def _drawing(self):
        from tfcli.draw.scales import top_of

        rows, cols = self._labels()
        t = self._tokenizer
        title = {
            "resid": "rows: residual index, columns: position",
            "heads": "rows: block, columns: head",
            "mlp": "rows: block (its MLP), columns: position",
        }[self.site]
        heading = (f"{self.model} · how much of the answer {tok(t, self.answer)!r} rather than "
                   f"{tok(t, self.wrong)!r} one part of the clean run brings back")
        return signed_drawing(
            heading, title + " · 1 = all of it, 0 = none", self.grid, rows, cols, max(1.0, top_of(self.grid))
        )


@dataclass(repr=False)
class Ablation(Result):
    """Ablation (`tfcli ablate`): the change of the answer's log-probability after the last token
    with each head zeroed (`heads` [L, H]) and each MLP zeroed (`mlps` [L]); negative: needed.

    >>> import tfcli
    >>> r = tfcli.ablate(tfcli.load("shakespeare"), "To be, or not to b", answer="e")
    >>> int(r.mlps.argmin())  # the MLP the answer needed most
    0
    """

    model: str
    tokens: np.ndarray
    answer: int
    logprob: float
    heads: np.ndarray
    mlps: np.ndarray
    _tokenizer: object = field(default=None, repr=False)

    def _grid(self):
        values = np.concatenate([self.heads, self.mlps[:, None]], axis=1)  # [L, H+1]
        return [str(b) for b in range(len(self.heads))], [f"h{h}" for h in range(self.heads.shape[1])] + ["mlp"], values

    def text(self) -> str:
        rows, cols, values = self._grid()
        return (
            f"{self.model} · ablation · answer {tok(self._tokenizer, self.answer)!r} (log-probability "
            f"{self.logprob:.3f})\n"
            + grid_text(rows, cols, values)
            + "\neach cell: the change in the answer's log-probability with that head (or MLP) taken out"
        )

    def to_dict(self) -> dict:
        t = self._tokenizer
        return {
            "model": self.model,
            "tokens": tokens_json(t, self.tokens),
            "answer": {"id": self.answer, "text": t.token_text(self.answer), "logprob": self.logprob},
            "heads": [{"block": b, "values": row} for b, row in enumerate(self.heads.tolist())],
            "mlps": self.mlps.tolist(),
        }

    def _drawing(self):
        from tfcli.draw.scales import top_of

        rows, cols, values = self._grid()
        return signed_drawing(
            f"{self.model} · change in the log-probability of {tok(self._tokenizer, self.answer)!r} with "
            "one part taken out",
            "rows: block, columns: head (and the MLP)",
            values,
            rows,
            cols,
            top_of(values),
            log=True,
        )


@dataclass(repr=False)
class Heads(Result):
    """What each head does (`tfcli heads`): direct logit attribution of the target at `position`
    (`heads` [L, H], `mlps` [L], `embedding`, `bias`, `total` = their sum, `logit` the model's), and
    the detectors [L, H] from 0 to 1: previous_token, first_token, induction, duplicate_token.

    >>> import tfcli
    >>> r = tfcli.heads(tfcli.load("shakespeare"), "To be, or not to b")
    >>> r.previous_token.shape, bool(0 <= r.previous_token.min() and r.previous_token.max() <= 1)
    ((4, 8), True)
    """

    model: str
    tokens: np.ndarray
    position: int
    target: int
    logit: float
    embedding: float
    heads: np.ndarray
    mlps: np.ndarray
    bias: float
    total: float
    previous_token: np.ndarray
    first_token: np.ndarray
    induction: np.ndarray
    duplicate_token: np.ndarray
    induction_tokens: list[int]
    _tokenizer: object = field(default=None, repr=False)

    def text(self) -> str:
        def best(a: np.ndarray, n: int = 5) -> str:
            flat = np.argsort(-a, axis=None, kind="stable")[:n]
            return ", ".join(f"{b}.{h} ({a[b, h]:+.2f})" for b, h in zip(*np.unravel_index(flat, a.shape)))

        lines = [
            f"{self.model} · heads · target {tok(self._tokenizer, self.target)!r} at position {self.position}"
            f" (logit {self.logit:.2f} = parts {self.total:.2f})",
            f"pushed it up most (block.head): {best(self.heads)}",
            f"embedding {self.embedding:+.2f}; MLPs {' '.join(f'{v:+.1f}' for v in self.mlps)}; biases "
            f"{self.bias:+.2f}",
        ]
        for name in ("previous_token", "first_token", "induction", "duplicate_token"):
            lines.append(f"{name.replace('_', '-')} heads: {best(getattr(self, name), 3)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        t = self._tokenizer
        return {
            "model": self.model,
            "tokens": tokens_json(t, self.tokens),
            "position": self.position,
            "target": {"id": self.target, "text": t.token_text(self.target), "logit": self.logit},
            "embedding": self.embedding,
            "heads": [{"block": b, "values": row} for b, row in enumerate(self.heads.tolist())],
            "mlps": self.mlps.tolist(),
            "bias": self.bias,
            "total": self.total,
            "detectors": {
                k: getattr(self, k).tolist() for k in ("previous_token", "first_token", "induction", "duplicate_token")
            },
            "induction_tokens": [int(i) for i in self.induction_tokens],
        }

    def _drawing(self):
        from tfcli.draw.scales import top_of

        rows = [str(b) for b in range(len(self.heads))]
        cols = [f"h{h}" for h in range(self.heads.shape[1])] + ["mlp"]
        values = np.concatenate([self.heads, self.mlps[:, None]], axis=1)  # [L, H+1]
        return signed_drawing(
            f"{self.model} · direct logit attribution of {tok(self._tokenizer, self.target)!r} at position "
            f"{self.position}",
            "rows: block, columns: head (and the MLP)",
            values,
            rows,
            cols,
            top_of(values),
        )


@dataclass(repr=False)
class Steering(Result):
    """Steering (`tfcli steer`): `vector` [D] (toward minus away at `block`'s output) added `scale`
    times at every position; `plain` and `steered`: the two continuations, same seed.

    >>> import tfcli
    >>> r = tfcli.steer(tfcli.load("shakespeare"), "To be, or", toward="love", away="death", block=2,
    ...                 max_new_tokens=5, temperature=0)
    >>> sorted(r.to_dict()) == sorted(["model", "prompt", "block", "layer", "scale", "toward", "away", "vector_norm",
    ...                                "seed", "plain", "steered"])
    True
    """

    model: str
    prompt: str
    block: int
    scale: float
    vector: np.ndarray
    plain: str
    steered: str
    plain_ids: list[int]
    steered_ids: list[int]
    seed: int
    toward: str | None = None
    away: str | None = None

    def text(self) -> str:
        return (
            f"{self.model} · steering at block {self.block}, scale {self.scale:g}, |v| = "
            f"{float(np.linalg.norm(self.vector)):.3g}\n"
            f"plain:   {printable(self.prompt + self.plain)}\nsteered: {printable(self.prompt + self.steered)}"
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "prompt": self.prompt,
            "block": self.block,
            "layer": self.block,
            "scale": self.scale,
            "toward": self.toward,
            "away": self.away,
            "vector_norm": float(np.linalg.norm(self.vector)),
            "seed": self.seed,
            "plain": {"text": self.plain, "token_ids": self.plain_ids},
            "steered": {"text": self.steered, "token_ids": self.steered_ids},
        }

    def _html_body(self) -> str:
        e = html.escape
        return (
            f"<div><b>{e(self.model)}</b> · steering at block {self.block}, scale {self.scale:g}"
            f"<table><tr><th>plain</th><td>{e(self.prompt)}<b>{e(self.plain)}</b></td></tr>"
            f"<tr><th>steered</th><td>{e(self.prompt)}<b>{e(self.steered)}</b></td></tr></table></div>"
        )
