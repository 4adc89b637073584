"""tfcli generate: continue a prompt with a model, streaming the text to stdout.

This file holds the command and the prompt as the model reads it; its options are in
cli/generate_options.py, and the run (samplers, the text streamed, --json, --samples) in
cli/generate_run.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from . import constrain, options
from . import generate_run as run
from .console import warn
from .experiment import AblateOption, AnyModelOption, FeatureOption, ScaleOption, SteerOption, pass_hooks
from .generate_options import (
    DEFAULT_MAX_TOKENS, Chat, Json, Lookup, MaxTokens, Prompt, PromptFile, PromptOption, Quiet, Samples, Seed,
    ShowProbs, Slide, Stop, System, Temperature, TemplateFile, TopK, TopP, Truncate,
)
from .inputs import read_file, warned
from .lora import Lora, with_lora
from .options import read_text
from .quantize import Quantize
from .quantize import apply as apply_quantize


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


def generate(
    prompt: Prompt = None,
    prompt_option: PromptOption = None,
    file: PromptFile = None,
    model: options.Model = None,
    lora: Lora = None,
    max_tokens: MaxTokens = None,
    temperature: Temperature = None,
    top_k: TopK = None,
    top_p: TopP = None,
    min_p: options.MinP = None,
    repetition_penalty: options.RepetitionPenalty = None,
    repeat_last_n: options.RepeatLastN = None,
    seed: Seed = None,
    samples: Samples = 1,
    lookup: Lookup = False,
    stop: Stop = None,
    show_probs: ShowProbs = 0,
    json_schema: constrain.JsonSchema = None,
    grammar: constrain.Grammar = None,
    regex: constrain.Regex = None,
    chat: Chat = False,
    system: System = None,
    template: TemplateFile = None,
    slide: Slide = False,
    truncate: Truncate = False,
    threads: options.Threads = None,
    kv_type: options.KvTypeOption = None,
    quantize: Quantize = None,
    quiet: Quiet = False,
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

      tfcli generate --file opening.txt -n 60

      tfcli generate -m smollm2 --chat "What is the capital of France?" -t 0

      tfcli generate "ROMEO:" -t 0.2,0.8,1.5 -n 60 --seed 1

      tfcli generate "ROMEO:" --samples 4 -n 100

      tfcli generate -m smollm2 --chat "A user as JSON" --json-schema user.json --show-probs 5

      tfcli generate -m tang "床前明月光" -n 16 --show-probs 3 --lang zh
    """
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.lookup import Drafter

    options.chinese(lang)  # the statistics and the --show-probs tables speak it (views/generate.py)
    prompt = _given_prompt(prompt, prompt_option, file)
    given_lists = (("--temperature", temperature, float), ("--top-k", top_k, int), ("--top-p", top_p, float))
    lists = {flag: run.parse_list(value, flag, kind) for flag, value, kind in given_lists}
    grammars = (json_schema, grammar, regex)
    n_samples = _check_flags(show_probs, max_tokens, samples, lists, (lookup, slide, as_json), grammars)
    prompt, text = _prompt_text(prompt, file)
    n_threads = options.apply_threads(threads)
    t0 = time.perf_counter()
    lm = apply_quantize(with_template(with_lora(options.load_model(model), lora), template, chat), quantize)
    options.apply_kv_type(lm, kv_type)
    load_seconds = time.perf_counter() - t0
    warned(lm)

    ids, eos_ids, text = _prompt_ids(lm, text, chat, system, truncate, max_tokens)
    rules = constrain.compiled(lm, json_schema, grammar, regex, eos_ids)  # a grammar to follow, or None
    # The last new token is never fed back: a prompt of P tokens leaves n_ctx - P + 1 to generate.
    room = min(DEFAULT_MAX_TOKENS, lm.config.n_ctx - len(ids) + 1)
    want = max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS if slide else room
    capacity = min(len(ids) + want - 1, lm.config.n_ctx)
    if n_samples > 1:
        from tfcli.engine.batch import check_batch

        # before a sampler or a cache of the batch exists
        check_batch(lm.config, n_samples, capacity, lm.model.cache_type())
    flags = dict(min_p=min_p, repetition_penalty=repetition_penalty, repeat_last_n=repeat_last_n)
    samplers, seed = run.make_samplers(lm.generation, lists, samples, seed, flags)
    # Without -n the context can be what stops a generation: said so, not "max tokens".
    context_bound = max_tokens is None and not slide and want < DEFAULT_MAX_TOKENS
    hooks = pass_hooks(lm, ablate, steer, feature, scale, any_model)
    session = Session(lm.model, capacity=capacity, workers=n_threads, hooks=hooks)
    ends, echo = (tuple(stop or ()), eos_ids), _echoed(text, chat, prompt if file is None else file)
    if n_samples > 1:
        stats_args = (load_seconds, n_threads, quiet)
        run.samples(lm, session, ids, samplers, seed, want, ends, show_probs, stats_args, context_bound, echo, rules)
        return
    sampler = samplers[0]
    gen = Generation(
        session,
        lm.tokenizer,
        ids,
        sampler,
        max_new_tokens=want,
        stop=ends[0],
        eos_ids=eos_ids,
        show_top=max(show_probs, 1) if as_json else show_probs,  # --json reports each token's log-probability
        slide=slide,
        lookup=Drafter() if lookup else None,
        constraint=None if rules is None else rules.start(),
    )
    stats_args = (load_seconds, n_threads, quiet, lookup)
    if as_json:
        run.as_json(lm, gen, text, show_probs, sampler, stats_args, context_bound)
        return
    run.stream(lm, gen, sampler, echo, show_probs, context_bound, stats_args)


def _echoed(text: str, chat: bool, prompt: str | None) -> str:
    """What stdout shows before the continuation: the prompt, at a terminal and piped alike (one
    rule, so that `... | cat` and `> out.txt` hold what the terminal showed); nothing for --chat (the
    template's layout is not the user's text) or when no prompt was given (a newline starts it)."""
    return "" if chat or prompt is None else text


def _prompt_text(prompt: str | None, file: Path | None) -> tuple[str | None, str]:
    """(the prompt as given, '-' when stdin is piped in; the text to continue): --file's text, the
    prompt's, stdin's, or a newline when none is given."""
    if file is not None:
        return prompt, read_file(file, "continue")
    if prompt is None and _piped_stdin():
        prompt = "-"  # `echo hi | tfcli generate`: the text piped in is the prompt, as with '-'
    given = "give some text to continue, or omit it to start from a newline"
    return prompt, "\n" if prompt is None else read_text(prompt, "the prompt", given)


def _given_prompt(prompt: str | None, prompt_option: str | None, file: Path | None = None) -> str | None:
    """PROMPT or -p/--prompt (llama.cpp's spelling), refused when both are given, or with --file;
    None for neither."""
    from tfcli.engine.errors import UsageError

    if file is not None and (prompt is not None or prompt_option is not None):
        raise UsageError("give the prompt once: as PROMPT, with -p/--prompt or with --file FILE")
    if prompt_option is None:
        return prompt
    if prompt is not None:
        raise UsageError("give the prompt once: as the PROMPT argument or with -p/--prompt")
    return prompt_option


def _check_flags(
    show_probs: int, max_tokens: int | None, samples: int, lists: dict, modes: tuple, grammars: tuple = (None,) * 3
) -> int:
    """The flags that need no model, checked before one is loaded: -> how many samples in all.
    modes: (--lookup, --slide, --json)."""
    from tfcli.engine.errors import UsageError
    from tfcli.engine.generate import check_max_new_tokens

    constrain.check_one(*grammars)
    if show_probs < 0:
        raise UsageError(f"--show-probs must be 0 or more, not {show_probs}")
    if max_tokens is not None:
        check_max_new_tokens(max_tokens)
    if samples < 1:
        raise UsageError(f"--samples must be at least 1, not {samples}", "1 draws one continuation")
    lookup, slide, as_json = modes
    n_samples = samples * run.settings_count(lists)
    if lookup and n_samples > 1:
        raise UsageError("--lookup decodes one sample at a time", "drop --samples and the lists, or --lookup")
    if n_samples > 1 and slide:
        raise UsageError("--slide goes with one sample", "drop --samples and the lists, or --slide")
    if n_samples > 1 and as_json:
        raise UsageError("--json goes with one sample", "drop --samples and the lists, or --json")
    return n_samples


def _prompt_ids(
    lm, text: str, chat: bool, system: str | None, truncate: bool, max_tokens: int | None
) -> tuple[list[int], tuple, str]:
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
            gone = "the prompt's start"
            if chars >= len(text):
                gone += f", its first {chars - len(text):,} of {chars:,} characters"
            gone += f", keeping its last {kept_body:,} tokens"
        room = f"{' after its BOS' if lead else ''} and room for {n_ctx - len(kept) + 1:,} new"
        room += f" in the context of {n_ctx:,}"
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


def require_chat_template(lm) -> None:
    from tfcli.engine.errors import UsageError

    if lm.chat is None:
        raise UsageError(
            f"{lm.name} has no chat template, so it is not a chat model",
            "drop --chat to continue text, or use a chat model such as smollm2",
        )


def chat_prompt(lm, user: str, system: str | None, history: list[dict[str, str]] = ()) -> str:
    """The conversation so far plus the user's new message, laid out by the model's chat template."""
    require_chat_template(lm)
    messages = ([{"role": "system", "content": system}] if system else []) + list(history)
    return lm.chat.render(messages + [{"role": "user", "content": user}], add_generation_prompt=True)


def _fit_context(
    ids: list[int], n_ctx: int, max_tokens: int | None, truncate: bool, name: str, lead: int = 0
) -> list[int]:
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


