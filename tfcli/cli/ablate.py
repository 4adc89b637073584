"""tfcli ablate: take each head and each MLP out of the pass in turn; which ones did the answer need?"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .experiment import Png, Svg


def ablate(
    text: Annotated[str, typer.Argument(
        help="The text whose next token is traced ('-' reads stdin).", show_default=False)],
    model: options.Model = None,
    answer: Annotated[Optional[str], typer.Option(
        "--answer", help="The answer token (default: the model's top next token).", show_default=False)] = None,
    png: Png = None,
    svg: Svg = None,
    feature: Annotated[Optional[str], typer.Option(
        "--feature", help="Instead of the grid: take one SAE feature out, SAE:IDX (the SAE's error kept, so "
                          "nothing else changes).", show_default=False)] = None,
    any_model: Annotated[bool, typer.Option(
        "--any-model", help="With --feature: use the SAE even on another model.")] = False,
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
    from tfcli.engine.fast import FAST

    from . import json as js
    from .experiment import one_token, tokens_json
    from .inputs import load, text_ids
    from .views import experiments as view

    zh = options.chinese(lang)
    lm = load(model)
    ids = text_ids(lm, text)
    a = None if answer is None else one_token(lm, answer, "--answer")
    if a is not None:
        # an answer the vocabulary cannot spell is scored as <unk>: said, as for the text
        options.warn_unknown(lm.tokenizer, answer, [a], lm.name)
    if feature is not None:
        return _feature(lm, ids, a, feature, any_model, as_json)
    from .progress import Counted

    with Counted("ablating", "blocks", "消融", "个块", zh) as step:
        r = run_ablate(lm.model, ids, a, progress=step, run=FAST)
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


def _feature(lm, ids, answer, feature: str, any_model: bool, as_json: bool) -> None:
    """ablate --feature SAE:IDX: the answer's log-probability with and without the feature."""
    from tfcli.analysis.features import ablate_feature, load_features, parse_feature
    from tfcli.engine.fast import FAST
    from tfcli.engine.identity import identity_of

    from . import json as js
    from .console import out, shown
    from .experiment import tokens_json
    from .views.inside import token_str

    folder, idx = parse_feature(feature)
    f = load_features(folder, lm.model, identity_of(lm), any_model)
    r = ablate_feature(lm.model, f, f.feature(idx), ids, answer, run=FAST)
    tok = lm.tokenizer
    if as_json:
        js.emit({"model": lm.name, "tokens": tokens_json(lm, ids), "feature": feature,
                 "activation_last": r["activation_last"],
                 "answer": {**js.token(tok, r["answer"]), "logprob": r["logprob"],
                            "logprob_ablated": r["logprob_ablated"]},
                 "top": [js.token(tok, i) for i in r["top"]],
                 "top_ablated": [js.token(tok, i) for i in r["top_ablated"]]})  # fmt: skip
        return
    name = lambda i: repr(token_str(tok, i))  # noqa: E731
    out.print(shown(f"{lm.name} · feature {feature} (activation {r['activation_last']:.3g} at the last token) "
                    "taken out, the SAE's error kept", "bold"), soft_wrap=True)
    out.print(shown(f"answer {name(r['answer'])}: log-probability {r['logprob']:.4f} -> {r['logprob_ablated']:.4f} "
                    f"({r['logprob_ablated'] - r['logprob']:+.4f})"), soft_wrap=True)
    out.print(shown(f"top next tokens: {' '.join(name(i) for i in r['top'])}  ->  "
                    f"{' '.join(name(i) for i in r['top_ablated'])}"), soft_wrap=True)
