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
    from tfcli.analysis.experiments.ablate import ablate as run_ablate

    from . import json as js
    from .experiment import one_token, tokens_json
    from .inputs import load, text_ids
    from .views import experiments as view

    zh = options.chinese(lang)
    lm = load(model)
    ids = text_ids(lm, text)
    a = None if answer is None else one_token(lm, answer, "--answer")
    if a is not None:
        options.warn_unknown(lm.tokenizer, answer, [a], lm.name)  # an answer the vocabulary cannot spell is scored as <unk>: said, as for the text
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
    view.ablation(lm, r, zh, png, svg)
