"""tfcli steer: add a direction to the residual stream and compare the continuations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options


def steer(
    prompt: Annotated[str, typer.Argument(help="The text to continue ('-' reads stdin).", show_default=False)],
    toward: Annotated[Optional[str], typer.Option(
        "--toward", help="Text A: the direction points toward its mean residual stream.", show_default=False)] = None,
    away: Annotated[Optional[str], typer.Option(
        "--away", help="Text B: ... and away from this one's.", show_default=False)] = None,
    layer: Annotated[Optional[int], typer.Option(
        "--block", "-b", "--layer", help="Block B (from 0) whose output the vector is taken from and added to "
                                         "(--layer: its older name).", show_default=False)] = None,
    scale: Annotated[float, typer.Option("--scale", help="C: how many times the vector is added.")] = 4.0,
    model: options.Model = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="New tokens of each continuation.")] = 40,
    temperature: options.Temperature = None,
    seed: options.Seed = None,
    save: Annotated[Optional[Path], typer.Option(
        "--save", help="Also save the vector (for generate/chat --steer).", show_default=False, dir_okay=False)] = None,
    feature: Annotated[Optional[str], typer.Option(
        "--feature", help="Instead of --toward/--away/--block: an SAE feature's decoder direction, SAE:IDX, added at "
                          "its block as if it fired with activation C.", show_default=False)] = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """Steering: push the residual stream along a direction and see the text change.

    The direction v is the mean residual stream after block B for text A minus the same for
    text B. C·v is added to block B's output at every position, of the prompt and of every new
    token. The plain and the steered continuation are printed side by side, same seed, same knobs.

    Examples:

      tfcli steer ROMEO: --toward "O happy day, my sweet joy!" --away "O sad night, my woe!" --block 2 --scale 2 -t 0

      tfcli steer -m smollm2 "My favourite food is" --toward "Paris France" --away "Tokyo Japan" --block 8 \\
        --save paris.npz
    """
    import random

    from tfcli.engine.errors import UsageError
    from tfcli.engine.generate import check_max_new_tokens

    from . import json as js
    from .inputs import load, text_ids
    from .views import experiments as view

    zh = options.chinese(lang)
    check_max_new_tokens(max_tokens)
    lm = load(model)
    ids = text_ids(lm, prompt, "the prompt")
    prefix = len(lm.tokenizer.prompt("")) if lm.tokenizer.prompt("") else 0

    def side(text: str, what: str):
        t = text_ids(lm, text, what)
        return t, max(1, len(t) - prefix)

    s = _vector(lm, feature, toward, away, layer, scale, side)
    if save:
        _save(save, s, lm, zh)
    seed = random.randrange(2**31) if seed is None else seed
    room = lm.config.n_ctx - len(ids) + 1
    want = min(max_tokens, room)
    if want < 1:
        raise UsageError(f"the prompt fills {lm.name}'s context of {lm.config.n_ctx}", "shorten it")
    runs = _continuations(lm, ids, s, want, temperature, seed, zh)
    if as_json:
        js.emit({
            "model": lm.name, "prompt": prompt, "prompt_ids": ids, "block": s.layer, "layer": s.layer, "scale": s.scale,
            "toward": toward, "away": away, "feature": feature, "vector_norm": s.norm, "seed": seed,
            "plain": {"text": runs["plain"][0], "token_ids": runs["plain"][1]},
            "steered": {"text": runs["steered"][0], "token_ids": runs["steered"][1]},
        })  # fmt: skip
        return
    if feature is not None:
        from .views.features import feature_steering

        return feature_steering(lm, s, feature, seed, runs)
    view.steering(lm, s, prompt, toward, away, None if temperature == 0 else seed, runs, zh)


def _continuations(lm, ids, s, want: int, temperature, seed: int, zh: bool) -> dict:
    """{"plain": (text, ids), "steered": (...)}: the same draw without and with the vector, the
    tokens counted on stderr when it takes a while."""
    from tfcli.engine.generate import Generation, Session

    from .progress import Counted

    runs = {}
    with Counted("generating", "tokens (plain, then steered)",
                 "生成", "个词元（先原样，后转向）", zh) as step:
        for n, (name, hooks) in enumerate((("plain", None), ("steered", s.hooks()))):
            sampler = options.sampler(lm.generation, temperature=temperature, seed=seed)
            gen = Generation(Session(lm.model, len(ids) + want, hooks=hooks), lm.tokenizer, ids, sampler,
                             max_new_tokens=want, eos_ids=lm.config.eos_token_ids)
            steps = []
            for st in gen:
                steps.append(st)
                step(n * want + len(steps), 2 * want)
            runs[name] = ("".join(st.text for st in steps) + gen.flush(), [st.token for st in steps])
    return runs


def _vector(lm, feature, toward, away, layer, scale, side):
    """The steering of --feature SAE:IDX, or of --toward minus --away at --block."""
    from tfcli.analysis.experiments import steer as steering
    from tfcli.engine.errors import UsageError
    from tfcli.engine.fast import FAST

    if feature is not None:
        if toward is not None or away is not None or layer is not None:
            raise UsageError("--feature cannot be given with --toward, --away or --block",
                             "a feature brings its own direction and block")
        from tfcli.analysis.features import load_features, parse_feature
        from tfcli.engine.identity import identity_of

        folder, idx = parse_feature(feature)
        f = load_features(folder, lm.model, identity_of(lm))
        if f.site != "resid_post":
            raise UsageError(f"{folder} reads {f.site}; steer adds to a block's output (resid_post)",
                             "use it with generate --feature")
        return steering.Steering(f.block, f.sae.params["W_dec"][f.feature(idx)].copy(), float(scale))
    missing = [n for n, v in (("--toward", toward), ("--away", away), ("--block", layer)) if v is None]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}",
                         "give --toward TEXT --away TEXT --block B, or --feature SAE:IDX")
    return steering.steering_vector(lm.model, side(toward, "--toward"), side(away, "--away"), layer, scale, FAST)


def _save(path: Path, s, lm, zh: bool = False) -> None:
    """--save: the vector, its block and scale, and the identity of the model it was made on."""
    from tfcli.analysis.experiments import steer as steering
    from tfcli.engine.identity import identity_of

    from tfcli.output import save as save_output

    # the one safe way every output is written (tfcli/output.py)
    save_output(path, lambda f: steering.save(f, s, identity_of(lm)))
    from .console import note

    if zh:
        note(f"已写入 {path}：第 {s.layer} 块的向量，系数 {s.scale:g}，"
             f"在 {lm.name} 上求得（generate --steer {path}）")
    else:
        note(f"wrote {path}: the vector of block {s.layer} at scale {s.scale:g}, made on {lm.name} "
             f"(generate --steer {path})")
