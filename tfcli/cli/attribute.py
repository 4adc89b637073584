"""tfcli attribute: attribution patching (patching to first order, from one backward pass), beside
the real patch, and saliency (gradient x input) for one text."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .experiment import Png, Svg


def attribute(
    clean: Annotated[str, typer.Argument(
        help="The clean text, whose answer is traced ('-' reads stdin); with --saliency, the one text.",
        show_default=False)],
    corrupt: Annotated[Optional[str], typer.Argument(
        help="The corrupt text: as many tokens, one thing changed (not with --saliency).", show_default=False)] = None,
    model: options.Model = None,
    site: Annotated[str, typer.Option(
        "--site", help="resid: the residual stream at each index and position; heads: each head's context vector; mlp: "
                       "each MLP's output at each position.")] = "resid",
    answer: Annotated[Optional[str], typer.Option(
        "--answer", help="The answer token (default: the clean run's top next token).", show_default=False)] = None,
    wrong: Annotated[Optional[str], typer.Option(
        "--wrong", help="The wrong token (default: the corrupt run's top next token; with --saliency, none).",
        show_default=False)] = None,
    saliency: Annotated[bool, typer.Option(
        "--saliency", help="Gradient x input of each token of one text for logit(answer) (- logit(wrong)).")] = False,
    png: Png = None,
    svg: Svg = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """Attribution patching: activation patching guessed from one backward pass.

    The metric M = logit(answer) - logit(wrong) at the last position. Its gradient at the corrupt
    run's activations, times (clean - corrupt), is the first-order guess of what putting that clean
    activation into the corrupt run would do; each cell is divided by M(clean) - M(corrupt), as
    'tfcli patch' divides. The real patch is computed too and shown beside it, with the correlation
    of the two grids: where it is high, one backward pass told you what a whole grid of passes does.

    Examples:

      tfcli attribute -m smollm2 "The Eiffel Tower is in the city of" "The Colosseum is in the city of"

      tfcli attribute -m smollm2 "The Eiffel Tower is in the city of" --saliency
    """
    from tfcli.analysis.experiments.patch import SITES
    from tfcli.engine.errors import UsageError

    from .experiment import one_token
    from .inputs import load, text_ids

    if site not in SITES:
        raise UsageError(f"--site must be one of {', '.join(SITES)}, not {site!r}")
    if saliency and corrupt is not None:
        raise UsageError("--saliency reads one text; a corrupt text was given too",
                         "drop the second text, or --saliency")
    if not saliency and corrupt is None:
        raise UsageError("attribution patching needs a clean and a corrupt text",
                         "give both, or --saliency for one text")
    zh = options.chinese(lang)
    lm = load(model)
    clean_ids = text_ids(lm, clean, "the clean text" if not saliency else "the text")
    a = None if answer is None else one_token(lm, answer, "--answer")
    w = None if wrong is None else one_token(lm, wrong, "--wrong")
    if saliency:
        _saliency(lm, clean, clean_ids, a, w, zh, png, svg, as_json)
    else:
        _attribution(lm, clean, corrupt, clean_ids, site, a, w, zh, png, svg, as_json)


def _attribution(lm, clean: str, corrupt: str, clean_ids, site: str, a, w, zh: bool, png, svg, as_json: bool) -> None:
    from tfcli.analysis.experiments.attribute import attribute as run_attribute, correlation
    from tfcli.analysis.experiments.patch import patch as run_patch
    from tfcli.engine.errors import UsageError

    from . import json as js
    from .experiment import tokens_json
    from .inputs import text_ids
    from .progress import Counted
    from .views import attribute as view
    from .views.inside import token_str

    corrupt_ids = text_ids(lm, corrupt, "the corrupt text")
    if len(clean_ids) != len(corrupt_ids):
        show = lambda ids: " ".join(repr(token_str(lm.tokenizer, i)) for i in ids)  # noqa: E731
        raise UsageError(
            f"the clean text is {len(clean_ids)} tokens ({show(clean_ids)}) and the corrupt one {len(corrupt_ids)} "
            f"({show(corrupt_ids)})",
            "attribution compares position by position: change words of the same token count",
        )
    r = run_attribute(lm.model, clean_ids, corrupt_ids, site, a, w)
    unit = ("residual indices", "个残差位置") if site == "resid" else ("blocks", "个块")
    with Counted("patching", unit[0], "修补", unit[1], zh) as step:
        from tfcli.engine.fast import FAST  # the same passes as tfcli patch's

        real = run_patch(lm.model, clean_ids, corrupt_ids, site, r.answer, r.wrong, progress=step, run=FAST)
    r_value = correlation(r.grid, real.grid)
    if as_json:
        tok = lm.tokenizer
        # as patch --json
        keys = ("resid", "layer") if site == "resid" else ("block",) if site == "heads" else ("block", "layer")
        rows = lambda grid: [{**dict.fromkeys(keys, i), "values": row}  # noqa: E731
                             for i, row in enumerate(grid.tolist())]
        js.emit({
            "model": lm.name, "site": site,
            "clean": {"text": clean, "tokens": tokens_json(lm, clean_ids)},
            "corrupt": {"text": corrupt, "tokens": tokens_json(lm, corrupt_ids)},
            "answer": js.token(tok, r.answer), "wrong": js.token(tok, r.wrong),
            "clean_logit_diff": r.clean_ld, "corrupt_logit_diff": r.corrupt_ld,
            "grid": rows(r.grid), "patch_grid": rows(real.grid), "correlation": r_value,
        })  # fmt: skip
        return
    view.attribution(lm, r, real, r_value, zh, png, svg)


def _saliency(lm, text: str, ids, a, w, zh: bool, png, svg, as_json: bool) -> None:
    from tfcli.analysis.experiments.attribute import saliency

    from . import json as js
    from .views import attribute as view

    s = saliency(lm.model, ids, a, w)
    if as_json:
        tok = lm.tokenizer
        js.emit({
            "model": lm.name, "text": text,
            "answer": js.token(tok, s.answer), "wrong": None if s.wrong is None else js.token(tok, s.wrong),
            "metric": s.metric,
            "saliency": [{**js.token(tok, i), "value": v} for i, v in zip(s.ids.tolist(), s.values.tolist())],
        })  # fmt: skip
        return
    view.saliency(lm, s, zh, png, svg)
