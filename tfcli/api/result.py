"""What every result of the experiments is: values (NumPy arrays, numbers, token ids) that print their text
form, draw themselves in Jupyter (`_repr_html_`) and save as `.png`, `.svg` or `.json`.

The JSON is the command's `--json` document (the same keys, floats to 4 significant digits). The
pictures are drawn by tfcli/draw/ (the command line's pictures, without its terminal libraries: a
notebook showing a result never imports typer or rich), imported only when a picture is asked for.
"""

from __future__ import annotations

import html
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
        lines.append(
            r.rjust(lead - 1)
            + " "
            + "".join(
                fmt.format(values[i, j]).rjust(cell) if np.isfinite(values[i, j]) else "·".rjust(cell) for j in shown
            )
        )
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
        """The picture (tfcli/draw/images.Drawing), or None for a result drawn as HTML only."""
        return None

    def _html_body(self) -> str | None:
        """HTML other than a picture (a feature card), or None."""
        return None

    def __str__(self) -> str:
        import textwrap

        lines = self.text().splitlines()
        return "\n".join(
            part
            for line in lines
            for part in ([line] if len(line) <= WIDTH else textwrap.wrap(line, WIDTH, subsequent_indent="  "))
        )

    __repr__ = __str__

    def svg(self) -> str:
        """The picture as SVG text."""
        from tfcli.draw import images

        d = self._drawing()
        if d is None:
            raise UsageError(f"a {type(self).__name__} has no picture", "save it as .json")
        return images.svg_text(d)  # inline: without the XML declaration

    def _repr_html_(self) -> str:
        body = self._html_body()
        if body is None:
            body = f'<div style="overflow:auto">{self.svg()}</div>'
        return f"{body}<details><summary>text</summary><pre>{html.escape(str(self))}</pre></details>"

    def save(self, path: str | Path) -> Path:
        """Write the result to `path`: .png (needs Pillow), .svg or .json (the command's --json).
        Returns the path."""
        from tfcli import output

        path = Path(path)
        kind = path.suffix.lower()
        if kind == ".json":
            from tfcli.json_shapes import dumps

            output.save_text(path, dumps(self.to_dict()) + "\n")
            return path
        if kind not in (".png", ".svg"):
            raise UsageError(f"save() writes .png, .svg or .json, not {printable(path.name)!r}")
        from tfcli.draw import images

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


def signed_drawing(
    heading: str, title: str, values: np.ndarray, rows: list[str], cols: list[str], top: float, log: bool = False
):
    """A signed grid (patching, ablation) as the commands' --png/--svg draw it."""
    from tfcli.draw import images
    from tfcli.draw.scales import shade

    top = top or 1.0
    panel = images.Panel(title, shade(values, top, log), np.ones(values.shape, dtype=bool), rows, cols)
    images.check_size([[panel]], False, True)
    fonts = images.fonts_or_none()
    return images.layout(
        [[panel]], heading, measure=fonts.measure if fonts else images.estimate, signed=images.picture_scale(top, log)
    )
