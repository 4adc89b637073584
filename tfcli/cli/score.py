"""tfcli score: how well a model predicts a text (loss in nats, perplexity), token by token."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options
from .experiment import AblateOption, pass_hooks
from .console import out
from .inputs import load
from .lora import Lora, with_lora
from .quantize import Quantize
from .quantize import apply as apply_quantize

# How likely the model found each token, as colours from sure to surprised (probability bounds).
SCALE = (
    (0.5, "green", "≥ 50%"),
    (0.2, "bright_green", "20-50%"),
    (0.05, "yellow", "5-20%"),
    (0.01, "dark_orange", "1-5%"),
    (0.0, "red", "< 1%"),
)


def score(
    text: Annotated[
        Optional[str], typer.Argument(help="The text to score. '-' reads it from stdin.", show_default=False)
    ] = None,
    file: Annotated[
        Optional[Path],
        typer.Option("--file", "-f", help="Score the text of this UTF-8 file instead.", show_default=False),
    ] = None,
    model: options.Model = None,
    lora: Lora = None,
    window: Annotated[
        Optional[int],
        typer.Option("--window", help="Tokens the model sees at once (default: its context).", show_default=False),
    ] = None,
    stride: Annotated[
        Optional[int],
        typer.Option(
            "--stride",
            help="How far the window moves on a text longer than it; each token after the first window sees at "
            "least window - stride before it. = --window: windows that do not overlap. (default: half the window)",
            show_default=False,
        ),
    ] = None,
    chunks: Annotated[
        Optional[int],
        typer.Option(
            "--chunks",
            help="Score as llama-perplexity -c N does: whole chunks of N tokens, each on its own, the second half"
            " of each scored (its first token the BOS, if the model uses one).",
            show_default=False,
        ),
    ] = None,
    show_text: Annotated[
        Optional[bool],
        typer.Option(
            "--text/--no-text",
            help="Show the text coloured by each token's probability (default: when stdout is a terminal).",
            show_default=False,
        ),
    ] = None,
    as_json: options.Json = False,
    threads: options.Threads = None,
    kv_type: options.KvTypeOption = None,
    quantize: Quantize = None,
    ablate: AblateOption = None,
    lang: options.LangOption = None,
) -> None:
    """The model's loss on a text: mean nats per token, perplexity, and nats per character and per
    byte (comparable across tokenizers). The first token has nothing before it and is not scored.
    A text longer than the window goes through a sliding window; every token is scored once.

    Examples:

      tfcli score "To be, or not to be, that is the question."

      tfcli score -m smollm2 --file notes.txt --window 1024 --stride 512

      tfcli score --file val.txt --stride 256 --json

      tfcli score -m tang "床前明月光，疑是地上霜。" --lang zh

      tfcli score -m smollm2 --file wiki.txt --chunks 512
    """
    import sys

    from tfcli.engine.fast import FAST
    from tfcli.engine.score import score as run_score

    from .inputs import text_or_file
    from .progress import Counted

    zh = options.chinese(lang)
    body = text_or_file(text, file, "score", "score")
    lm = apply_quantize(with_lora(load(model, threads), lora), quantize)
    options.apply_kv_type(lm, kv_type)
    window, stride = _cut(lm.model, window, stride, chunks)
    ids = lm.tokenizer.prompt(body)
    options.warn_unknown(lm.tokenizer, body, ids, lm.name)
    bos = ids[0] if chunks is not None and ids[0] in lm.tokenizer.special_ids() else None  # the tokenizer added one
    with Counted("scoring", "tokens", "打分", "个词元", zh) as step:
        hooks = pass_hooks(lm, ablate)
        result = run_score(lm.model, ids, window, stride, hooks, FAST, progress=step, chunks=chunks, bos=bos)
    window, stride = result.window, result.stride
    if chunks:
        chars, nbytes = _chunks_size(lm.tokenizer, ids, result.logprobs)
    else:
        chars, nbytes = _scored_size(lm.tokenizer, body, ids)
    figures = {
        "nats_per_token": result.nats_per_token,
        "perplexity": result.perplexity,
        "nats_per_char": result.nats / chars if chars else None,
        "nats_per_byte": result.nats / nbytes if nbytes else None,
        "bits_per_byte": result.nats / nbytes / math.log(2) if nbytes else None,
    }
    if as_json:
        texts = _token_texts(lm.tokenizer, ids)
        doc = {
            "model": lm.name,
            "tokens": [
                {"id": i, "text": t, "logprob": None if math.isnan(lp) else round(float(lp), 5)}
                for i, t, lp in zip(ids, texts, result.logprobs)
            ],
            **{k: (None if v is None else round(v, 6)) for k, v in figures.items()},
            "scored_tokens": result.scored,
            "chars": chars,
            "bytes": nbytes,
            "window": window,
            "stride": stride,
            "windows": result.windows,
            "chunks": chunks,
        }
        from .json import emit

        emit(doc)  # the one float policy of every --json (cli/json.py)
        return
    if show_text if show_text is not None else sys.stdout.isatty():
        _show_text(lm.tokenizer, ids, result.logprobs, zh)
    _summary(lm.name, result, figures, (chars, nbytes), chunks, zh)


def _cut(model, window: int | None, stride: int | None, chunks: int | None) -> tuple[int | None, int | None]:
    """--window/--stride checked against the model, or --chunks alone (it cuts the text its own way)."""
    from tfcli.engine.score import check_chunks, check_window

    if chunks is None:
        return check_window(model, window, stride)
    if window is not None or stride is not None:
        from tfcli.engine.errors import UsageError

        raise UsageError("--chunks cuts the text its own way", "leave out --window and --stride")
    check_chunks(model, chunks)
    return window, stride


def _summary(name: str, result, figures: dict, sizes: tuple[int, int], chunks: int | None, zh: bool) -> None:
    """The lines under the text: what was scored, and the loss per token, character and byte."""
    f, (chars, nbytes) = figures, sizes
    n, window, stride = result.windows, result.window, result.stride
    if zh:
        if chunks:
            how = f"{n:,} 个 {chunks:,} 词元的块，各取后一半，同 llama-perplexity -c {chunks}"
        else:
            how = "一个窗口" if n == 1 else f"{n:,} 个 {window:,} 词元的窗口，步长 {stride:,}"
        out.print(f"{name}：打分 {result.scored:,} 个词元（{how}）")
        out.print(f"  {f['nats_per_token']:.4f} nats/词元 · 困惑度 {f['perplexity']:,.2f}")
        if chars:
            out.print(f"  {f['nats_per_char']:.4f} nats/字符（{chars:,}）· {f['nats_per_byte']:.4f} nats/字节（{nbytes:,}）"
                      f"· {f['bits_per_byte']:.4f} bits/字节")
        return
    if chunks:
        how = f"{n:,} chunk{'s' if n != 1 else ''} of {chunks:,} tokens, their second halves"
        how += f", as llama-perplexity -c {chunks}"
    else:
        how = "one window" if n == 1 else f"{n:,} windows of {window:,} tokens, stride {stride:,}"
    out.print(f"{name}: {result.scored:,} tokens scored ({how})")
    out.print(f"  {f['nats_per_token']:.4f} nats/token · perplexity {f['perplexity']:,.2f}")
    if chars:
        out.print(f"  {f['nats_per_char']:.4f} nats/char ({chars:,}) · {f['nats_per_byte']:.4f} nats/byte ({nbytes:,})"
                  f" · {f['bits_per_byte']:.4f} bits/byte")


def _scored_size(tokenizer, text: str, ids: list[int]) -> tuple[int, int]:
    """Characters and UTF-8 bytes of the text the scored tokens spell: the whole text after a BOS,
    else the text after the first token (which is not predicted)."""
    first = "" if ids[0] in tokenizer.special_ids() else tokenizer.decode(ids[:1])
    rest = text[len(first) :] if first and text.startswith(first) else text
    return len(rest), len(rest.encode("utf-8"))


def _chunks_size(tokenizer, ids: list[int], logprobs) -> tuple[int, int]:
    """Characters and UTF-8 bytes of the tokens --chunks scored (each token's text as a stream decodes it)."""
    texts = [t for t, lp in zip(_token_texts(tokenizer, ids), logprobs) if not math.isnan(lp)]
    return sum(len(t) for t in texts), sum(len(t.encode("utf-8")) for t in texts)


def _token_texts(tokenizer, ids: list[int]) -> list[str]:
    """The text each token adds, decoded as a stream: a token that ends a character split over
    several tokens carries the character, the ones before it ''."""
    from tfcli.engine.tokenizer import TextStream

    stream = TextStream(tokenizer, skip_special_tokens=False)
    texts = [stream.push(i) for i in ids]
    texts[-1] += stream.flush()
    return texts


MARKED = 0.2  # without colour, a token the model gave less than this carries its probability


def _show_text(tokenizer, ids: list[int], logprobs, zh: bool = False) -> None:
    from rich.text import Text

    from .views.heatmap import uses_colour

    colour = uses_colour(out)
    body = Text()
    for piece, lp in zip(_token_texts(tokenizer, ids), logprobs):
        if not colour:  # NO_COLOR, a pipe: the number instead of the colour, on the surprising tokens
            p = math.exp(lp) if not math.isnan(lp) else None
            body.append(
                piece
                + (
                    f"[{p:.0%}]"
                    if p is not None and p < MARKED and p >= 0.005
                    else "[<1%]"
                    if p is not None and p < 0.005
                    else ""
                )
            )
            continue
        style = "dim" if math.isnan(lp) else next(colour for bound, colour, _ in SCALE if math.exp(lp) >= bound)
        body.append(piece, style=style)
    out.print(body, soft_wrap=True)  # the text's own line breaks, not the terminal's
    if not colour:
        if zh:
            from .views.prose import chinese

            chinese(out, f"词元后的 [p%]：模型给它的概率，低于 {MARKED:.0%} 时标出；没有标记的词元概率在 {MARKED:.0%} 以上（第一个不打分）")
        else:
            out.print(f"[p%] after a token: the probability the model gave it, when under {MARKED:.0%}; unmarked tokens"
                      f" had {MARKED:.0%} or more (the first is not scored)", markup=False)
        out.print()
        return
    legend = Text("词元概率：" if zh else "token probability: ")  # the whole legend fits 80 columns
    for _, colour, label in SCALE:
        legend.append(f" {label} ", style=f"black on {colour}")
        legend.append(" ")
    legend.append("暗色：不打分" if zh else "dim: not scored", style="dim")
    out.print(legend)
    out.print()
