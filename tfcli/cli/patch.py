"""tfcli patch: activation patching, where in the pass a difference between two texts is carried."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .experiment import Png, Svg


def patch(
    clean: Annotated[str, typer.Argument(help="The clean text, whose answer is traced ('-' reads stdin).", show_default=False)],
    corrupt: Annotated[str, typer.Argument(help="The corrupt text: as many tokens, one thing changed.", show_default=False)],
    model: options.Model = None,
    site: Annotated[str, typer.Option("--site", help="resid: the residual stream at each index and position; heads: each head's context vector; mlp: each MLP's output at each position.")] = "resid",
    answer: Annotated[Optional[str], typer.Option("--answer", help="The answer token (default: the clean run's top next token).", show_default=False)] = None,
    wrong: Annotated[Optional[str], typer.Option("--wrong", help="The wrong token (default: the corrupt run's top next token).", show_default=False)] = None,
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
    import numpy as np

    from tfcli.analysis.experiments.patch import SITES, patch as run_patch
    from tfcli.engine.errors import UsageError

    from .experiment import one_token, tokens_json
    from .lens import load, text_ids
    from .views import experiments as view
    from .views.attn import token_labels
    from .views.inside import say, token_str, uses_colour
    from .console import out
    from . import json as js

    if site not in SITES:
        raise UsageError(f"--site must be one of {', '.join(SITES)}, not {site!r}")
    zh = options.chinese(lang)
    lm = load(model)
    clean_ids, corrupt_ids = text_ids(lm, clean, "the clean text"), text_ids(lm, corrupt, "the corrupt text")
    if len(clean_ids) != len(corrupt_ids):
        show = lambda ids: " ".join(repr(token_str(lm.tokenizer, i)) for i in ids)  # noqa: E731
        raise UsageError(
            f"the clean text is {len(clean_ids)} tokens ({show(clean_ids)}) and the corrupt one {len(corrupt_ids)} ({show(corrupt_ids)})",
            "patching compares position by position: change words of the same token count",
        )
    a = None if answer is None else one_token(lm, answer, "--answer")
    w = None if wrong is None else one_token(lm, wrong, "--wrong")
    r = run_patch(lm.model, clean_ids, corrupt_ids, site, a, w)
    tok = lm.tokenizer
    if as_json:
        key = "block" if site == "heads" else "layer"
        js.emit({
            "model": lm.name, "site": site,
            "clean": {"text": clean, "tokens": tokens_json(lm, clean_ids)},
            "corrupt": {"text": corrupt, "tokens": tokens_json(lm, corrupt_ids)},
            "answer": js.token(tok, r.answer), "wrong": js.token(tok, r.wrong),
            "clean_logit_diff": r.clean_ld, "corrupt_logit_diff": r.corrupt_ld,
            "grid": [{key: i, "values": row} for i, row in enumerate(r.grid.tolist())],
        })  # fmt: skip
        return
    labels = [f"{c}/{d}" if c != d else c for c, d in zip(token_labels(tok, clean_ids), token_labels(tok, corrupt_ids))]
    if site == "heads":
        rows, cols = [str(b) for b in range(r.grid.shape[0])], [f"h{h}" for h in range(r.grid.shape[1])]
    else:
        rows = ["emb", *map(str, range(1, r.grid.shape[0]))] if site == "resid" else [str(b) for b in range(r.grid.shape[0])]
        cols = labels
    what = {"resid": "residual index × position", "heads": "block × head (context vector at every position)", "mlp": "block × position (MLP output)"}[site]
    out.print(f"[bold]{lm.name}[/] · activation patching · {what}")
    out.print(f"answer {token_str(tok, r.answer)!r} vs {token_str(tok, r.wrong)!r}: logit difference {r.clean_ld:+.2f} clean, {r.corrupt_ld:+.2f} corrupt")
    out.print(view.grid(rows, cols, r.grid, uses_colour(out), top=1.0))
    flat = np.argsort(-np.nan_to_num(r.grid, nan=-np.inf), axis=None)[:3]
    best = [(f"{rows[i]}@{cols[j]}", r.grid[i, j]) for i, j in zip(*np.unravel_index(flat, r.grid.shape))]
    say(out, zh,
        "Each cell: the corrupt text run again with that one activation from the clean run, and how much of the logit "
        "difference between the answer and the wrong token comes back (1 = all of it, 0 = none). "
        + ("Rows are residual-stream indices (emb = the embeddings, i = after block i-1); " if site == "resid" else "Rows are blocks; ")
        + f"the strongest: {view.ranked(best, '{:.2f}')}.",
        "每个格子：把干净文本这一处的激活放进被改动文本的运行中，答案与错误词元的 logit 差恢复了多少（1 = 全部，0 = 没有）。"
        + ("行是残差流的序号（emb 是嵌入，i 是第 i-1 个块之后）；" if site == "resid" else "行是块；")
        + f"最强的：{view.ranked(best, '{:.2f}')}。")  # fmt: skip
    if png or svg:
        view.write_pictures(png, svg, f"{lm.name} · activation patching ({site})", f"answer {token_str(tok, r.answer)!r}", r.grid, rows, cols)
