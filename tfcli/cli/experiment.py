"""What the experiment commands (patch, ablate, steer, heads) share: options, the answer token,
and the JSON of a model's tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options


AblateOption = Annotated[
    Optional[list[str]],
    typer.Option("--ablate", help="Take a part out of every pass: B.H a head (its context vector zeroed), B.mlp an "
                                  "MLP's output, B.nN one neuron (repeatable; blocks from 0).", show_default=False),
]
SteerOption = Annotated[
    Optional[Path],
    typer.Option("--steer", help="Add a steering vector saved by 'tfcli steer --save' to every pass.",
                 show_default=False, dir_okay=False),
]
FeatureOption = Annotated[
    Optional[list[str]],
    typer.Option("--feature", help="Add a sparse autoencoder's feature at its block, SAE:IDX ('tfcli features train'), "
                                   "as if it fired with activation --scale (repeatable).", show_default=False),
]
ScaleOption = Annotated[float, typer.Option(
    "--scale", help="With --feature: the activation the feature is given (the units 'tfcli features show' prints).")]
AnyModelOption = Annotated[bool, typer.Option(
    "--any-model", help="Use a --steer vector or --feature SAE even if it was made on another model.")]
Png = options.png_option("the grid")
Svg = options.svg_option("the grid")


def pass_hooks(lm, ablate: list[str] | None, steer: Path | None = None, feature: list[str] | None = None,
               scale: float = 4.0, any_model: bool = False):
    """The hooks of --ablate, --steer and --feature for every pass of a command, or None. A
    steering vector or an SAE made on another model is refused unless any_model."""
    if not ablate and steer is None and not feature:
        return None
    from tfcli.analysis.experiments import steer as steering
    from tfcli.analysis.experiments.ablate import ablation_hooks
    from tfcli.engine.identity import identity_of

    hooks = ablation_hooks(lm.model, list(ablate or ()))
    if steer is not None:
        steering.load(steer, lm.model, identity_of(lm), any_model).hooks(hooks)
    for spec in feature or ():
        feature_hooks(lm, spec, scale, any_model, hooks)
    return hooks


def feature_hooks(lm, spec: str, scale: float, any_model: bool, hooks=None):
    """--feature SAE:IDX: its decoder row times scale added at its site (analysis/features.py)."""
    from tfcli.analysis.features import load_features, parse_feature, steer_hooks
    from tfcli.engine.identity import identity_of

    folder, idx = parse_feature(spec)
    return steer_hooks(load_features(folder, lm.model, identity_of(lm), any_model), idx, scale, hooks)


def one_token(lm, text: str, flag: str) -> int:
    """The id of the one token `text` is (as it would follow other text: ' Paris' with its space);
    one line naming the pieces when it is several tokens or none."""
    from tfcli.engine.errors import UsageError

    from .views.inside import token_str

    ids = lm.tokenizer.encode(text)
    if len(ids) != 1:
        pieces = " ".join(repr(token_str(lm.tokenizer, i)) for i in ids) or "nothing"
        raise UsageError(f"{flag} {text!r} is {len(ids)} tokens ({pieces}); it must be one token",
                         "try it with or without a leading space")
    return ids[0]


def tokens_json(lm, ids) -> list[dict]:
    from tfcli import json_shapes as js

    return [js.token(lm.tokenizer, i) for i in ids]
