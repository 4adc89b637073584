"""tfcli generate's options: the Annotated aliases its signature is written with (the sampling
knobs shared with chat, score and serve are in cli/options.py). --template is chat's too."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options

DEFAULT_MAX_TOKENS = 256
_SAMPLING = options._SAMPLING


# --template, of generate --chat and chat.
TemplateFile = Annotated[
    Optional[Path],
    typer.Option(
        "--template",
        help="A Jinja chat template file (a chat_template.jinja) to lay the conversation out with, in place of "
        "the model's own; the model's BOS/EOS tokens still apply.",
        show_default=False,
        dir_okay=False,
    ),
]

# generate's own.
Json = options.json_option(
    "Print one JSON document at the end: the text, each new token (id, text, logprob) and the statistics."
)
Prompt = Annotated[
    Optional[str],
    typer.Argument(
        help="Text to continue. '-' reads it from stdin. Omitted: start from a newline.", show_default=False
    ),
]
PromptOption = Annotated[
    Optional[str],
    typer.Option(
        "--prompt",
        "-p",
        help="The text to continue, as the PROMPT argument (llama.cpp's spelling).",
        show_default=False,
    ),
]
PromptFile = Annotated[
    Optional[Path],
    typer.Option("--file", "-f", help="Read the prompt from this UTF-8 file instead of PROMPT.", show_default=False),
]
MaxTokens = Annotated[
    Optional[int],
    typer.Option(
        "--max-tokens",
        "-n",
        help=f"New tokens to generate (default {DEFAULT_MAX_TOKENS}, or what the context has room for; --slide goes "
        "past it).",
        show_default=False,
    ),
]
Temperature = Annotated[
    Optional[str],
    typer.Option(
        "--temperature",
        "-t",
        "--temp",
        help="Divide the logits by this before softmax: 0 = greedy, <1 sharper, >1 flatter. A list (0.2,0.8,1.5) "
        "runs one sample per value: side by side at a terminal with room, else one after another. (default: "
        "model's, else 0.8)",
        show_default=False,
        rich_help_panel=_SAMPLING,
    ),
]
TopK = Annotated[
    Optional[str],
    typer.Option(
        "--top-k",
        help="Keep only the k most likely tokens (0 = off); a list runs one sample per value. (default: model's, "
        "else 40)",
        show_default=False,
        rich_help_panel=_SAMPLING,
    ),
]
TopP = Annotated[
    Optional[str],
    typer.Option(
        "--top-p",
        help="Keep the smallest set of tokens whose probability reaches p (1 = off); a list runs one sample per "
        "value. (default: model's, else 0.95)",
        show_default=False,
        rich_help_panel=_SAMPLING,
    ),
]
Seed = Annotated[
    Optional[int],
    typer.Option(
        "--seed",
        "-s",
        help="Random seed: the same seed gives the same output; -1 (or none) draws one, shown in the statistics "
        "and --json. Sample i (from 0) of --samples or a list draws with seed+i, so '--seed S+i' alone gives it "
        "again.",
        show_default=False,
    ),
]
Samples = Annotated[
    int,
    typer.Option(
        "--samples",
        help="Continuations of the prompt to draw, decoded together in one batch (per value of a "
        "--temperature/--top-k/--top-p list).",
    ),
]
Lookup = Annotated[
    bool,
    typer.Option(
        "--lookup",
        help="Lookup decoding: guess the next tokens from the prompt and the text so far and check the guesses "
        "in one pass. Same output, faster when the text repeats its context.",
    ),
]
Stop = Annotated[
    Optional[list[str]],
    typer.Option("--stop", help="Stop when this text appears (repeatable); it is not printed.", show_default=False),
]
ShowProbs = Annotated[
    int,
    typer.Option(
        "--show-probs",
        help="For each new token, show the top N candidates before and after temperature/top-k/top-p (and, under "
        "a grammar, ✗ on those it ruled out and the probability they held).",
        show_default=False,
    ),
]
Chat = Annotated[
    bool,
    typer.Option("--chat", help="Treat PROMPT as a user message and lay it out with the model's chat template."),
]
System = Annotated[
    Optional[str],
    typer.Option("--system", help="With --chat: a system message before the user's.", show_default=False),
]
Slide = Annotated[
    bool,
    typer.Option(
        "--slide",
        help="Go on past the context: when it is full, continue from its most recent half (as nanoGPT crops).",
    ),
]
Truncate = Annotated[
    bool,
    typer.Option(
        "--truncate",
        help="A prompt longer than the context (or, with -n, too long to leave room for N new tokens) drops its "
        "first tokens: the rest leaves room for -n, or half the context. One line on stderr says how many were "
        "dropped; the prompt printed is the part used.",
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No statistics on stderr.")]
