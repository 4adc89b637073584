"""`explore_page`: the page `tfcli explore` writes, shown inline in a notebook (an iframe)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from tfcli.engine.errors import UsageError, printable

from .result import Result

HEIGHT = 760  # pixels of the inline frame: the page's header, one panel and its controls without scrolling


@dataclass(repr=False)
class ExplorePage(Result):
    """The explore page of a text (`tfcli explore`): every head's attention, the logit lens, the
    next-token distribution under the sampling settings, the model's shapes; one self-contained
    HTML document (`html`), shown in Jupyter in an iframe (its script runs in the frame, apart from
    the notebook's), saved with `.save("page.html")`.

    >>> import tfcli
    >>> page = tfcli.explore_page(tfcli.load("shakespeare"), "To be, or not to be")
    >>> page.html.startswith("<!doctype html>"), "<iframe" in page._repr_html_()
    (True, True)
    >>> page.save(tmp / "page.html").read_text(encoding="utf-8") == page.html
    True
    """

    model: str
    tokens: int
    html: str
    height: int = HEIGHT

    def text(self) -> str:
        size = len(self.html.encode("utf-8"))
        return (
            f"{self.model} · explore page · {self.tokens} tokens · {size / 1e3:,.0f} kB of HTML\n"
            "shown inline in Jupyter; .save('page.html') writes it to open in a browser"
        )

    def to_dict(self) -> dict:
        raise UsageError("an explore page saves as .html", "save('page.html')")

    def _repr_html_(self) -> str:
        # srcdoc: the page inline, escaped as an attribute; the frame keeps its script and styles apart from the
        # notebook's
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" title="{html.escape(self.model)} explore page" '
            f'style="width:100%;height:{int(self.height)}px;border:1px solid #ddd" '
            'sandbox="allow-scripts allow-downloads"></iframe>'
        )

    def save(self, path: str | Path) -> Path:
        """Write the page to `path` (.html). Returns the path."""
        from tfcli import output

        path = Path(path)
        if path.suffix.lower() not in (".html", ".htm"):
            raise UsageError(f"an explore page saves as .html, not {printable(path.name)!r}")
        output.save_text(path, self.html)
        return path


def explore_page(model, text, *, lang: str = "en") -> ExplorePage:
    """The page `tfcli explore` writes for a text, as a result shown inline (an iframe). At most
    128 tokens (fewer for a model with many heads: the page stores every head's attention for
    every pair of tokens); the hooks of an open `with model.hooks()` block apply to its pass.
    `lang`: "en" or "zh", the language of the page's labels.

    >>> import tfcli
    >>> page = tfcli.explore_page(tfcli.load("tang"), "今天天气很好", lang="zh")
    >>> page.tokens, '<html lang="zh-Hans">' in page.html
    (6, True)
    """
    from tfcli.explore.page import page_html, page_tokens

    from .experiments import _model

    m = _model(model)
    if lang not in ("en", "zh"):
        raise UsageError(f"lang {lang!r} is not one the page speaks", "lang='en' or lang='zh'")
    if not isinstance(text, str):
        raise UsageError(f"explore_page() takes a text (str), not {type(text).__name__}")
    ids = page_tokens(m._lm, text)
    return ExplorePage(m.name, len(ids), page_html(m._lm, text, ids, lang, m._hooks()))
