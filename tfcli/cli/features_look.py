"""tfcli features show / top / quality: which features fire where, and what each one is."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options
from .command import Command
from .features import AnyModel, SaeArg, app


# Bounds of the count flags, checked before the model is loaded: far above what a page shows,
# far below what would exhaust memory (top keeps features x contexts values).
MAX_SHOWN, MAX_CONTEXTS, MAX_TOKENS, MAX_FEATURE_INDEX = 100_000, 1_000, 1 << 30, (1 << 26) - 1


def features_of(lm, sae: Path, any_model: bool):
    """The SAE at `sae`, checked against the model (its width, block and identity)."""
    from tfcli.analysis.features import load_features
    from tfcli.engine.identity import identity_of

    return load_features(sae, lm.model, identity_of(lm), any_model)


@app.command("show", cls=Command)
def show(
    sae: SaeArg,
    text: Annotated[str, typer.Argument(help="The text ('-' reads stdin).", show_default=False)],
    model: options.Model = None,
    top: Annotated[int, typer.Option("--top", help="Features shown per token, strongest first.")] = 5,
    any_model: AnyModel = False,
    as_json: options.Json = False,
    threads: options.Threads = None,
    lang: options.LangOption = None,
) -> None:
    """Per token, the features that fire and how strongly.

    Examples:

      tfcli features show sae-shakespeare "ROMEO: What light through yonder window breaks?" -m shakespeare
    """
    from tfcli.analysis.features import show as fire
    from tfcli.engine.fast import FAST

    from . import json as js
    from .inputs import load, text_ids
    from .views.features import show_table
    from .views.inside import token_str

    options.chinese(lang)
    options.check_count("--top", top, 1, MAX_SHOWN)
    lm = load(model, threads)
    f = features_of(lm, sae, any_model)
    ids = text_ids(lm, text)
    rows = fire(lm.model, f, ids, top, FAST)
    if as_json:
        js.emit({"model": lm.name, "sae": str(sae), "block": f.block, "site": f.site,
                 "tokens": [{**js.token(lm.tokenizer, i), "features": [{"index": j, "activation": a} for j, a in row]}
                            for i, row in zip(ids, rows)]})  # fmt: skip
        return
    show_table([token_str(lm.tokenizer, i) for i in ids], rows)


@app.command("top", cls=Command)
def top(
    sae: SaeArg,
    text_file: Annotated[Path, typer.Argument(
        help="The UTF-8 text to search for each feature's strongest tokens.", show_default=False)],
    model: options.Model = None,
    n: Annotated[int, typer.Option("--n", "-n", help="How many features: the most active over the text.")] = 10,
    contexts: Annotated[int, typer.Option("--contexts", help="Contexts shown per feature.")] = 5,
    tokens: Annotated[int, typer.Option("--tokens", help="Read at most this many tokens of the text.")] = 50_000,
    feature: Annotated[Optional[list[int]], typer.Option(
        "--feature", help="These features instead of the most active (repeatable).", show_default=False)] = None,
    html: Annotated[Optional[Path], typer.Option(
        "--html", help="Also write a self-contained page: one card per feature.", show_default=False,
        dir_okay=False)] = None,
    any_model: AnyModel = False,
    as_json: options.Json = False,
    threads: options.Threads = None,
    lang: options.LangOption = None,
) -> None:
    """For the most active features, the contexts that fire each most (the token marked) and the
    tokens its decoder direction pushes up and down through the unembedding.

    Examples:

      tfcli features top sae-shakespeare tinyshakespeare.txt -m shakespeare -n 8 --html features.html
    """
    from tfcli.analysis.feature_cards import feature_cards
    from tfcli.analysis.feature_runs import check_text, token_windows
    from tfcli.engine.fast import FAST

    from .inputs import load
    from .views.features import cards as draw

    options.chinese(lang)
    options.check_count("-n", n, 1, MAX_SHOWN)
    options.check_count("--contexts", contexts, 1, MAX_CONTEXTS,
                        "contexts are kept for every feature: memory grows as features x contexts")
    options.check_count("--tokens", tokens, 2, MAX_TOKENS)
    for i in feature or ():
        options.check_count("--feature", i, 0, MAX_FEATURE_INDEX, "give a feature's number, from 0")
    lm = load(model, threads)
    f = features_of(lm, sae, any_model)
    size = check_text(text_file)
    ids = []
    for w in token_windows(lm.tokenizer, text_file, 0, size, 4096):
        ids.extend(int(i) for i in w)
        if len(ids) >= tokens:
            break
    for i in feature or ():
        f.feature(i)
    found = feature_cards(lm, f, ids[:tokens], n, contexts, feature, FAST)
    if html is not None:
        from .features_page import write_page

        from tfcli.numbers import size

        from .console import note
        from .lang import say

        write_page(html, lm.name, str(sae), f, found)
        n_cards, nbytes = len(found["cards"]), size(html.stat().st_size)
        note(say(f"wrote {html} ({n_cards} feature cards, {nbytes})",
                 f"已写入 {html}（{n_cards} 张特征卡片，{nbytes}）"))
    if as_json:
        from . import json as js

        js.emit({"model": lm.name, "sae": str(sae), "block": f.block, "site": f.site, "tokens": found["tokens"],
                 "features": found["cards"]})
        return
    draw(found["cards"])


@app.command("quality", cls=Command)
def quality(
    sae: SaeArg,
    text_file: Annotated[Path, typer.Argument(help="Held-out UTF-8 text to measure on.", show_default=False)],
    model: options.Model = None,
    tokens: Annotated[int, typer.Option("--tokens", help="Measure on at most this many tokens.")] = 8192,
    any_model: AnyModel = False,
    as_json: options.Json = False,
    threads: options.Threads = None,
    lang: options.LangOption = None,
) -> None:
    """The SAE's quality on a text, as SAELens reports it: MSE, explained variance, L0, dead
    features, and the loss recovered (clean loss, with the SAE's reconstruction, site zeroed)."""
    import numpy as np

    from tfcli.analysis.feature_runs import check_text, token_windows
    from tfcli.analysis.features import WINDOW
    from tfcli.analysis.features import quality as measure
    from tfcli.engine.fast import FAST

    from .console import out, shown
    from .inputs import load
    from .views.features import quality_lines

    options.chinese(lang)
    options.check_count("--tokens", tokens, 2, MAX_TOKENS)
    lm = load(model, threads)
    f = features_of(lm, sae, any_model)
    ids: list[int] = []
    for w in token_windows(lm.tokenizer, text_file, 0, check_text(text_file), 4096):
        ids.extend(int(i) for i in w)
        if len(ids) >= tokens:
            break
    q = measure(lm.model, f, np.array(ids[:tokens]), min(WINDOW, lm.config.n_ctx), FAST)
    if as_json:
        from . import json as js

        js.emit({"model": lm.name, "sae": str(sae), **q})
        return
    for line in quality_lines(q):
        out.print(shown(line), soft_wrap=True)
