"""tfcli ablate: take each head and each MLP out of the pass in turn; which ones did the answer need?"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .experiment import Png, Svg


def ablate(
    text: Annotated[str, typer.Argument(help="The text whose next token is traced ('-' reads stdin).", show_default=False)],
    model: options.Model = None,
    answer: Annotated[Optional[str], typer.Option("--answer", help="The answer token (default: the model's top next token).", show_default=False)] = None,
    png: Png = None,
    svg: Svg = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """Ablation: how much does the answer need each head and each MLP?

    Each head in turn is taken out (its context vector set to zero at every position), then each
    MLP (its output set to zero); a cell is the change in the log-probability of the answer
    after the last token. Negative: the answer needed that part.

    Examples:

      tfcli ablate -m smollm2 "The Eiffel Tower is in the city of"

      tfcli generate -m smollm2 "The Eiffel Tower is in the city of" -t 0 -n 5 --ablate 3.1
    """
    import numpy as np

    from tfcli.analysis.experiments.ablate import ablate as run_ablate

    from . import json as js
    from .console import out
    from .experiment import one_token, tokens_json
    from .lens import load, text_ids
    from .views import experiments as view
    from .views.inside import say, token_str, uses_colour

    zh = options.chinese(lang)
    lm = load(model)
    ids = text_ids(lm, text)
    a = None if answer is None else one_token(lm, answer, "--answer")
    r = run_ablate(lm.model, ids, a)
    tok = lm.tokenizer
    if as_json:
        js.emit({
            "model": lm.name, "tokens": tokens_json(lm, ids),
            "answer": {**js.token(tok, r.answer), "logprob": r.logprob},
            "heads": [{"block": b, "values": row} for b, row in enumerate(r.heads.tolist())],
            "mlps": r.mlps.tolist(),
        })  # fmt: skip
        return
    cfg = lm.config
    rows = [str(b) for b in range(cfg.n_layer)]
    cols = [f"h{h}" for h in range(cfg.n_head)] + ["mlp"]
    values = np.concatenate([r.heads, r.mlps[:, None]], axis=1)  # [L, H+1]
    out.print(f"[bold]{lm.name}[/] · ablation · answer {token_str(tok, r.answer)!r} (log-probability {r.logprob:.2f}, p = {np.exp(r.logprob):.0%})")
    out.print(view.grid(rows, cols, values, uses_colour(out)))
    order = np.argsort(r.heads, axis=None)[:3]
    worst = [(f"{b}.{h}", r.heads[b, h]) for b, h in zip(*np.unravel_index(order, r.heads.shape))]
    mlp = int(np.argmin(r.mlps))
    say(out, zh,
        "Rows are blocks (from 0), columns heads; each cell: the change in the answer's log-probability with that head "
        "(or the block's MLP, last column) taken out. Negative: the answer needed it. "
        f"Most needed heads: {view.ranked(worst, '{:+.2f}')}; MLP of block {mlp} ({r.mlps[mlp]:+.2f}).",
        "行是块（从 0 开始），列是注意力头；每个格子：去掉这个头（最后一列是这个块的 MLP）之后，答案的对数概率变化了多少。"
        f"负数表示答案需要它。最需要的头：{view.ranked(worst, '{:+.2f}')}；第 {mlp} 块的 MLP（{r.mlps[mlp]:+.2f}）。")  # fmt: skip
    if png or svg:
        top = float(np.abs(values).max()) or 1.0
        view.write_pictures(png, svg, f"{lm.name} · ablation", f"-Δ log p({token_str(tok, r.answer)!r}) / {top:.2f}", -values / top, rows, cols)
