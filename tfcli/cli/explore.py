"""tfcli explore: one self-contained web page to look inside a model's pass over a text."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from . import options
from . import output as output_file
from .console import note
from .inputs import load


Lang = options.lang_option("The language of the page's labels and explanations (default: from LC_ALL / LANG, else English).")


def explore(
    text: Annotated[str, typer.Argument(help="The text to run through the model ('-' reads stdin).", show_default=False)],
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
        note(f"已写入 {output}（{numbers.size(size)}）：{lm.name}，{len(ids)} 个词元，{cfg.n_layer} 个块 × {cfg.n_head} 个头；用浏览器打开它", wrap=True)
    else:
        note(
            f"wrote {output} ({numbers.size(size)}): {lm.name}, {len(ids)} token{'s' if len(ids) != 1 else ''}, {cfg.n_layer} blocks x {cfg.n_head} heads; "
            "open it in a browser",
            wrap=True,
        )
    if zh or any("\u3400" <= c <= "\u9fff" for c in text):
        # tfcli ships a CJK font for its PNGs, but 4 MB of it in every page is too much, and a
        # subset needs a font library tfcli does not depend on: said, rather than boxes in silence.
        note("页面用浏览器自带的字体显示中文（没有嵌入字体）：系统里没有中文字体时，请安装一个（例如 fonts-noto-cjk）" if zh
             else "the page draws Chinese with the browser's own fonts (no font is embedded): on a system without a CJK font, install one (e.g. fonts-noto-cjk)", wrap=True)


def page_tokens(lm, text: str, seen=None) -> list[int]:
    """The tokens of `text` the page shows, or a PromptError if it has none or more than a page holds.
    `seen(ids)` is called with them first (explore warns about unknown characters there)."""
    from tfcli.analysis import explore as ex
    from tfcli.engine.errors import PromptError

    cfg = lm.config
    ids = lm.tokenizer.prompt(text)  # what the model sees, a BOS included where the tokenizer adds one
    if seen is not None:
        seen(ids)
    if not ids:
        raise PromptError("the text encodes to no tokens", "give some text to run through the model")
    limit = ex.token_limit(cfg)
    if len(ids) > limit:
        if limit == cfg.n_ctx:
            why = f"the text is {len(ids)} tokens but {lm.name}'s context is {limit}"
        elif limit == ex.MAX_TOKENS:
            why = f"the text is {len(ids)} tokens; a page holds at most {limit}"
        else:
            why = (
                f"the text is {len(ids)} tokens; a page for {lm.name} holds at most {limit}, "
                f"as it stores {cfg.n_layer} x {cfg.n_head} heads of attention for every pair of tokens"
            )
        raise PromptError(why, "shorten the text")
    return ids


def page_html(lm, text: str, ids: list[int], lang: str, hooks=None) -> str:
    """The whole page for `ids` (the tokens of `text`) run through the loaded model `lm`
    (`hooks`: an experiment's, such as the live page's steering)."""
    from tfcli.analysis import explore as ex
    from tfcli.engine.fast import FAST
    from tfcli.engine.sampling import SamplingParams

    from .views.attn import token_labels, visible

    cfg = lm.config
    run = ex.explore(lm.model, ids, hooks=hooks, run=FAST)
    arrays = ex.packed(run)
    tok = lm.tokenizer
    shown = set(run.next_ids.ravel().tolist()) | set(run.lens_ids.ravel().tolist())
    vocab = {str(i): _vocab_label(tok, i, visible) for i in sorted(shown)}
    defaults = SamplingParams.merged(lm.generation)
    data = {
        "lang": lang,
        "model": lm.name,
        "text": text,
        "tokens": [{"id": int(i), "label": s} for i, s in zip(ids, token_labels(tok, ids))],
        "shape": ex.shapes(cfg),
        "params": ex.parameter_totals(cfg),
        "kv_groups": ex.kv_groups(cfg),
        "limits": {"tokens": ex.token_limit(cfg), "lens_top": ex.LENS_TOP, "next_top": int(run.next_ids.shape[1]), "quant": ex.QUANT},
        "sampling": {"temperature": defaults.temperature, "top_k": defaults.top_k, "top_p": defaults.top_p, "min_p": defaults.min_p},
        "vocab": vocab,
        "arrays": {name: _encoded(a) for name, a in arrays.items()},
    }
    return _fill(lang, f"{lm.name} · tfcli explore", data)


def _vocab_label(tok, token_id: int, visible) -> str:
    """One vocabulary entry as the page shows it: its text made visible, or its piece when it is
    part of a character (a lone UTF-8 byte of byte-level BPE decodes to U+FFFD)."""
    text = tok.decode([token_id])
    if text and "\ufffd" not in text:
        return visible(text)
    return f"<{tok.piece(token_id)}>"


def _encoded(a) -> dict:
    import base64

    return {"dtype": a.dtype.str, "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def _fill(lang: str, title: str, data: dict) -> str:
    """The page template with its stylesheet, script and data put inline, each placeholder replaced
    once, in one pass over the template: a value put in is never searched for placeholders (a model
    folder named {{script}} stays those characters in the title)."""
    import re
    from importlib.resources import files

    from tfcli.draw import escape

    here = files("tfcli.explore")
    read = lambda name: here.joinpath(name).read_text(encoding="utf-8")  # noqa: E731
    values = {
        "lang": "zh-Hans" if lang == "zh" else "en",
        "title": escape.html(title),
        "style": read("page.css"),
        "script": "".join(read(name) for name in ("strings.js", "sampler.js", "page.js")),
        "data": escape.json_in_html(data),  # inside <script>: '</script>' cannot end it
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m.group(1), m.group(0)), read("page.html"))
