"""The results of the experiments: values (NumPy arrays, numbers, token ids) that print their text
form, draw themselves in Jupyter (`_repr_html_`) and save as `.png`, `.svg` or `.json`.

The JSON is the command's `--json` document (the same keys, floats to 4 significant digits). The
pictures are drawn by the command line's drawing code (tfcli/cli/views/), imported only when a
picture is asked for.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfcli.engine.errors import UsageError, printable

WIDTH = 80  # columns of a text form


def tok(tokenizer, i: int) -> str:
    """A token's text, every control character made visible (a newline as \\n), a space as ␣."""
    text = tokenizer.token_text(int(i))
    return "␣" * len(text) if text and text.strip(" ") == "" else printable(text)


def clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def tokens_json(tokenizer, ids) -> list[dict]:
    return [{"id": int(i), "text": tokenizer.token_text(int(i))} for i in ids]


def grid_text(rows: list[str], cols: list[str], values: np.ndarray, fmt: str = "{:+.2f}", cell: int = 7) -> str:
    """values [R, C] as a table of `cell`-wide columns, as many as fit WIDTH (the last ones)."""
    lead = max(len(r) for r in rows) + 1
    fit = max(1, (WIDTH - lead) // cell)
    shown = list(range(len(cols)))[-fit:]
    lines = [" " * lead + "".join(clip(cols[j], cell - 1).rjust(cell) for j in shown)]
    for i, r in enumerate(rows):
        lines.append(r.rjust(lead - 1) + " " + "".join(fmt.format(values[i, j]).rjust(cell) if np.isfinite(values[i, j]) else "·".rjust(cell) for j in shown))
    if len(shown) < len(cols):
        lines.append(f"(the last {len(shown)} of {len(cols)} columns; .save('x.json') or the picture for all)")
    return "\n".join(lines)


class Result:
    """What every result has: its text form (str() and repr()), `_repr_html_` for Jupyter, `save()`."""

    def text(self) -> str:  # the text form
        raise NotImplementedError

    def to_dict(self) -> dict:
        """The command's --json document."""
        raise NotImplementedError

    def _drawing(self):
        """The picture (cli/views/images.Drawing), or None for a result drawn as HTML only."""
        return None

    def _html_body(self) -> str | None:
        """HTML other than a picture (a feature card), or None."""
        return None

    def __str__(self) -> str:
        import textwrap

        lines = self.text().splitlines()
        return "\n".join(part for line in lines for part in ([line] if len(line) <= WIDTH else textwrap.wrap(line, WIDTH, subsequent_indent="  ")))

    __repr__ = __str__

    def svg(self) -> str:
        """The picture as SVG text."""
        import tempfile

        from tfcli.cli.views import images

        d = self._drawing()
        if d is None:
            raise UsageError(f"a {type(self).__name__} has no picture", "save it as .json")
        with tempfile.TemporaryDirectory(prefix="tfcli-svg-") as tmp:
            path = Path(tmp) / "x.svg"
            images.write_svg(path, d)
            text = path.read_text(encoding="utf-8")
        return text[text.index("<svg") :]  # inline: without the XML declaration

    def _repr_html_(self) -> str:
        body = self._html_body()
        if body is None:
            body = f'<div style="overflow:auto">{self.svg()}</div>'
        return f'{body}<details><summary>text</summary><pre>{html.escape(str(self))}</pre></details>'

    def save(self, path: str | Path) -> Path:
        """Write the result to `path`: .png (needs Pillow), .svg or .json (the command's --json).
        Returns the path."""
        from tfcli.cli import output

        path = Path(path)
        kind = path.suffix.lower()
        if kind == ".json":
            from tfcli.cli.json import dumps

            output.save_text(path, dumps(self.to_dict()) + "\n")
            return path
        if kind not in (".png", ".svg"):
            raise UsageError(f"save() writes .png, .svg or .json, not {printable(path.name)!r}")
        from tfcli.cli.views import images

        d = self._drawing()
        if d is None:
            raise UsageError(f"a {type(self).__name__} has no picture", "save it as .json")
        if kind == ".svg":
            images.write_svg(path, d)
        else:
            fonts = images.fonts_or_none()
            if fonts is None:
                raise images.no_pillow()
            images.write_png(path, d, fonts)
        return path


def _signed_drawing(heading: str, title: str, values: np.ndarray, rows: list[str], cols: list[str], top: float, log: bool = False):
    """A signed grid (patching, ablation) as the commands' --png/--svg draw it."""
    from tfcli.cli.views import images
    from tfcli.cli.views.experiments import picture_scale, shade

    top = top or 1.0
    panel = images.Panel(title, shade(values, top, log), np.ones(values.shape, dtype=bool), rows, cols)
    images.check_size([[panel]], False, True)
    fonts = images.fonts_or_none()
    return images.layout([[panel]], heading, measure=fonts.measure if fonts else images.estimate, signed=picture_scale(top, log))


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
        out = [f"{self.model} · logit lens · {n - 1} blocks, residual indices 0-{n - 1} · {len(self.tokens)} tokens",
               " " * lead + "".join(clip(tok(t, self.tokens[j]), cell - 1).rjust(cell) for j in cols)]  # fmt: skip
        for i in range(n):
            out.append(rows[i].rjust(lead - 1) + " " + "".join(clip(tok(t, self.ids[i, j, 0]), cell - 1).rjust(cell) for j in cols))
        if len(cols) < len(self.tokens):
            out.append(f"(the last {len(cols)} of {len(self.tokens)} positions)")
        out.append("each cell: the top next token at that residual index (row) and position (column)")
        return "\n".join(out)

    def to_dict(self) -> dict:
        t = self._tokenizer
        entry = lambda layer, p: {  # noqa: E731
            "position": p, "token_id": int(self.ids[layer, p, 0]), "token": t.token_text(int(self.ids[layer, p, 0])), "prob": float(self.probs[layer, p, 0]),
            **({"top": [{"token_id": int(i), "token": t.token_text(int(i)), "prob": float(v)} for i, v in zip(self.ids[layer, p], self.probs[layer, p])]} if self.ids.shape[2] > 1 else {}),
        }  # fmt: skip
        return {"model": self.model, "tokens": tokens_json(t, self.tokens),
                "layers": [{"resid": layer, "layer": layer, "positions": [entry(layer, p) for p in range(len(self.tokens))]} for layer in range(len(self.ids))]}  # fmt: skip

    def _drawing(self):
        from tfcli.cli.views.attn import token_labels
        from tfcli.cli.views.inside import token_str
        from tfcli.cli.views.lens import lens_drawing

        t = self._tokenizer
        names = [[token_str(t, int(i)) for i in row] for row in self.ids[:, :, 0]]
        return lens_drawing(f"{self.model} · logit lens · {len(self.tokens)} tokens", self.probs[:, :, 0], token_labels(t, self.tokens.tolist()), names)


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
        cols = [a if a == b else f"{a}/{b}" for a, b in ((tok(t, c), tok(t, d)) for c, d in zip(self.clean, self.corrupt))]
        if self.site == "heads":
            return [str(b) for b in range(self.grid.shape[0])], [f"h{h}" for h in range(self.grid.shape[1])]
        rows = ["emb", *map(str, range(1, self.grid.shape[0]))] if self.site == "resid" else [str(b) for b in range(self.grid.shape[0])]
        return rows, cols

    def text(self) -> str:
        t = self._tokenizer
        rows, cols = self._labels()
        return (f"{self.model} · activation patching · {self.site}\n"
                f"answer {tok(t, self.answer)!r} vs {tok(t, self.wrong)!r}: logit difference {self.clean_logit_diff:+.2f} clean, {self.corrupt_logit_diff:+.2f} corrupt\n"
                + grid_text(rows, cols, self.grid, "{:.2f}")
                + "\neach cell: the share of the logit difference that one activation of the clean run brings back (1 = all)")  # fmt: skip

    def to_dict(self) -> dict:
        t = self._tokenizer
        keys = ("resid", "layer") if self.site == "resid" else ("block",) if self.site == "heads" else ("block", "layer")
        return {"model": self.model, "site": self.site,
                "clean": {"tokens": tokens_json(t, self.clean)}, "corrupt": {"tokens": tokens_json(t, self.corrupt)},
                "answer": {"id": self.answer, "text": t.token_text(self.answer)}, "wrong": {"id": self.wrong, "text": t.token_text(self.wrong)},
                "clean_logit_diff": self.clean_logit_diff, "corrupt_logit_diff": self.corrupt_logit_diff,
                "grid": [{**dict.fromkeys(keys, i), "values": row} for i, row in enumerate(self.grid.tolist())]}  # fmt: skip

    def _drawing(self):
        from tfcli.cli.views.experiments import top_of

        rows, cols = self._labels()
        t = self._tokenizer
        title = {"resid": "rows: residual index, columns: position", "heads": "rows: block, columns: head", "mlp": "rows: block (its MLP), columns: position"}[self.site]
        heading = f"{self.model} · how much of the answer {tok(t, self.answer)!r} rather than {tok(t, self.wrong)!r} one part of the clean run brings back"
        return _signed_drawing(heading, title + " · 1 = all of it, 0 = none", self.grid, rows, cols, max(1.0, top_of(self.grid)))


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
        return (f"{self.model} · ablation · answer {tok(self._tokenizer, self.answer)!r} (log-probability {self.logprob:.3f})\n"
                + grid_text(rows, cols, values)
                + "\neach cell: the change in the answer's log-probability with that head (or MLP) taken out")  # fmt: skip

    def to_dict(self) -> dict:
        t = self._tokenizer
        return {"model": self.model, "tokens": tokens_json(t, self.tokens),
                "answer": {"id": self.answer, "text": t.token_text(self.answer), "logprob": self.logprob},
                "heads": [{"block": b, "values": row} for b, row in enumerate(self.heads.tolist())], "mlps": self.mlps.tolist()}  # fmt: skip

    def _drawing(self):
        from tfcli.cli.views.experiments import top_of

        rows, cols, values = self._grid()
        return _signed_drawing(f"{self.model} · change in the log-probability of {tok(self._tokenizer, self.answer)!r} with one part taken out",
                               "rows: block, columns: head (and the MLP)", values, rows, cols, top_of(values), log=True)  # fmt: skip


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

        lines = [f"{self.model} · heads · target {tok(self._tokenizer, self.target)!r} at position {self.position} (logit {self.logit:.2f} = parts {self.total:.2f})",
                 f"pushed it up most (block.head): {best(self.heads)}",
                 f"embedding {self.embedding:+.2f}; MLPs {' '.join(f'{v:+.1f}' for v in self.mlps)}; biases {self.bias:+.2f}"]  # fmt: skip
        for name in ("previous_token", "first_token", "induction", "duplicate_token"):
            lines.append(f"{name.replace('_', '-')} heads: {best(getattr(self, name), 3)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        t = self._tokenizer
        return {"model": self.model, "tokens": tokens_json(t, self.tokens), "position": self.position,
                "target": {"id": self.target, "text": t.token_text(self.target), "logit": self.logit},
                "embedding": self.embedding, "heads": [{"block": b, "values": row} for b, row in enumerate(self.heads.tolist())],
                "mlps": self.mlps.tolist(), "bias": self.bias, "total": self.total,
                "detectors": {k: getattr(self, k).tolist() for k in ("previous_token", "first_token", "induction", "duplicate_token")},
                "induction_tokens": [int(i) for i in self.induction_tokens]}  # fmt: skip

    def _drawing(self):
        from tfcli.cli.views.experiments import top_of

        rows = [str(b) for b in range(len(self.heads))]
        cols = [f"h{h}" for h in range(self.heads.shape[1])] + ["mlp"]
        values = np.concatenate([self.heads, self.mlps[:, None]], axis=1)  # [L, H+1]
        return _signed_drawing(f"{self.model} · direct logit attribution of {tok(self._tokenizer, self.target)!r} at position {self.position}",
                               "rows: block, columns: head (and the MLP)", values, rows, cols, top_of(values))  # fmt: skip


@dataclass(repr=False)
class Steering(Result):
    """Steering (`tfcli steer`): `vector` [D] (toward minus away at `block`'s output) added `scale`
    times at every position; `plain` and `steered`: the two continuations, same seed.

    >>> import tfcli
    >>> r = tfcli.steer(tfcli.load("shakespeare"), "To be, or", toward="love", away="death", block=2, max_new_tokens=5, temperature=0)
    >>> sorted(r.to_dict()) == sorted(["model", "prompt", "block", "layer", "scale", "toward", "away", "vector_norm", "seed", "plain", "steered"])
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
        return (f"{self.model} · steering at block {self.block}, scale {self.scale:g}, |v| = {float(np.linalg.norm(self.vector)):.3g}\n"
                f"plain:   {printable(self.prompt + self.plain)}\nsteered: {printable(self.prompt + self.steered)}")  # fmt: skip

    def to_dict(self) -> dict:
        return {"model": self.model, "prompt": self.prompt, "block": self.block, "layer": self.block, "scale": self.scale,
                "toward": self.toward, "away": self.away, "vector_norm": float(np.linalg.norm(self.vector)), "seed": self.seed,
                "plain": {"text": self.plain, "token_ids": self.plain_ids}, "steered": {"text": self.steered, "token_ids": self.steered_ids}}  # fmt: skip

    def _html_body(self) -> str:
        e = html.escape
        return (f"<div><b>{e(self.model)}</b> · steering at block {self.block}, scale {self.scale:g}"
                f"<table><tr><th>plain</th><td>{e(self.prompt)}<b>{e(self.plain)}</b></td></tr>"
                f"<tr><th>steered</th><td>{e(self.prompt)}<b>{e(self.steered)}</b></td></tr></table></div>")  # fmt: skip


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
        lines = [f"{self.model} · attention · {len(self.blocks)} block(s) x {len(self.heads)} head(s) · {len(self.tokens)} tokens"]
        if len(self.blocks) == 1 and len(self.heads) == 1:
            lines.append(f"block {self.blocks[0]}, head {self.heads[0]}: row = the token looking, column = the token looked at")
            lines.append(grid_text(labels, labels, np.where(np.tri(len(labels), dtype=bool), self.weights[0, 0], np.nan), "{:.2f}", 6))
        else:
            lines.append("where each head looks most (mean weight over the text's rows): previous token, itself, the first token")
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
        return {"model": self.model, "tokens": [{"id": int(i), "text": t.token_text(int(i)), "position": p} for p, i in enumerate(self.tokens)],
                "blocks": self.blocks, "heads": self.heads, "weights_shape": list(self.weights.shape), "weights": self.weights.tolist()}  # fmt: skip

    def _drawing(self):
        import math

        from tfcli.analysis.attention import causal_mask
        from tfcli.cli.views import images
        from tfcli.cli.views.attn import token_labels

        labels = token_labels(self._tokenizer, self.tokens.tolist())
        allowed = causal_mask(len(self.tokens))
        several = len(self.blocks) > 1 and len(self.heads) > 1
        title = lambda b, h: f"B{b} H{h}" if several else f"block {b}" if len(self.blocks) > 1 else f"head {h}"  # noqa: E731
        panels = [images.Panel(title(b, h), self.weights[i, j], allowed, labels, labels) for i, b in enumerate(self.blocks) for j, h in enumerate(self.heads)]
        per_row = len(self.heads) if several else math.ceil(math.sqrt(len(panels)))
        grid = [panels[i : i + per_row] for i in range(0, len(panels), per_row)]
        images.check_size(grid, False, True)
        fonts = images.fonts_or_none()
        which = lambda picked, n, what: f"all {n} {what}s" if len(picked) == n > 1 else f"{what}s {picked}" if len(picked) > 1 else f"{what} {picked[0]} of {n}"  # noqa: E731
        heading = f"{self.model} · {which(self.blocks, self._n[0], 'block')} · {which(self.heads, self._n[1], 'head')} · {len(self.tokens)} tokens"
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
        return (f"{self.pattern} mask · {len(self.labels)} tokens (row: the token looking; 1 = may look)\n"
                + grid_text([printable(s) for s in self.labels], [printable(s) for s in self.labels], self.allowed.astype(float), "{:.0f}", 4))  # fmt: skip

    def to_dict(self) -> dict:
        return {"model": None, "pattern": self.pattern, "tokens": [{"id": None, "text": s, "position": i, "label": s} for i, s in enumerate(self.labels)],
                "allowed": self.allowed.tolist(), "weights": self.weights.tolist()}  # fmt: skip

    def _drawing(self):
        from tfcli.cli.views import images

        grid = [[images.Panel("softmax(masked scores)", self.weights, self.allowed, self.labels, self.labels)]]
        images.check_size(grid, False, True)
        fonts = images.fonts_or_none()
        return images.layout(grid, f"{self.pattern} mask · {len(self.labels)} tokens", measure=fonts.measure if fonts else images.estimate)


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
        lines = [f"{self.model} · {self.sae} (block {self.block}, {self.site}) · features per token (index:activation)"]
        for p, (i, row) in enumerate(zip(self.tokens, self.rows)):
            lines.append(clip(f"{p:>4} {clip(repr(self._tokenizer.token_text(int(i)))[1:-1], 10):<10} " + (" ".join(f"{j}:{a:.2f}" for j, a in row) or "-"), WIDTH))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        t = self._tokenizer
        return {"model": self.model, "sae": self.sae, "block": self.block, "site": self.site,
                "tokens": [{"id": int(i), "text": t.token_text(int(i)), "features": [{"index": j, "activation": a} for j, a in row]} for i, row in zip(self.tokens, self.rows)]}  # fmt: skip

    def _html_body(self) -> str:
        e = html.escape
        rows = "".join(f"<tr><td>{p}</td><td><code>{e(repr(self._tokenizer.token_text(int(i)))[1:-1])}</code></td><td>"
                       + " ".join(f"{j}:{a:.2f}" for j, a in row) + "</td></tr>" for p, (i, row) in enumerate(zip(self.tokens, self.rows)))  # fmt: skip
        return f"<div><b>{e(self.model)}</b> · {e(self.sae)} (block {self.block}, {self.site})<table>{rows}</table></div>"


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
                lines.append(clip(f"  {ctx['activation']:7.3f}  {flat(ctx['before'])[-30:]}[{flat(ctx['token'])}]{flat(ctx['after'])}", WIDTH))
            lines.append(clip("  pushes up: " + " ".join(repr(t["text"]) for t in c["up"]), WIDTH))
            lines.append(clip("  pushes down: " + " ".join(repr(t["text"]) for t in c["down"]), WIDTH))
        return "\n".join(lines) or "no feature fired"

    def to_dict(self) -> dict:
        return {"model": self.model, "sae": self.sae, "block": self.block, "site": self.site, "tokens": self.tokens, "features": self.cards}

    def _html_body(self) -> str:
        e = html.escape
        out = []
        for c in self.cards:
            ctx = "".join(f"<div><code>{c_['activation']:.3f}</code> {e(c_['before'])}<mark><b>{e(c_['token'])}</b></mark>{e(c_['after'])}</div>" for c_ in c["contexts"])
            up = " ".join(f"<code>{e(repr(t['text']))}</code>" for t in c["up"])
            down = " ".join(f"<code>{e(repr(t['text']))}</code>" for t in c["down"])
            out.append(f'<div style="border:1px solid #ccc;border-radius:6px;padding:8px;margin:6px 0">'
                       f"<b>feature {c['index']}</b> · fires on {100 * c['frequency']:.2f}% of tokens, max {c['max']:.3g}"
                       f"{ctx}<div>pushes up: {up}</div><div>pushes down: {down}</div></div>")  # fmt: skip
        return "".join(out) or "<i>no feature fired</i>"


# --- parameters -------------------------------------------------------------------------------


@dataclass(repr=False)
class Params(Result):
    """Where a shape's parameters live (`tfcli params`): `report` is the command's --json
    document; `tally` (3Blue1Brown's count of the weight matrices) and `total` (every tensor).

    >>> import tfcli
    >>> tfcli.params("gpt2").total
    124439808
    """

    report: dict

    @property
    def tally(self) -> int:
        return int(self.report["tally_3b1b"]["total"])

    @property
    def total(self) -> int:
        return int(self.report["exact"]["total"])

    def text(self) -> str:
        r = self.report
        rows = r["tally_3b1b"]["rows"]
        w = max(len(x["name"]) for x in rows)
        lines = [f"{r['title']} · 3Blue1Brown's tally of the weight matrices"]
        lines += [f"  {x['name']:<{w}} {x['count']:>18,}  {x['formula']} = {x['numbers']}" for x in rows]
        lines.append(f"  {'total':<{w}} {self.tally:>18,}")
        lines.append(f"every tensor a checkpoint stores: {self.total:,} (difference {self.tally - self.total:+,})")
        return "\n".join(clip(s, WIDTH) for s in lines)

    def to_dict(self) -> dict:
        return self.report

    def _html_body(self) -> str:
        e = html.escape
        rows = "".join(f"<tr><td>{e(x['name'])}</td><td style='text-align:right'>{x['count']:,}</td><td>{e(x['formula'])}</td><td>{e(x['numbers'])}</td></tr>"
                       for x in self.report["tally_3b1b"]["rows"])  # fmt: skip
        return (f"<div><b>{e(self.report['title'])}</b><table>{rows}<tr><th>total</th><th style='text-align:right'>{self.tally:,}</th></tr></table>"
                f"every tensor: {self.total:,}</div>")  # fmt: skip
