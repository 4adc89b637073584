"""tfcli patch: activation patching, where in the pass a difference between two texts is carried."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .experiment import Png, Svg


def patch(
    clean: Annotated[str, typer.Argument(
        help="The clean text, whose answer is traced ('-' reads stdin).", show_default=False)],
    corrupt: Annotated[str, typer.Argument(
        help="The corrupt text: as many tokens, one thing changed.", show_default=False)],
    model: options.Model = None,
    site: Annotated[str, typer.Option(
        "--site", help="resid: the residual stream at each index and position; heads: each head's context vector; mlp: "
                       "each MLP's output at each position.")] = "resid",
    answer: Annotated[Optional[str], typer.Option(
        "--answer", help="The answer token (default: the clean run's top next token).", show_default=False)] = None,
    wrong: Annotated[Optional[str], typer.Option(
        "--wrong", help="The wrong token (default: the corrupt run's top next token).", show_default=False)] = None,
    png: Png = None,
    svg: Svg = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """Activation patching: which spot of the pass carries the answer?

    The clean text gives one answer, the corrupt text (one word changed) another. For every
    residual index and position, the corrupt text is run again with that one activation taken
    from the clean run; a cell says how much of the difference in logits (answer - wrong) it
    brings back: 1 = all of it, 0 = none.

    Examples:

      tfcli patch -m smollm2 "The Eiffel Tower is in the city of" "The Colosseum is in the city of"

      tfcli patch -m smollm2 "The Eiffel Tower is in the city of" "The Colosseum is in the city of" --site heads
    """
    from tfcli.analysis.experiments.patch import SITES, patch as run_patch
    from tfcli.engine.errors import UsageError
    from tfcli.engine.fast import FAST

    from .experiment import one_token, tokens_json
    from .inputs import load, text_ids
    from . import json as js
    from .views import experiments as view
    from .views.inside import token_str

    if site not in SITES:
        raise UsageError(f"--site must be one of {', '.join(SITES)}, not {site!r}")
    zh = options.chinese(lang)
    lm = load(model)
    clean_ids, corrupt_ids = text_ids(lm, clean, "the clean text"), text_ids(lm, corrupt, "the corrupt text")
    if len(clean_ids) != len(corrupt_ids):
        show = lambda ids: " ".join(repr(token_str(lm.tokenizer, i)) for i in ids)  # noqa: E731
        raise UsageError(
            f"the clean text is {len(clean_ids)} tokens ({show(clean_ids)}) and the corrupt one {len(corrupt_ids)} "
            f"({show(corrupt_ids)})",
            "patching compares position by position: change words of the same token count",
        )
    a = None if answer is None else one_token(lm, answer, "--answer")
    w = None if wrong is None else one_token(lm, wrong, "--wrong")
    from .progress import Counted

    unit = ("residual indices", "个残差位置") if site == "resid" else ("blocks", "个块")
    with Counted("patching", unit[0], "修补", unit[1], zh) as step:
        r = run_patch(lm.model, clean_ids, corrupt_ids, site, a, w, progress=step, run=FAST)
    tok = lm.tokenizer
    if as_json:
        # a row is a residual index ("resid"; "layer" its older name, kept) or a block
        keys = ("resid", "layer") if site == "resid" else ("block",) if site == "heads" else ("block", "layer")
        js.emit({
            "model": lm.name, "site": site,
            "clean": {"text": clean, "tokens": tokens_json(lm, clean_ids)},
            "corrupt": {"text": corrupt, "tokens": tokens_json(lm, corrupt_ids)},
            "answer": js.token(tok, r.answer), "wrong": js.token(tok, r.wrong),
            "clean_logit_diff": r.clean_ld, "corrupt_logit_diff": r.corrupt_ld,
            "grid": [{**dict.fromkeys(keys, i), "values": row} for i, row in enumerate(r.grid.tolist())],
        })  # fmt: skip
        return
    view.patching(lm, r, clean_ids, corrupt_ids, zh, png, svg)
