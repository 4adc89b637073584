"""tfcli generate: continue a prompt with a model, streaming the text to stdout."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Optional

import typer

from . import options
from .options import read_text
from .console import err, note, warn

DEFAULT_MAX_TOKENS = 256


def generate(
    prompt: Annotated[
        Optional[str],
        typer.Argument(help="Text to continue. '-' reads it from stdin. Omitted: start from a newline.", show_default=False),
    ] = None,
    model: options.Model = None,
    max_tokens: Annotated[
        Optional[int],
        typer.Option("--max-tokens", "-n", help=f"New tokens to generate (default {DEFAULT_MAX_TOKENS}, or what the context has room for; --slide goes past it).", show_default=False),
    ] = None,
    temperature: options.Temperature = None,
    top_k: options.TopK = None,
    top_p: options.TopP = None,
    min_p: options.MinP = None,
    repetition_penalty: options.RepetitionPenalty = None,
    repeat_last_n: options.RepeatLastN = None,
    seed: options.Seed = None,
    stop: Annotated[Optional[list[str]], typer.Option("--stop", help="Stop when this text appears (repeatable); it is not printed.", show_default=False)] = None,
    show_probs: Annotated[int, typer.Option("--show-probs", help="For each new token, show the top N candidates before and after temperature/top-k/top-p.", show_default=False)] = 0,
    chat: Annotated[bool, typer.Option("--chat", help="Treat PROMPT as a user message and lay it out with the model's chat template.")] = False,
    system: Annotated[Optional[str], typer.Option("--system", help="With --chat: a system message before the user's.", show_default=False)] = None,
    slide: Annotated[bool, typer.Option("--slide", help="Go on past the context: when it is full, continue from its most recent half (as nanoGPT crops).")] = False,
    truncate: Annotated[bool, typer.Option("--truncate", help="If the prompt is longer than the context, keep its last tokens (with a warning).")] = False,
    threads: options.Threads = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No statistics on stderr.")] = False,
) -> None:
    """Continue PROMPT with a model, token by token.

    The text goes to stdout as it is generated; statistics go to stderr, so
    'tfcli generate "..." > out.txt' keeps only the text. Ctrl-C stops and keeps what was printed.

    Examples:

      tfcli generate "ROMEO:" --temperature 0.7

      tfcli generate -m tang "床前明月光" --seed 1

      tfcli generate "To be" -t 0 -n 40 --show-probs 5

      tfcli generate -m smollm2 --chat "What is the capital of France?" -t 0
    """
    from tfcli.engine.errors import PromptError, UsageError
    from tfcli.engine.generate import Generation, Session

    if show_probs < 0:
        raise UsageError(f"--show-probs must be 0 or more, not {show_probs}")
    if max_tokens is not None and max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, not {max_tokens}")
    text = "\n" if prompt is None else read_text(prompt, "the prompt", "give some text to continue, or omit it to start from a newline")
    n_threads = options.apply_threads(threads)
    t0 = time.perf_counter()
    lm = options.load_model(model)
    load_seconds = time.perf_counter() - t0
    for w in lm.warnings:
        warn(w)
    sampler = options.sampler(
        lm.generation, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
        repetition_penalty=repetition_penalty, repeat_last_n=repeat_last_n, seed=seed,
    )  # fmt: skip

    if system is not None and not chat:
        raise UsageError("--system goes with --chat")
    eos_ids = lm.config.eos_token_ids
    if chat:  # the template writes the special tokens itself
        ids = lm.tokenizer.encode(chat_prompt(lm, text, system))
        eos_ids = lm.chat_eos_ids()
    else:
        if truncate:  # only its end is kept: tokenise only an end that surely holds what is kept
            text = text[-lm.tokenizer.tail_chars(lm.config.n_ctx) :]
        ids = lm.tokenizer.prompt(text)
    if not ids:
        raise PromptError("the prompt encodes to no tokens", "give some text to continue")
    bos = int(not chat and ids[0] in lm.tokenizer.special_ids())  # the tokenizer's BOS, kept by --truncate
    ids = _fit_context(ids, lm.config.n_ctx, max_tokens, truncate, lm.name, lead=bos)
    # The last new token is never fed back: a prompt of P tokens leaves n_ctx - P + 1 to generate.
    want = max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS if slide else min(DEFAULT_MAX_TOKENS, lm.config.n_ctx - len(ids) + 1)
    gen = Generation(
        Session(lm.model, capacity=min(len(ids) + want - 1, lm.config.n_ctx), workers=n_threads),
        lm.tokenizer,
        ids,
        sampler,
        max_new_tokens=want,
        stop=tuple(stop or ()),
        eos_ids=eos_ids,
        show_top=show_probs,
        slide=slide,
    )
    # With --show-probs the candidate view goes to stderr step by step, and the text to stdout at the
    # end, so that the two never interleave on a terminal.
    stream = sys.stdout
    pieces: list[str] = []
    if not show_probs and not chat and prompt is not None and stream.isatty():
        stream.write(text)
    try:
        for step in gen:
            if show_probs:
                pieces.append(step.text)
                _show_choice(lm.tokenizer, step, gen.stats.new_tokens, sampler)
            elif step.text:
                stream.write(step.text)
                stream.flush()
    except KeyboardInterrupt:
        gen.stats.stop_reason = "interrupted"
        (pieces.append if show_probs else stream.write)(gen.flush())
        _finish(stream, pieces, gen.stats, load_seconds, n_threads, quiet)
        raise typer.Exit(130) from None
    _finish(stream, pieces, gen.stats, load_seconds, n_threads, quiet)


def require_chat_template(lm) -> None:
    from tfcli.engine.errors import UsageError

    if lm.chat is None:
        raise UsageError(f"{lm.name} has no chat template, so it is not a chat model", "drop --chat to continue text, or use a chat model such as smollm2")


def chat_prompt(lm, user: str, system: str | None, history: list[dict[str, str]] = ()) -> str:
    """The conversation so far plus the user's new message, laid out by the model's chat template."""
    require_chat_template(lm)
    messages = ([{"role": "system", "content": system}] if system else []) + list(history)
    return lm.chat.render(messages + [{"role": "user", "content": user}], add_generation_prompt=True)


def _finish(stream, pieces: list[str], stats, load_seconds: float, threads: int, quiet: bool) -> None:
    if pieces:
        stream.write("".join(pieces))
    stream.write("\n")
    stream.flush()
    if not quiet:
        note(
            f"{stats.prompt_tokens} prompt tokens · {stats.new_tokens} new · "
            f"prefill {stats.prefill_tps:,.0f} tok/s · "
            + (f"decode {stats.decode_tps:,.1f} tok/s · " if stats.new_tokens > 1 else "")
            + f"load {load_seconds:.2f} s · {threads} thread{'s' if threads != 1 else ''} · "
            + (f"context slid {stats.slides}× · " if stats.slides else "")
            + f"stopped: {stats.stop_reason or 'interrupted'}"
        )


def _fit_context(ids: list[int], n_ctx: int, max_tokens: int | None, truncate: bool, name: str, lead: int = 0) -> list[int]:
    """The prompt's tokens, or with --truncate its last ones, so that it and the new tokens fit.

    Without --truncate a prompt that fits is kept whole (Generation says if --max-tokens does not
    fit after it); with --truncate the prompt is cut to leave room for --max-tokens, or by default
    for up to half the context. The first `lead` tokens (a BOS) stay in front of what is kept, as
    llama.cpp keeps them.
    """
    from tfcli.engine.errors import PromptError

    room_needed = max_tokens if max_tokens is not None else min(DEFAULT_MAX_TOKENS, n_ctx // 2)
    if not truncate:
        if len(ids) > n_ctx:
            raise PromptError(
                f"the prompt is {len(ids)} tokens but {name}'s context is {n_ctx}",
                "shorten it, or use --truncate to keep its last tokens",
            )
        return ids
    keep = max(1, n_ctx - room_needed + 1)
    if len(ids) <= keep:
        return ids
    lead = min(lead, keep - 1)
    kept = f"its last {keep - lead}" + (" after its BOS" if lead else "")
    warn(f"the prompt is {len(ids)} tokens; keeping {kept} so that {n_ctx - keep + 1} new tokens fit the context of {n_ctx}")
    return ids[:lead] + ids[len(ids) - (keep - lead) :]


def _show_choice(tokenizer, step, index: int, sampler) -> None:
    """One step of --show-probs: the candidates, their probability under the model (temperature 1,
    no filters) and in the distribution actually sampled from, as bars."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    choice = step.choice
    p = sampler.params
    table = Table(box=None, show_header=index == 1, pad_edge=False, padding=(0, 1))
    table.add_column("", width=1)
    table.add_column("token", width=14, no_wrap=True, overflow="ellipsis")  # fixed, so the bars line up step after step
    table.add_column("model (T=1)", no_wrap=True)
    table.add_column(f"sampled (T={p.temperature:g}, k={p.top_k}, p={p.top_p:g})", no_wrap=True)
    for tid, pm, pf in zip(choice.top_ids, choice.p_model, choice.p_final):
        mark = "▶" if tid == choice.token else ""
        table.add_row(mark, Text(_show_token(tokenizer, int(tid))), _bar(float(pm), "cyan"), _bar(float(pf), "magenta"))
    err.print(
        f"[bold]#{index}[/] chose [bold]{escape(_show_token(tokenizer, choice.token))}[/] "
        f"[dim]({choice.kept} candidate{'s' if choice.kept != 1 else ''} left after the filters)[/]"
    )
    err.print(table)


def _bar(p: float, colour: str, width: int = 20):
    from rich.text import Text

    filled = p * width
    full = int(filled)
    partial = " ▏▎▍▌▋▊▉"[int((filled - full) * 8)] if full < width else ""
    bar = Text("█" * full + partial.strip(), style=colour)
    bar.append(" " * (width - len(bar.plain)) + f" {p:6.1%}", style="default")
    return bar


def _show_token(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id])
    return repr(text) if text and "\ufffd" not in text else f"<{tokenizer.piece(token_id)}>"
