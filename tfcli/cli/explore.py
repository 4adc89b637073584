"""tfcli explore: one self-contained web page to look inside a model's pass over a text."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from . import options
from tfcli import output as output_file
from .console import note
from .inputs import load

from tfcli.explore.page import page_html, page_tokens  # noqa: F401  (serve's live page calls them here too)


Lang = options.lang_option("The language of the page's labels and explanations (default: from LC_ALL / "
                           "LANG, else English).")


def explore(
    text: Annotated[str, typer.Argument(
        help="The text to run through the model ('-' reads stdin).", show_default=False)],
    model: options.Model = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The page to write ('-' prints it to stdout).", dir_okay=False)
    ] = Path("explore.html"),
    lang: Lang = None,
) -> None:
    """Write one web page that shows what the model does with TEXT: every head's attention, the logit
    lens over every layer, the next-token distribution under temperature / top-k / top-p / min-p, and
    the model's shapes. The page is a single HTML file with everything inline: no server, no network,
    open it with a double click. A page holds at most 128 tokens (fewer for a model with many
    heads: the attention of every head for every pair of tokens is stored); a longer text is refused.

    Examples:

      tfcli explore "To be, or not to be" -o page.html

      tfcli explore -m tang "今天天气很好" --lang zh -o tang.html

      tfcli explore -m smollm2 "The capital of France is" -o smollm2.html
    """
    text = options.read_text(text, "the text", "give some text to run through the model")
    to_stdout = str(output) == "-"
    if not to_stdout:
        output_file.check(output)  # a path that cannot be written is refused before the model runs
    lm = load(model)
    cfg = lm.config
    ids = page_tokens(lm, text, lambda ids: options.warn_unknown(lm.tokenizer, text, ids, lm.name))
    html = page_html(lm, text, ids, "zh" if options.chinese(lang) else "en")
    if to_stdout:
        sys.stdout.write(html)
        sys.stdout.flush()
        return
    output_file.save_text(output, html)  # whole or not at all; a pipe or a device as a stream
    from tfcli import numbers

    size, zh = len(html.encode("utf-8")), options.chinese(lang)
    if zh:
        note(f"已写入 {output}（{numbers.size(size)}）：{lm.name}，{len(ids)} 个词元，"
             f"{cfg.n_layer} 个块 × {cfg.n_head} 个头；用浏览器打开它", wrap=True)
    else:
        note(
            f"wrote {output} ({numbers.size(size)}): {lm.name}, {len(ids)} token{'s' if len(ids) != 1 else ''}, "
            f"{cfg.n_layer} blocks x {cfg.n_head} heads; "
            "open it in a browser",
            wrap=True,
        )
    if zh or any("\u3400" <= c <= "\u9fff" for c in text):
        # tfcli ships a CJK font for its PNGs, but 4 MB of it in every page is too much, and a
        # subset needs a font library tfcli does not depend on: said, rather than boxes in silence.
        note("页面用浏览器自带的字体显示中文（没有嵌入字体）："
             "系统里没有中文字体时，请安装一个（例如 fonts-noto-cjk）" if zh
             else "the page draws Chinese with the browser's own fonts (no font is embedded): on a system without a "
                  "CJK font, install one (e.g. fonts-noto-cjk)", wrap=True)
