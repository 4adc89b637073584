"""tfcli generate's run, once the prompt is read: the samplers its flags make (a list of temperatures
is one sampler per value), and the text printed as it comes, as one JSON document, or as several
samples side by side. The command and its options are in cli/generate.py; the drawing in
cli/views/generate.py."""

from __future__ import annotations

import sys

from .command import interrupted
from .console import warn
from .views import generate as view


def parse_list(value: str | None, flag: str, kind: type) -> list | None:
    """'0.2,0.8,1.5' -> [0.2, 0.8, 1.5] (a single value is a list of one); None stays None."""
    from tfcli.engine.errors import UsageError

    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    out = []
    for v in items:
        try:
            x = kind(v)
        except ValueError:
            what = "integer" if kind is int else "float"  # click's words for a bad single value
            where = f" in the list {value!r}" if len(items) > 1 else ""
            raise UsageError(
                f"Invalid value for '{flag}': {v!r} is not a valid {what}{where}",
                "a list is comma-separated: 0.2,0.8,1.5",
            ) from None
        out.append(x)
    return out


def settings_count(lists: dict[str, list | None]) -> int:
    """How many settings the lists make: they go side by side, so their lengths must agree (or be 1)."""
    from tfcli.engine.errors import UsageError

    lengths = {flag: len(v) for flag, v in lists.items() if v is not None and len(v) > 1}
    if len(set(lengths.values())) > 1:
        told = ", ".join(f"{flag} has {n}" for flag, n in lengths.items())
        raise UsageError(f"the lists do not line up: {told} values", "give lists of the same length, or single values")
    return max(lengths.values(), default=1)


def make_samplers(generation: dict, lists: dict[str, list | None], samples: int, seed: int | None, flags: dict):
    """One Sampler per sample: each setting of the lists `samples` times, sample i drawing with
    seed + i. Without --seed a base seed is drawn (and reported), so a run can be repeated.
    Returns (samplers, base seed or the --seed given)."""
    import numpy as np

    from tfcli.engine.errors import UsageError
    from tfcli.engine.sampling import Sampler, SamplingParams

    n_settings = settings_count(lists)
    n = samples * n_settings
    # -1: llama.cpp's "random"; either way the seed drawn is shown, so a run can be repeated
    if seed is None or seed == -1:
        seed = int(np.random.SeedSequence().entropy % 2**31)
    if seed is not None and n > 1 and not 0 <= seed + n - 1 < 2**63:
        raise UsageError(f"--seed {seed} leaves no room for {n} samples (sample i uses seed+i, up to 2^63-1)")
    keys = {"--temperature": "temperature", "--top-k": "top_k", "--top-p": "top_p"}
    out = []
    for j in range(n_settings):
        chosen = {keys[flag]: (v[j] if len(v) > 1 else v[0]) for flag, v in lists.items() if v is not None}
        for r in range(samples):
            i = j * samples + r
            params = SamplingParams.merged(generation, **chosen, **flags, seed=None if seed is None else seed + i)
            out.append(Sampler(params))
    return out, seed


def stream(lm, gen, sampler, echo: str, show_probs: int, context_bound: bool, stats_args: tuple) -> None:
    """Print `echo` (the prompt) and the text as it is made, then the statistics. With --show-probs
    the candidate view goes to stderr step by step, and the text to stdout at the end, so that the
    two never interleave on a terminal. Ctrl-C keeps what was printed: exit 130."""
    out = sys.stdout
    pieces: list[str] = [echo] if show_probs and echo else []
    # The prompt goes out once the prompt pass has given a first token: a pass that fails (a model
    # whose logits are NaN) leaves stdout empty, with its one error line on stderr.
    pending = "" if show_probs else echo
    try:
        for step in gen:
            if pending:
                out.write(pending)
                pending = ""
            if show_probs:
                pieces.append(step.text)
                view.show_choice(lm.tokenizer, step, gen.stats.new_tokens, sampler, show_probs)
            elif step.text:
                out.write(step.text)
                out.flush()
    except KeyboardInterrupt:
        gen.stats.stop_reason = "interrupted"
        (pieces.append if show_probs else out.write)(pending + gen.flush())
        view.finish(out, pieces, gen.stats, *stats_args, sampler.params)
        raise interrupted() from None
    out.write(pending)  # no token came (a stop string at once): the prompt all the same
    _context_full(gen.stats, context_bound)
    view.finish(out, pieces, gen.stats, *stats_args, sampler.params)


def _context_full(stats, context_bound: bool) -> None:
    """A generation stopped at the room the context had left (no -n given) stopped because the
    context is full, not at a number of tokens anyone asked for."""
    if context_bound and stats.stop_reason == "max tokens":
        stats.stop_reason = "context full"


def as_json(lm, gen, prompt: str, show_probs: int, sampler, stats_args: tuple, context_bound: bool = False) -> None:
    """generate --json: nothing on stdout until the end, then one document (cli/json.py).
    stats_args: (load seconds, threads, quiet, lookup), as view.finish takes them."""
    from . import json as json_out

    load_seconds, threads, quiet, lookup = stats_args

    def emit() -> None:
        stats = json_out.stats(gen.stats, load_seconds=load_seconds, threads=threads, seed=_seed(sampler.params))
        text = "".join(t["text"] for t in new)
        json_out.emit(json_out.generation(lm.name, prompt, text, new, stats))

    new: list[dict] = []
    try:
        for step in gen:
            new.append(json_out.generated(lm.tokenizer, step))
            if show_probs:
                view.show_choice(lm.tokenizer, step, gen.stats.new_tokens, sampler, show_probs)
    except KeyboardInterrupt:
        gen.stats.stop_reason = "interrupted"
        new.append({"id": None, "text": gen.flush(), "logprob": None})
        emit()
        raise interrupted() from None
    _context_full(gen.stats, context_bound)
    emit()
    if not quiet:
        view.finish(None, [], gen.stats, load_seconds, threads, quiet, lookup, sampler.params)


def _seed(params) -> int | None:
    """The seed a sample drew with; None when greedy (T = 0), which draws nothing."""
    return None if params.temperature == 0 else params.seed


def samples(lm, session, ids, samplers, seed, want, ends: tuple, show_probs, stats_args: tuple,
            context_bound: bool = False, echo: str = "", rules=None) -> None:
    """--samples N or a list: every sample in one batch; the texts (each after `echo`, the prompt)
    printed when they are done, one after another with a header each, or side by side when stdout
    is a terminal wide enough. ends: (stop strings, EOS ids); stats_args: (load seconds, threads, quiet)."""
    from tfcli.engine.batch import Samples

    stop, eos_ids = ends
    batch = Samples(session, lm.tokenizer, ids, samplers, want, stop=stop, eos_ids=eos_ids, show_top=show_probs)
    for run in batch.runs if rules is not None else ():
        run.constraint = rules.start()  # each sample its own place in the grammar
    texts = [[echo] for _ in samplers]
    labels = view.labels(samplers, seed)
    if not stats_args[2] and view.identical(samplers):  # greedy samples: one text N times, and no seed to show
        warn(view.identical(samplers))
    try:
        for steps in batch:
            for i, step in steps:
                texts[i].append(step.text)
            if show_probs:
                index = batch.runs[steps[0][0]].stats.new_tokens
                view.show_choices(lm.tokenizer, steps, index, samplers, labels, show_probs)
    except KeyboardInterrupt:
        for i, run in enumerate(batch.runs):
            texts[i].append(batch.flush(i))
            run.stats.stop_reason = run.stats.stop_reason or "interrupted"
        view.print_samples(["".join(t) for t in texts], labels)
        view.finish_samples(batch, labels, *stats_args)
        raise interrupted() from None
    for run in batch.runs:
        _context_full(run.stats, context_bound)
    view.print_samples(["".join(t) for t in texts], labels)
    view.finish_samples(batch, labels, *stats_args)
