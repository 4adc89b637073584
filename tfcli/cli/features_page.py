"""The page of `tfcli features top --html`: one self-contained HTML file (no script, no fetch), a
card per feature: its numbers, its strongest contexts with the token marked, its logit effects."""

from __future__ import annotations

from html import escape
from pathlib import Path

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;background:#fafafa;color:#222}
h1{font-size:20px;margin:0 0 4px} .sub{color:#666;margin-bottom:16px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:14px}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:12px 14px}
.card h2{font-size:16px;margin:0 0 2px} .stats{color:#666;font-size:12px;margin-bottom:8px}
.ctx{font:12px/1.6 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all;\
border-top:1px solid #f0f0f0;padding:2px 0}
.ctx .act{color:#888;display:inline-block;width:5em} mark{background:#f5a623;color:#000;border-radius:2px;padding:0 1px}
.logits{font:12px ui-monospace,monospace;margin-top:6px} .up{color:#1a7f37} .down{color:#cf222e}
"""


def _tok(text: str) -> str:
    return escape(repr(text)[1:-1])


def card_html(c: dict) -> str:
    rows = "".join(
        '<div class="ctx"><span '
        f'class="act">{x["activation"]:.3f}</span>{escape(x["before"])}'
        f'<mark>{escape(x["token"])}</mark>{escape(x["after"])}</div>'
        for x in c["contexts"]
    )
    up = " ".join(f"<span title=\"{t['logit']:+.3f}\">{_tok(t['text'])}</span>" for t in c["up"])
    down = " ".join(f"<span title=\"{t['logit']:+.3f}\">{_tok(t['text'])}</span>" for t in c["down"])
    return (
        f'<section class="card" id="f{c["index"]}"><h2>feature {c["index"]}</h2>'
        f'<div class="stats">fires on {100 * c["frequency"]:.2f}% of tokens · mean {c["mean"]:.3g} '
        f'· max {c["max"]:.3g}</div>'
        f'{rows}<div class="logits up">pushes up: {up}</div>'
        f'<div class="logits down">pushes down: {down}</div></section>'
    )


def page_html(model: str, sae: str, block: int, site: str, found: dict) -> str:
    cards = "".join(card_html(c) for c in found["cards"])
    title = f"Features of {model}, block {block} ({site})"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head><body>'
        f'<h1>{escape(title)}</h1><div class="sub">SAE {escape(sae)} · {found["tokens"]:,} tokens read · '
        'the marked token is where the feature fired; "pushes up/down": its direction read through the final norm '
        'and the unembedding</div>'
        f'<div class="cards">{cards}</div></body></html>\n'
    )


def write_page(path: Path, model: str, sae: str, f, found: dict) -> None:
    from tfcli.output import save_text

    save_text(path, page_html(model, sae, f.block, f.site, found))
