"""tfcli chat: talk to a chat model, turn after turn, keeping the KV cache between turns."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from . import options
from .console import err, note, warn


def chat(
    model: options.Model = None,
    system: Annotated[Optional[str], typer.Option("--system", help="A system message that opens the conversation.", show_default=False)] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Longest reply, in tokens.")] = 512,
    temperature: options.Temperature = None,
    top_k: options.TopK = None,
    top_p: options.TopP = None,
    min_p: options.MinP = None,
    repetition_penalty: options.RepetitionPenalty = None,
    repeat_last_n: options.RepeatLastN = None,
    seed: options.Seed = None,
    threads: options.Threads = None,
) -> None:
    """Chat with a model that has a chat template (such as smollm2).

    Each turn reuses the KV cache of the conversation so far: only the new message is computed.
    Type /reset to start over, /exit or Ctrl-D to leave; Ctrl-C stops a reply. Lines piped on
    stdin are read as successive user messages.

    Example:

      tfcli chat -m smollm2 --system "Answer in one sentence."
    """
    from tfcli.engine.errors import PromptError, UsageError
    from tfcli.engine.generate import Generation, Session
    from tfcli.engine.tokenizer import check_utf8

    from .generate import chat_prompt, require_chat_template

    if max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, not {max_tokens}")
    n_threads = options.apply_threads(threads)
    lm = options.load_model(model)
    for w in lm.warnings:
        warn(w)
    require_chat_template(lm)
    sampler = options.sampler(
        lm.generation, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
        repetition_penalty=repetition_penalty, repeat_last_n=repeat_last_n, seed=seed,
    )  # fmt: skip
    session = Session(lm.model, workers=n_threads)
    history: list[dict[str, str]] = []
    interactive = sys.stdin.isatty()
    if interactive:
        note(f"chatting with {lm.name} ({lm.config.n_ctx:,}-token context); /reset starts over, /exit or Ctrl-D leaves")
    while True:
        try:
            user = input("> " if interactive else "")
            check_utf8(user, "the message")  # bytes that are not UTF-8 arrive from a lenient stdin as lone surrogates
        except EOFError:
            break
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except (UnicodeDecodeError, PromptError) as e:  # not UTF-8 (a strict stdin raises the first)
            problem = e if isinstance(e, PromptError) else PromptError(f"the message is not valid UTF-8 (byte {e.object[e.start]:#04x})", "convert the text to UTF-8")
            if not interactive:
                raise problem from None
            warn(f"{problem.message}; not sent, type it again")  # a typing slip should not end the conversation
            continue
        command = user.strip()
        if command in ("/exit", "/quit"):
            break
        if command == "/reset":
            history.clear()
            note("conversation cleared")
            continue
        if not command:
            continue
        ids = lm.tokenizer.encode(chat_prompt(lm, user, system, history))
        room = session.capacity - len(ids) + 1
        if room < 2:
            warn(f"the conversation fills the context ({len(ids):,} of {session.capacity:,} tokens); starting over")
            history.clear()
            ids = lm.tokenizer.encode(chat_prompt(lm, user, system, history))
            room = session.capacity - len(ids) + 1
        gen = Generation(session, lm.tokenizer, ids, sampler, min(max_tokens, room), eos_ids=lm.chat_eos_ids())
        reply: list[str] = []
        try:
            for step in gen:
                if step.text:
                    reply.append(step.text)
                    sys.stdout.write(step.text)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            reply.append(gen.flush())
            sys.stdout.write(reply[-1])
            gen.stats.stop_reason = "interrupted"
        sys.stdout.write("\n")
        sys.stdout.flush()
        s = gen.stats
        err.print(
            f"[dim]{s.prompt_tokens} new prompt tokens (of {len(ids)}) · {s.new_tokens} reply · "
            f"decode {s.decode_tps:,.1f} tok/s · stopped: {s.stop_reason}[/]"
        )
        history += [{"role": "user", "content": user}, {"role": "assistant", "content": "".join(reply)}]
