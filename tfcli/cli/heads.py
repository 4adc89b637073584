"""tfcli heads: what each head adds to the prediction, and which heads are of a known kind."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options


def heads(
    text: Annotated[str, typer.Argument(help="The text to look at ('-' reads stdin).", show_default=False)],
    model: options.Model = None,
    position: Annotated[int, typer.Option("--position", "-p", help="The prediction to explain (0 = after the first token, -1 = after the last).")] = -1,
    token: Annotated[Optional[str], typer.Option("--token", help="The target token (default: the top prediction there).", show_default=False)] = None,
    repeat: Annotated[int, typer.Option("--repeat", help="R: random tokens repeated twice for the induction detector.")] = 20,
    seed: Annotated[int, typer.Option("--seed", "-s", help="Seed of the random tokens.")] = 0,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """Direct logit attribution and head detectors.

    Attribution: the target's logit is a sum of what the embeddings, each head, each MLP and the
    biases add to the last residual stream (the final norm's scale held at its value); a large
    part pushed the target up directly. Detectors: previous-token, first-token (attention sink),
    and on random tokens repeated twice, induction and duplicate-token heads.

    Examples:

      tfcli heads -m smollm2 "The Eiffel Tower is in the city of"

      tfcli heads -m smollm2 "The Eiffel Tower is in the city of" --token " Rome" --json
    """
    import numpy as np

    from tfcli.analysis.experiments.heads import attribute, detect
    from tfcli.engine.errors import UsageError

    from . import json as js
    from .console import out
    from .experiment import one_token, tokens_json
    from .lens import load, pick_position, text_ids
    from .views import experiments as view
    from .views.inside import say, token_str, uses_colour

    zh = options.chinese(lang)
    if not 2 <= repeat <= 512:
        raise UsageError(f"--repeat must be from 2 to 512, not {repeat}")
    lm = load(model)
    ids = text_ids(lm, text)
    p = pick_position(position, len(ids))
    prefix = len(lm.tokenizer.prompt(""))
    if prefix + 2 * repeat > lm.config.n_ctx:
        raise UsageError(f"--repeat {repeat} needs {prefix + 2 * repeat} positions; {lm.name}'s context is {lm.config.n_ctx}")
    target = None if token is None else one_token(lm, token, "--token")
    a = attribute(lm.model, ids, p, target)
    d = detect(lm.model, ids, lm.tokenizer, repeat, seed)
    tok = lm.tokenizer
    if as_json:
        js.emit({
            "model": lm.name, "tokens": tokens_json(lm, ids), "position": a.position,
            "target": {**js.token(tok, a.target), "logit": a.logit},
            "embedding": a.embedding, "heads": [{"block": b, "values": row} for b, row in enumerate(a.heads.tolist())],
            "mlps": a.mlps.tolist(), "bias": a.bias, "total": a.total,
            "detectors": {k: getattr(d, k).tolist() for k in ("previous_token", "first_token", "induction", "duplicate_token")},
            "induction_tokens": [int(i) for i in d.induction_tokens],
        })  # fmt: skip
        return
    cfg, colour = lm.config, uses_colour(out)
    rows = [str(b) for b in range(cfg.n_layer)]
    cols = [f"h{h}" for h in range(cfg.n_head)]
    out.print(f"[bold]{lm.name}[/] · direct logit attribution of {token_str(tok, a.target)!r} after position {a.position} ({token_str(tok, ids[a.position])!r}): logit {a.logit:.2f}")
    out.print(view.grid(rows, [*cols, "mlp"], np.concatenate([a.heads, a.mlps[:, None]], axis=1), colour))
    out.print(f"embeddings {a.embedding:+.2f} · biases {a.bias:+.2f} · heads {a.heads.sum():+.2f} · MLPs {a.mlps.sum():+.2f} · total {a.total:.2f}")
    top = lambda g, n=3: [(f"{b}.{h}", g[b, h]) for b, h in zip(*np.unravel_index(np.argsort(-g, axis=None)[:n], g.shape))]  # noqa: E731
    for name, label, grid in (("previous_token", "previous-token", d.previous_token), ("first_token", "first-token", d.first_token),
                              ("induction", "induction", d.induction), ("duplicate_token", "duplicate-token", d.duplicate_token)):  # fmt: skip
        out.print(f"[bold]{label}[/] heads (score 0-1): {view.ranked(top(grid), '{:.2f}')}")
    out.print(view.grid(rows, cols, d.induction, colour, fmt="{:.2f}", top=1.0))
    say(out, zh,
        f"Attribution: each cell is what that head (or the block's MLP) adds directly to the logit of {token_str(tok, a.target)!r}; "
        "they sum, with the embeddings and the biases, to the logit. The grid at the end is the induction score: on "
        f"{repeat} random tokens seen twice, how much each head attends, in the second copy, to the token that followed the "
        "current token the first time (what a head that copies patterns forward does).",
        f"归因：每个格子是这个头（或这个块的 MLP）直接加到 {token_str(tok, a.target)!r} 的 logit 上的量；它们与嵌入和偏置相加等于这个 logit。"
        f"最后的网格是归纳分数：把 {repeat} 个随机词元重复两遍，在第二遍中每个头有多少注意力落在上一次紧跟当前词元的那个词元上（复制模式的头就是这样做的）。")  # fmt: skip
