"""tfcli heads: what each head adds to the prediction, and which heads are of a known kind."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options


def heads(
    text: Annotated[
        Optional[str], typer.Argument(help="The text to look at ('-' reads stdin).", show_default=False)
    ] = None,
    file: options.TextFile = None,
    model: options.Model = None,
    position: Annotated[
        int,
        typer.Option(
            "--position", "-p", help="The prediction to explain (0 = after the first token, -1 = after the last)."
        ),
    ] = -1,
    token: Annotated[
        Optional[str],
        typer.Option("--token", help="The target token (default: the top prediction there).", show_default=False),
    ] = None,
    repeat: Annotated[
        int, typer.Option("--repeat", help="R: random tokens repeated twice for the induction detector.")
    ] = 20,
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

      tfcli heads --file notes.txt -p 40
    """
    from tfcli.analysis.experiments.heads import attribute, detect
    from tfcli.engine.errors import UsageError
    from tfcli.engine.fast import FAST

    from . import json as js
    from .experiment import one_token, tokens_json
    from .inputs import load, pick_position, text_ids, text_or_file
    from .views import experiments as view

    zh = options.chinese(lang)
    if not 2 <= repeat <= 512:
        raise UsageError(f"--repeat must be from 2 to 512, not {repeat}")
    options.check_seed(seed)
    text = text_or_file(text, file, "heads")
    lm = load(model)
    ids = text_ids(lm, text, read=True)
    p = pick_position(position, len(ids))
    prefix = len(lm.tokenizer.prompt(""))
    if prefix + 2 * repeat > lm.config.n_ctx:
        raise UsageError(
            f"--repeat {repeat} needs {prefix + 2 * repeat} positions; {lm.name}'s context is {lm.config.n_ctx}"
        )
    target = None if token is None else one_token(lm, token, "--token")
    from .progress import Counted

    n = lm.config.n_layer  # three passes: the attribution's, the text's attention, the repeated tokens'
    with Counted("reading", "blocks (3 passes)", "读取", "个块（3 次前向）", zh) as step:
        a = attribute(lm.model, ids, p, target, progress=lambda done, _: step(done, 3 * n), run=FAST)
        d = detect(lm.model, ids, lm.tokenizer, repeat, seed, progress=lambda done, _: step(n + done, 3 * n), run=FAST)
    tok = lm.tokenizer
    if as_json:
        js.emit({
            "model": lm.name, "tokens": tokens_json(lm, ids), "position": a.position,
            "target": {**js.token(tok, a.target), "logit": a.logit},
            "embedding": a.embedding, "heads": [{"block": b, "values": row} for b, row in enumerate(a.heads.tolist())],
            "mlps": a.mlps.tolist(), "bias": a.bias, "total": a.total,
            "detectors": {k: getattr(d, k).tolist()
                          for k in ("previous_token", "first_token", "induction", "duplicate_token")},
            "induction_tokens": [int(i) for i in d.induction_tokens],
        })  # fmt: skip
        return
    view.heads(lm, ids, a, d, repeat, zh)
