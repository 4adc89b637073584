"""tfcli steer: add a direction to the residual stream and compare the continuations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options


def steer(
    prompt: Annotated[str, typer.Argument(help="The text to continue ('-' reads stdin).", show_default=False)],
    toward: Annotated[str, typer.Option("--toward", help="Text A: the direction points toward its mean residual stream.", show_default=False)],
    away: Annotated[str, typer.Option("--away", help="Text B: ... and away from this one's.", show_default=False)],
    layer: Annotated[int, typer.Option("--layer", help="Block I (from 0) whose output the vector is taken from and added to.", show_default=False)],
    scale: Annotated[float, typer.Option("--scale", help="C: how many times the vector is added.")] = 4.0,
    model: options.Model = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="New tokens of each continuation.")] = 40,
    temperature: options.Temperature = None,
    seed: options.Seed = None,
    save: Annotated[Optional[Path], typer.Option("--save", help="Also save the vector (for generate/chat --steer).", show_default=False, dir_okay=False)] = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """Steering: push the residual stream along a direction and see the text change.

    The direction v is the mean residual stream after block I for text A minus the same for
    text B. C·v is added to block I's output at every position, of the prompt and of every new
    token. The plain and the steered continuation are printed side by side, same seed, same knobs.

    Examples:

      tfcli steer -m smollm2 "I went to the market and" --toward " wedding" --away " funeral" --layer 6 --scale 8 -t 0

      tfcli steer -m smollm2 "My favourite food is" --toward "Paris France" --away "Tokyo Japan" --layer 8 --save paris.npz
    """
    import random

    from tfcli.analysis.experiments import steer as steering
    from tfcli.engine.errors import UsageError
    from tfcli.engine.generate import Generation, Session, check_max_new_tokens

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

    s = steering.steering_vector(lm.model, side(toward, "--toward"), side(away, "--away"), layer, scale)
    if save:
        from .output import save as save_output

        save_output(save, lambda f: steering.save(f, s))  # the one safe way every output is written (cli/output.py)
    seed = random.randrange(2**31) if seed is None else seed
    room = lm.config.n_ctx - len(ids) + 1
    want = min(max_tokens, room)
    if want < 1:
        raise UsageError(f"the prompt fills {lm.name}'s context of {lm.config.n_ctx}", "shorten it")
    runs = {}
    for name, hooks in (("plain", None), ("steered", s.hooks())):
        sampler = options.sampler(lm.generation, temperature=temperature, seed=seed)
        gen = Generation(Session(lm.model, len(ids) + want, hooks=hooks), lm.tokenizer, ids, sampler, max_new_tokens=want, eos_ids=lm.config.eos_token_ids)
        steps = list(gen)
        runs[name] = ("".join(st.text for st in steps) + gen.flush(), [st.token for st in steps])
    if as_json:
        js.emit({
            "model": lm.name, "prompt": prompt, "prompt_ids": ids, "layer": s.layer, "scale": s.scale,
            "toward": toward, "away": away, "vector_norm": s.norm, "seed": seed,
            "plain": {"text": runs["plain"][0], "token_ids": runs["plain"][1]},
            "steered": {"text": runs["steered"][0], "token_ids": runs["steered"][1]},
        })  # fmt: skip
        return
    view.steering(lm, s, prompt, toward, away, seed, runs, zh)
