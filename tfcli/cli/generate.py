"""tfcli generate: continue a prompt with a model, streaming the text to stdout."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import constrain, options
from .lora import Lora, with_lora
from .quantize import Quantize
from .quantize import apply as apply_quantize
from .command import interrupted
from .experiment import AblateOption, AnyModelOption, FeatureOption, ScaleOption, SteerOption, pass_hooks
from .options import read_text
from .console import warn
from .inputs import warned
from .views import generate as view

DEFAULT_MAX_TOKENS = 256


# --template, of generate --chat and chat.
TemplateFile = Annotated[
    Optional[Path],
    typer.Option(
        "--template",
        help="A Jinja chat template file (a chat_template.jinja) to lay the conversation out with, in place of the model's own; the model's BOS/EOS tokens still apply.",
        show_default=False,
        dir_okay=False,
    ),
]


def with_template(lm, template: Path | None, chat: bool = True):
    """The loaded model with the chat template of a file given beside it, if one is (generate: only
    with --chat)."""
    if template is None:
        return lm
    from dataclasses import replace

    from tfcli.engine.chat import load_chat_template
    from tfcli.engine.errors import UsageError

    if not chat:
        raise UsageError("--template goes with --chat")

    return replace(lm, chat=load_chat_template(lm.path, template))


Json = options.json_option("Print one JSON document at the end: the text, each new token (id, text, logprob) and the statistics.")


def generate(
    prompt: Annotated[
        Optional[str],
        typer.Argument(help="Text to continue. '-' reads it from stdin. Omitted: start from a newline.", show_default=False),
    ] = None,
    prompt_option: Annotated[
        Optional[str],
        typer.Option("--prompt", "-p", help="The text to continue, as the PROMPT argument (llama.cpp's spelling).", show_default=False),
    ] = None,
    model: options.Model = None,
    lora: Lora = None,
    max_tokens: Annotated[
        Optional[int],
        typer.Option("--max-tokens", "-n", help=f"New tokens to generate (default {DEFAULT_MAX_TOKENS}, or what the context has room for; --slide goes past it).", show_default=False),
    ] = None,
    temperature: Annotated[
        Optional[str],
        typer.Option("--temperature", "-t", "--temp", help="Divide the logits by this before softmax: 0 = greedy, <1 sharper, >1 flatter. A list (0.2,0.8,1.5) runs one sample per value: side by side at a terminal with room, else one after another. (default: model's, else 0.8)", show_default=False, rich_help_panel=options._SAMPLING),
    ] = None,
    top_k: Annotated[Optional[str], typer.Option("--top-k", help="Keep only the k most likely tokens (0 = off); a list runs one sample per value. (default: model's, else 40)", show_default=False, rich_help_panel=options._SAMPLING)] = None,
    top_p: Annotated[
        Optional[str],
        typer.Option("--top-p", help="Keep the smallest set of tokens whose probability reaches p (1 = off); a list runs one sample per value. (default: model's, else 0.95)", show_default=False, rich_help_panel=options._SAMPLING),
    ] = None,
    min_p: options.MinP = None,
    repetition_penalty: options.RepetitionPenalty = None,
    repeat_last_n: options.RepeatLastN = None,
    seed: Annotated[Optional[int], typer.Option("--seed", "-s", help="Random seed: the same seed gives the same output; -1 (or none) draws one, shown in the statistics and --json. Sample i (from 0) of --samples or a list draws with seed+i, so '--seed S+i' alone gives it again.", show_default=False)] = None,
    samples: Annotated[int, typer.Option("--samples", help="Continuations of the prompt to draw, decoded together in one batch (per value of a --temperature/--top-k/--top-p list).")] = 1,
    lookup: Annotated[bool, typer.Option("--lookup", help="Lookup decoding: guess the next tokens from the prompt and the text so far and check the guesses in one pass. Same output, faster when the text repeats its context.")] = False,
    stop: Annotated[Optional[list[str]], typer.Option("--stop", help="Stop when this text appears (repeatable); it is not printed.", show_default=False)] = None,
    show_probs: Annotated[int, typer.Option("--show-probs", help="For each new token, show the top N candidates before and after temperature/top-k/top-p (and, under a grammar, ✗ on those it ruled out and the probability they held).", show_default=False)] = 0,
    json_schema: constrain.JsonSchema = None,
    grammar: constrain.Grammar = None,
    regex: constrain.Regex = None,
    chat: Annotated[bool, typer.Option("--chat", help="Treat PROMPT as a user message and lay it out with the model's chat template.")] = False,
    system: Annotated[Optional[str], typer.Option("--system", help="With --chat: a system message before the user's.", show_default=False)] = None,
    template: TemplateFile = None,
    slide: Annotated[bool, typer.Option("--slide", help="Go on past the context: when it is full, continue from its most recent half (as nanoGPT crops).")] = False,
    truncate: Annotated[bool, typer.Option("--truncate", help="A prompt longer than the context (or, with -n, too long to leave room for N new tokens) drops its first tokens: the rest leaves room for -n, or half the context. One line on stderr says how many were dropped; the prompt printed is the part used.")] = False,
    threads: options.Threads = None,
    quantize: Quantize = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No statistics on stderr.")] = False,
    as_json: Json = False,
    ablate: AblateOption = None,
    steer: SteerOption = None,
    feature: FeatureOption = None,
    scale: ScaleOption = 4.0,
    any_model: AnyModelOption = False,
    lang: options.LangOption = None,
) -> None:
    """Continue PROMPT with a model, token by token.

    stdout holds the prompt and then its continuation, as it is generated, at a terminal or
    piped (with --chat only the reply; each sample of --samples or a list is a whole text);
    statistics go to stderr, so 'tfcli generate "..." > out.txt' keeps only the text. Ctrl-C stops
    and keeps what was printed.

    Examples:

      tfcli generate "ROMEO:" --temperature 0.7

      tfcli generate -m tang "床前明月光" --seed 1

      tfcli generate "To be" -t 0 -n 40 --show-probs 5

      tfcli generate -m smollm2 --chat "What is the capital of France?" -t 0

      tfcli generate "ROMEO:" -t 0.2,0.8,1.5 -n 60 --seed 1

      tfcli generate "ROMEO:" --samples 4 -n 100

      tfcli generate -m smollm2 --chat "A user as JSON" --json-schema user.json --show-probs 5

      tfcli generate -m tang "床前明月光" -n 16 --show-probs 3 --lang zh
    """
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.lookup import Drafter

    options.chinese(lang)  # the statistics and the --show-probs tables speak it (views/generate.py)
    prompt = _given_prompt(prompt, prompt_option)
    lists = {flag: parse_list(value, flag, kind) for flag, value, kind in (("--temperature", temperature, float), ("--top-k", top_k, int), ("--top-p", top_p, float))}
    n_samples = _check_flags(show_probs, max_tokens, samples, lists, lookup, slide, as_json, (json_schema, grammar, regex))
    if prompt is None and _piped_stdin():
        prompt = "-"  # `echo hi | tfcli generate`: the text piped in is the prompt, as with '-'
    text = "\n" if prompt is None else read_text(prompt, "the prompt", "give some text to continue, or omit it to start from a newline")
    n_threads = options.apply_threads(threads)
    t0 = time.perf_counter()
    lm = apply_quantize(with_template(with_lora(options.load_model(model), lora), template, chat), quantize)
    load_seconds = time.perf_counter() - t0
    warned(lm)

    ids, eos_ids, text = _prompt_ids(lm, text, chat, system, truncate, max_tokens)
    rules = constrain.compiled(lm, json_schema, grammar, regex, eos_ids)  # a grammar to follow, or None
    # The last new token is never fed back: a prompt of P tokens leaves n_ctx - P + 1 to generate.
    want = max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS if slide else min(DEFAULT_MAX_TOKENS, lm.config.n_ctx - len(ids) + 1)
    capacity = min(len(ids) + want - 1, lm.config.n_ctx)
    if n_samples > 1:
        from tfcli.engine.batch import check_batch

        check_batch(lm.config, n_samples, capacity)  # before a sampler or a cache of the batch exists
    flags = dict(min_p=min_p, repetition_penalty=repetition_penalty, repeat_last_n=repeat_last_n)
    samplers, seed = make_samplers(lm.generation, lists, samples, seed, flags)
    # Without -n the context can be what stops a generation: said so, not "max tokens".
    context_bound = max_tokens is None and not slide and want < DEFAULT_MAX_TOKENS
    session = Session(lm.model, capacity=capacity, workers=n_threads, hooks=pass_hooks(lm, ablate, steer, feature, scale, any_model))
    if n_samples > 1:
        _generate_samples(lm, session, ids, samplers, seed, want, tuple(stop or ()), eos_ids, show_probs, load_seconds, n_threads, quiet, context_bound, _echoed(text, chat, prompt), rules)
        return
    sampler = samplers[0]
    gen = Generation(
        session,
        lm.tokenizer,
        ids,
        sampler,
        max_new_tokens=want,
        stop=tuple(stop or ()),
        eos_ids=eos_ids,
        show_top=max(show_probs, 1) if as_json else show_probs,  # --json reports each token's log-probability
        slide=slide,
        lookup=Drafter() if lookup else None,
        constraint=None if rules is None else rules.start(),
    )
    if as_json:
        _generate_json(lm, gen, text, show_probs, sampler, load_seconds, n_threads, quiet, lookup, context_bound)
        return
    _stream(lm, gen, sampler, _echoed(text, chat, prompt), show_probs, context_bound, (load_seconds, n_threads, quiet, lookup))


def _echoed(text: str, chat: bool, prompt: str | None) -> str:
    """What stdout shows before the continuation: the prompt, at a terminal and piped alike (one
    rule, so that `... | cat` and `> out.txt` hold what the terminal showed); nothing for --chat (the
    template's layout is not the user's text) or when no prompt was given (a newline starts it)."""
    return "" if chat or prompt is None else text


def _given_prompt(prompt: str | None, prompt_option: str | None) -> str | None:
    """PROMPT or -p/--prompt (llama.cpp's spelling), refused when both are given; None for neither."""
    from tfcli.engine.errors import UsageError

    if prompt_option is None:
        return prompt
    if prompt is not None:
        raise UsageError("give the prompt once: as the PROMPT argument or with -p/--prompt")
    return prompt_option


def _check_flags(show_probs: int, max_tokens: int | None, samples: int, lists: dict, lookup: bool, slide: bool, as_json: bool, grammars: tuple = (None, None, None)) -> int:
    """The flags that need no model, checked before one is loaded: -> how many samples in all."""
    from tfcli.engine.errors import UsageError
    from tfcli.engine.generate import check_max_new_tokens

    constrain.check_one(*grammars)
    if show_probs < 0:
        raise UsageError(f"--show-probs must be 0 or more, not {show_probs}")
    if max_tokens is not None:
        check_max_new_tokens(max_tokens)
    if samples < 1:
        raise UsageError(f"--samples must be at least 1, not {samples}", "1 draws one continuation")
    n_samples = samples * _settings_count(lists)
    if lookup and n_samples > 1:
        raise UsageError("--lookup decodes one sample at a time", "drop --samples and the lists, or --lookup")
    if n_samples > 1 and slide:
        raise UsageError("--slide goes with one sample", "drop --samples and the lists, or --slide")
    if n_samples > 1 and as_json:
        raise UsageError("--json goes with one sample", "drop --samples and the lists, or --json")
    return n_samples


def _prompt_ids(lm, text: str, chat: bool, system: str | None, truncate: bool, max_tokens: int | None) -> tuple[list[int], tuple, str]:
    """The prompt as token ids that fit the context, the ids that end a reply, and the text: with
    --truncate, the part kept, as the model reads it."""
    from tfcli.engine.errors import PromptError, UsageError

    if system is not None and not chat:
        raise UsageError("--system goes with --chat")
    eos_ids = lm.config.eos_token_ids
    n_ctx, cut, chars = lm.config.n_ctx, 0, len(text)
    if chat:  # the template writes the special tokens itself
        ids = lm.tokenizer.encode(chat_prompt(lm, text, system))
        eos_ids = lm.chat_eos_ids()
    else:
        if truncate:  # only its end can be kept: tokenise only an end that surely holds what is kept
            cut = max(0, len(text) - lm.tokenizer.tail_chars(n_ctx))
            text = text[cut:]  # the characters cut here are never tokenised: a huge prompt costs little
        ids = lm.tokenizer.prompt(text)
        options.warn_unknown(lm.tokenizer, text, ids, lm.name)
    if not ids:
        raise PromptError("the prompt encodes to no tokens", "give some text to continue")
    bos = int(not chat and ids[0] in lm.tokenizer.special_ids())  # the tokenizer's BOS, kept by --truncate
    kept = _fit_context(ids, n_ctx, max_tokens, truncate, lm.name, lead=bos)
    if len(kept) < len(ids):
        lead = min(bos, len(kept) - 1)  # the BOS, still in front of what is kept (unless one token is all that fits)
        body, kept_body = len(ids) - bos, len(kept) - lead  # the text's tokens, and those kept
        if not chat:
            text = _kept_text(lm.tokenizer, ids[bos:], body - kept_body)
        if not cut:
            gone = f"the prompt's first {body - kept_body:,} of {body:,} tokens, keeping {kept_body:,}"
        else:  # its start was never tokenised: counted in characters
            gone = "the prompt's start" + (f", its first {chars - len(text):,} of {chars:,} characters" if chars >= len(text) else "")
            gone += f", keeping its last {kept_body:,} tokens"
        room = f"{' after its BOS' if lead else ''} and room for {n_ctx - len(kept) + 1:,} new in the context of {n_ctx:,}"
        warn(f"--truncate dropped {gone}{room}" + ("" if chat else "; the prompt printed is the part used"))
    return kept, eos_ids, text


def _kept_text(tok, body: list[int], dropped: int) -> str:
    """The text of body[dropped:], as the model reads it: all of body decoded, less what the
    dropped tokens decode to (a SentencePiece decoder strips a first token's leading space, so the
    kept part alone would lose it); the kept part alone when a character is split between the two."""
    whole, head = tok.decode(body), tok.decode(body[:dropped])
    if whole.startswith(head) and not head.endswith("\ufffd"):
        return whole[len(head) :]
    return tok.decode(body[dropped:])


def _stream(lm, gen, sampler, echo: str, show_probs: int, context_bound: bool, stats_args: tuple) -> None:
    """Print `echo` (the prompt) and the text as it is made, then the statistics. With --show-probs
    the candidate view goes to stderr step by step, and the text to stdout at the end, so that the
    two never interleave on a terminal. Ctrl-C keeps what was printed: exit 130."""
    stream = sys.stdout
    pieces: list[str] = [echo] if show_probs and echo else []
    # The prompt goes out once the prompt pass has given a first token: a pass that fails (a model
    # whose logits are NaN) leaves stdout empty, with its one error line on stderr.
    pending = "" if show_probs else echo
    try:
        for step in gen:
            if pending:
                stream.write(pending)
                pending = ""
            if show_probs:
                pieces.append(step.text)
                view.show_choice(lm.tokenizer, step, gen.stats.new_tokens, sampler, show_probs)
            elif step.text:
                stream.write(step.text)
                stream.flush()
    except KeyboardInterrupt:
        gen.stats.stop_reason = "interrupted"
        (pieces.append if show_probs else stream.write)(pending + gen.flush())
        view.finish(stream, pieces, gen.stats, *stats_args, sampler.params)
        raise interrupted() from None
    stream.write(pending)  # no token came (a stop string at once): the prompt all the same
    _context_full(gen.stats, context_bound)
    view.finish(stream, pieces, gen.stats, *stats_args, sampler.params)


def _piped_stdin() -> bool:
    """Whether text is piped in: stdin a pipe (or socket) that gives some text before its end, or a
    file with bytes left. Not a terminal, not /dev/null, not an empty pipe (`true | tfcli generate`).

    A pipe is waited on until its writer writes or closes it, however slow it is (`(sleep 2; echo
    ROMEO:) | tfcli generate` uses the prompt, as `cat` would): a fixed wait would drop a slow
    writer's prompt without a word. A pipe still silent after a second is said on stderr."""
    import os
    import select
    import stat

    stdin = sys.stdin
    if stdin is None or stdin.isatty():
        return False
    buffer = getattr(stdin, "buffer", stdin)
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # no descriptor: an in-memory stream (tests) holds its text already
        if hasattr(buffer, "getbuffer"):  # io.BytesIO
            return buffer.tell() < buffer.getbuffer().nbytes
        return bool(buffer.peek(1)) if hasattr(buffer, "peek") else False
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return os.fstat(fd).st_size > os.lseek(fd, 0, os.SEEK_CUR)
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):  # /dev/null and other devices: nothing piped
            return False
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            from .console import note

            note("waiting for the prompt piped to stdin (give PROMPT, or close the pipe to start from a newline)")
        return bool(buffer.peek(1)) if hasattr(buffer, "peek") else True  # peek waits for a byte or the end
    except (OSError, ValueError):
        return False


def _context_full(stats, context_bound: bool) -> None:
    """A generation stopped at the room the context had left (no -n given) stopped because the
    context is full, not at a number of tokens anyone asked for."""
    if context_bound and stats.stop_reason == "max tokens":
        stats.stop_reason = "context full"


def _generate_json(lm, gen, prompt: str, show_probs: int, sampler, load_seconds: float, threads: int, quiet: bool, lookup: bool, context_bound: bool = False) -> None:
    """generate --json: nothing on stdout until the end, then one document (cli/json.py)."""
    from . import json as json_out

    new: list[dict] = []
    try:
        for step in gen:
            new.append(json_out.generated(lm.tokenizer, step))
            if show_probs:
                view.show_choice(lm.tokenizer, step, gen.stats.new_tokens, sampler, show_probs)
    except KeyboardInterrupt:
        gen.stats.stop_reason = "interrupted"
        new.append({"id": None, "text": gen.flush(), "logprob": None})
        json_out.emit(json_out.generation(lm.name, prompt, "".join(t["text"] for t in new), new, json_out.stats(gen.stats, load_seconds=load_seconds, threads=threads, seed=_seed(sampler.params))))
        raise interrupted() from None
    _context_full(gen.stats, context_bound)
    json_out.emit(json_out.generation(lm.name, prompt, "".join(t["text"] for t in new), new, json_out.stats(gen.stats, load_seconds=load_seconds, threads=threads, seed=_seed(sampler.params))))
    if not quiet:
        view.finish(None, [], gen.stats, load_seconds, threads, quiet, lookup, sampler.params)


def _seed(params) -> int | None:
    """The seed a sample drew with; None when greedy (T = 0), which draws nothing."""
    return None if params.temperature == 0 else params.seed


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
            raise UsageError(f"Invalid value for '{flag}': {v!r} is not a valid {what}{where}", "a list is comma-separated: 0.2,0.8,1.5") from None
        out.append(x)
    return out


def _settings_count(lists: dict[str, list | None]) -> int:
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

    n_settings = _settings_count(lists)
    n = samples * n_settings
    if seed is None or seed == -1:  # -1: llama.cpp's "random"; either way the seed drawn is shown, so a run can be repeated
        seed = int(np.random.SeedSequence().entropy % 2**31)
    if seed is not None and n > 1 and not 0 <= seed + n - 1 < 2**63:
        raise UsageError(f"--seed {seed} leaves no room for {n} samples (sample i uses seed+i, up to 2^63-1)")
    keys = {"--temperature": "temperature", "--top-k": "top_k", "--top-p": "top_p"}
    out = []
    for j in range(n_settings):
        chosen = {keys[flag]: (v[j] if len(v) > 1 else v[0]) for flag, v in lists.items() if v is not None}
        for r in range(samples):
            i = j * samples + r
            out.append(Sampler(SamplingParams.merged(generation, **chosen, **flags, seed=None if seed is None else seed + i)))
    return out, seed


def _generate_samples(lm, session, ids, samplers, seed, want, stop, eos_ids, show_probs, load_seconds, n_threads, quiet, context_bound: bool = False, echo: str = "", rules=None) -> None:
    """--samples N or a list: every sample in one batch; the texts (each after `echo`, the prompt)
    printed when they are done, one after another with a header each, or side by side when stdout
    is a terminal wide enough."""
    from tfcli.engine.batch import Samples

    batch = Samples(session, lm.tokenizer, ids, samplers, want, stop=stop, eos_ids=eos_ids, show_top=show_probs)
    for run in batch.runs if rules is not None else ():
        run.constraint = rules.start()  # each sample its own place in the grammar
    texts = [[echo] for _ in samplers]
    labels = view.labels(samplers, seed)
    if not quiet and view.identical(samplers):  # greedy samples: one text N times, and no seed to show
        warn(view.identical(samplers))
    try:
        for steps in batch:
            for i, step in steps:
                texts[i].append(step.text)
            if show_probs:
                view.show_choices(lm.tokenizer, steps, batch.runs[steps[0][0]].stats.new_tokens, samplers, labels, show_probs)
    except KeyboardInterrupt:
        for i, run in enumerate(batch.runs):
            texts[i].append(batch.flush(i))
            run.stats.stop_reason = run.stats.stop_reason or "interrupted"
        view.print_samples(["".join(t) for t in texts], labels)
        view.finish_samples(batch, labels, load_seconds, n_threads, quiet)
        raise interrupted() from None
    for run in batch.runs:
        _context_full(run.stats, context_bound)
    view.print_samples(["".join(t) for t in texts], labels)
    view.finish_samples(batch, labels, load_seconds, n_threads, quiet)


def require_chat_template(lm) -> None:
    from tfcli.engine.errors import UsageError

    if lm.chat is None:
        raise UsageError(f"{lm.name} has no chat template, so it is not a chat model", "drop --chat to continue text, or use a chat model such as smollm2")


def chat_prompt(lm, user: str, system: str | None, history: list[dict[str, str]] = ()) -> str:
    """The conversation so far plus the user's new message, laid out by the model's chat template."""
    require_chat_template(lm)
    messages = ([{"role": "system", "content": system}] if system else []) + list(history)
    return lm.chat.render(messages + [{"role": "user", "content": user}], add_generation_prompt=True)


def _fit_context(ids: list[int], n_ctx: int, max_tokens: int | None, truncate: bool, name: str, lead: int = 0) -> list[int]:
    """The prompt's tokens, or with --truncate its last ones, so that it and the new tokens fit.

    Without --truncate a prompt that fits is kept whole (Generation says if --max-tokens does not
    fit after it). With --truncate a prompt is cut only when it must be: when it is longer than the
    context, or, with --max-tokens, when it leaves no room for them; what is kept leaves room for
    --max-tokens, or by default for up to half the context (llama.cpp's server keeps about half
    too). The first `lead` tokens (a BOS) stay in front of what is kept, as llama.cpp keeps them.
    """
    from tfcli.engine.errors import PromptError

    if not truncate:
        if len(ids) > n_ctx:
            raise PromptError(
                f"the prompt is {len(ids)} tokens but {name}'s context is {n_ctx}",
                "shorten it, or use --truncate to keep its last tokens",
            )
        return ids
    room_needed = max_tokens if max_tokens is not None else min(DEFAULT_MAX_TOKENS, n_ctx // 2)
    keep = max(1, n_ctx - room_needed + 1)
    if len(ids) <= (keep if max_tokens is not None else n_ctx):  # it fits: kept whole, as without --truncate
        return ids
    lead = min(lead, keep - 1)
    return ids[:lead] + ids[len(ids) - (keep - lead) :]


