"""tfcli attn: the causal mask, a worked example, and a model's real attention patterns.

The command only reads its arguments, asks tfcli.analysis.attention (and through it the engine) for
the numbers, and hands them to views/attn.py to draw.
"""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options
from .console import out, warn


MAX_MASK_TOKENS = 1024  # a mask written out: 1024² = 1 M weights, about 20 MB as JSON, a 3,072-pixel PNG


class Fit(str, Enum):
    last = "last"
    first = "first"
    pool = "pool"


Block = options.block_option(str, "The block to draw: 0 to L-1, negative from the end (-1 = the last), or 'all'.")
Png = options.png_option("the heatmap(s)", " with token labels (Chinese ones too: a CJK font ships with tfcli; "
                                           "TFCLI_FONT picks another)")
Svg = options.svg_option("the heatmap(s)")


def attn(
    text: Annotated[
        Optional[str],
        typer.Argument(help="The text to run through the model ('-' reads stdin). With --show-mask, the text whose "
                            "tokens label the mask.", show_default=False),
    ] = None,
    model: options.Model = None,
    layer: Block = "0",
    head: Annotated[str, typer.Option(
        "--head", help="The head to draw, counting from 0, or 'all': small heatmaps side by side and what each head "
                       "mostly attends to.")] = "0",
    values: Annotated[bool, typer.Option(
        "--values",
        help="Print the weights as numbers (2 decimals, each row's sum at the end) instead of cells.")] = False,
    fit: Annotated[Fit, typer.Option(
        "--fit", help="When the tokens do not fit the terminal: show the last ones, the first ones, "
                      "or pool blocks of tokens.")] = Fit.last,
    show_mask: Annotated[bool, typer.Option(
        "--show-mask", help="Draw the mask for the tokens of TEXT: the scores with -inf where a token may not look, "
                            "then the weights after softmax. Without -m, one token per character (or per word if TEXT "
                            "has spaces); no model is run.")] = False,
    pattern: Annotated[
        Optional[str],
        typer.Option("--pattern",
                     help="The mask for --show-mask: causal, sliding:W (each token sees the last W) or banded:W "
                          "(blocks of W, the local attention of GPT-3). Implies --show-mask.",
                     show_default=False),
    ] = None,
    steps: Annotated[bool, typer.Option(
        "--steps", help="One head's attention on TEXT, step by step with its shapes and formulas: the token vectors X, "
                        "q, k and v (after RoPE), the scores q·k, ÷√Dh, the mask, the softmax weights, the context "
                        "vectors c_t = Σ w_ti v_i and the head's output. One --block and one --head.")] = False,
    demo: Annotated[bool, typer.Option(
        "--demo", help="A worked example with hand-set scores: scores, masked scores, softmax weights and the context "
                       "vector of one token, step by step.")] = False,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Many heads: how D splits into H heads of Dh, each head's context vector, the concatenation "
                          "and W_O, with the shapes of -m MODEL (read from its config.json), of "
                          "--preset, or of GPT-3.")] = False,
    preset: Annotated[Optional[str], typer.Option(
        "--preset", help="With --explain: a shape from 'tfcli params --list-presets' instead of a "
                         "model (default gpt3).", show_default=False)] = None,
    png: Png = None,
    svg: Svg = None,
    csv_path: Annotated[Optional[Path], typer.Option(
        "--csv", help="Also write the weights as CSV: block, head, query, key, their tokens, weight.",
        show_default=False, dir_okay=False)] = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
) -> None:
    """Show how each token looks at the tokens before it: the causal mask, and a model's real attention.

    A head's weights for token t are softmax(q_t . k_i / sqrt(d_k)) over the tokens i <= t; the
    future is set to -inf before softmax, so each row sums to 1 and the future gets exactly 0.
    The weights come from the same forward pass that generates text.

    Examples:

      tfcli attn --demo

      tfcli attn --explain -m tang --lang zh

      tfcli attn --steps "今天天气很好" -m tang --block 0 --head 0

      tfcli attn --show-mask "今天天气很好"

      tfcli attn --show-mask "the cat sat on the mat" --pattern sliding:3

      tfcli attn "To be, or not to be" --block 0 --head 0 --values

      tfcli attn "To be, or not to be" --block 2 --head all --png attn.png

      tfcli attn -m tang "今天天气很好" --block all --head all
    """
    from tfcli.engine.errors import UsageError

    if preset is not None and not explain:
        raise UsageError("--preset goes with --explain", "e.g. tfcli attn --explain --preset smollm2-135m")
    if steps:
        if explain or demo or show_mask or pattern is not None or csv_path or values:
            raise UsageError("--steps follows one head of a model over TEXT; it takes no --explain, --demo, "
                             "--show-mask, --pattern, --csv or --values")
        _steps(text, model, layer, head, as_json, png, svg, options.chinese(lang))
    elif explain:
        if demo or show_mask or pattern is not None or text is not None or png or svg or csv_path:
            raise UsageError("--explain shows the shapes of a model's heads; it takes no TEXT, --demo, --show-mask, "
                             "--png, --svg or --csv")
        _explain(model, preset, options.chinese(lang), as_json)
    elif demo:
        if text is not None:
            raise UsageError("--demo works its own example with hand-set scores ('the cat sat on the mat'); "
                             "it takes no TEXT",
                             f"for the real numbers of a model on your text: tfcli attn --steps {_quoted(text)}")
        if png or svg or csv_path:
            raise UsageError("--demo prints a worked example; "
                             "--png, --svg and --csv draw a mask or a model's attention")
        _demo(options.chinese(lang), as_json)
    elif show_mask or pattern is not None:
        if layer != "0" or head != "0":  # the defaults; a mask has no blocks or heads
            warn("--show-mask draws the mask, the same for every block and head: --block and --head are ignored")
        _mask(text, model, pattern or "causal", as_json, png, svg, csv_path, options.chinese(lang))
    else:
        _patterns(text, model, layer, head, values, fit, as_json, png, svg, csv_path, options.chinese(lang))


# --- the modes: a worked example, a model's heads, the mask, a model's patterns ---------------------


def _demo(zh: bool, as_json: bool) -> None:
    """--demo: one head's attention with hand-set scores, step by step, then a glimpse of many heads."""
    from tfcli.analysis.attention import worked_example

    from .views import attn as view

    if as_json:
        view.demo_json(worked_example())
        return
    from .views import multihead

    view.demo(worked_example(), zh)
    view._say("\n[bold]5. Many heads[/]: a model runs this many times side by side, each head with its own q, k and v.",
              "\n[bold]5. 多个头[/]：模型把这一过程并排运行许多次，"
              "每个头有自己的 q、k 和 v。", zh)
    multihead.explain(_head_split(None, None), zh, brief=True)
    view._say("[dim]tfcli attn --explain (-m MODEL) shows every step with the shapes of a real model.[/]",
              "[dim]tfcli attn --explain (-m MODEL) 用真实模型的形状展示每一步。[/]", zh)


def _quoted(text: str) -> str:
    import shlex

    from .views.attn import visible

    return shlex.quote(visible(text[:40]))


def _steps(text, model, layer_spec, head_spec, as_json, png, svg, zh: bool) -> None:
    """--steps: one head of one block over TEXT, every step of the formula (analysis.attention_steps)."""
    from tfcli.analysis.attention_steps import attention_steps
    from tfcli.engine.errors import UsageError

    from .inputs import load, text_ids
    from .views import attn as view
    from .views import attn_steps

    if text is None:
        raise UsageError("give the TEXT whose attention to follow",
                         'e.g. tfcli attn --steps "今天天气很好" -m tang --block 0 --head 0')
    for spec, flag in ((layer_spec, "--block"), (head_spec, "--head")):
        if spec.strip().lower() == "all":
            raise UsageError(f"--steps follows one head: {flag} takes a number, not 'all'", "e.g. --block 0 --head 0")
    text = _read_text(text, "follow")  # once: '-' reads stdin
    lm = load(model)
    cfg = lm.config
    (block,) = _pick(layer_spec, cfg.n_layer, "--block", "block", lm.name)
    (head,) = _pick(head_spec, cfg.n_head, "--head", "head", lm.name)
    ids = text_ids(lm, text)
    if len(ids) > MAX_MASK_TOKENS:  # [T, T] arrays as JSON or a picture grow as T²
        from tfcli.engine.errors import PromptError

        raise PromptError(f"--steps follows at most {MAX_MASK_TOKENS:,} tokens; the text has {len(ids):,}",
                          "shorten the text")
    s = attention_steps(lm.model, ids, block, head)
    labels = view.token_labels(lm.tokenizer, ids)
    if png or svg:
        heading = f"{lm.name} · block {block} · head {head} · {len(ids)} tokens"
        attn_steps.write_images(png, svg, heading, attn_steps.images_grid(s, labels))
    if as_json:
        from .json import emit

        emit(attn_steps.json_document(lm.name, cfg, lm.tokenizer, text, ids, labels, s))
        return
    attn_steps.steps(lm.name, cfg, labels, s, zh)


def _head_split(model, preset):
    """The HeadSplit of -m MODEL (its config.json only: no weights are read), of --preset, or of GPT-3."""
    from tfcli.analysis.attention import HeadSplit

    if model is not None:
        from tfcli.engine.families import load_config

        folder = options.model_folder(model)
        return HeadSplit(folder.name, load_config(folder / "config.json"))
    from tfcli.analysis.params import presets
    from tfcli.analysis.params.shape import ShapeError
    from tfcli.engine.errors import UsageError

    try:
        p = presets.get(preset or "gpt3")
    except ShapeError as e:
        raise UsageError(f"--preset: {e.message}", e.hint) from None
    return HeadSplit(p.title, p.config)


def _explain(model, preset, zh: bool, as_json: bool) -> None:
    """--explain: how D splits into heads, with the shapes of -m MODEL, of --preset, or of GPT-3."""
    from tfcli.engine.errors import UsageError

    from .views import multihead

    if model is not None and preset is not None:
        raise UsageError("give -m MODEL or --preset, not both")
    split = _head_split(model, preset)
    if as_json:
        multihead.explain_json(split, model or preset or "gpt3")
    else:
        multihead.explain(split, zh)


def _read_text(text: str | None, what: str) -> str:
    return options.read_text(text or "", "the text", f"give some text to {what}")


def _mask(text, model, spec, as_json, png, svg, csv_path, zh: bool = False) -> None:
    """--show-mask / --pattern: the mask for the tokens of TEXT, scores then weights; no model is run."""
    import numpy as np

    from tfcli.analysis.attention import masked_softmax, parse_pattern
    from tfcli.engine.errors import PromptError

    from .views import attn as view
    from .views import heatmap

    pat = parse_pattern(spec)
    text = "the cat sat on the mat" if text is None else _read_text(text, "draw the mask for")
    tok, ids = None, None
    if model is None:
        labels, how = view.offline_labels(text)
    else:
        from tfcli.engine.tokenizer import Tokenizer

        tok = Tokenizer(options.model_folder(model) / "tokenizer.json")
        ids = tok.prompt(text)
        options.warn_unknown(tok, text, ids, model)
        labels, how = view.token_labels(tok, ids), f"{model}'s tokenizer"
    if not labels:
        raise PromptError("the text has no tokens", "give some text to draw the mask for")
    n = len(labels)

    def weights(t_len):
        allowed = pat.mask(t_len)  # [T, T]
        # equal scores: only the mask shapes them
        return allowed, masked_softmax(np.zeros((t_len, t_len), dtype=np.float32), allowed)

    if png or svg or csv_path or as_json:
        if n > MAX_MASK_TOKENS:  # [T, T] weights, and JSON or a picture of them, grow as T²
            raise PromptError(
                f"--json, --png, --svg and --csv write a mask of at most {MAX_MASK_TOKENS:,} tokens; "
                f"the text has {n:,}",
                "shorten the text, or leave them out: the terminal view shows the first tokens",
            )
        allowed, w = weights(n)
        view.write_files(png, svg, csv_path, f"{pat.name} mask · {n} tokens",
                         [[view.panel("softmax(masked scores)", w, allowed, labels)]], w[None, None], [0], [0], labels)
        if as_json:
            view.mask_json(model, pat, labels, allowed, w, tok, ids)
            return
    shown = min(n, heatmap.columns_that_fit(out.width, labels, 5, extra=6))
    view.mask(pat, labels, how, *weights(shown), kept=pat.kept(n), zh=zh)


def _patterns(text, model, layer_spec, head_spec, values, fit, as_json, png, svg, csv_path, zh: bool = False) -> None:
    """The default: a model's real attention weights over TEXT, for the blocks and heads asked for."""
    from tfcli.analysis.attention import attention_weights, causal_mask
    from tfcli.engine.errors import UsageError
    from tfcli.engine.fast import FAST

    from .inputs import load, text_ids
    from .views import attn as view

    if text is None:
        raise UsageError("give the TEXT to run through the model",
                         'e.g. tfcli attn "To be, or not to be" --head all; or try --demo or --show-mask')
    lm = load(model)
    cfg = lm.config
    layers = _pick(layer_spec, cfg.n_layer, "--block", "block", lm.name)
    heads = _pick(head_spec, cfg.n_head, "--head", "head", lm.name)
    ids = text_ids(lm, text)

    weights = attention_weights(lm.model, ids, layers, FAST)[:, heads]  # [nL, nH, T, T]
    labels = view.token_labels(lm.tokenizer, ids)
    allowed = causal_mask(len(ids))  # [T, T]
    if png or svg or csv_path:
        panels = [view.panel(view.panel_title(l, h, layers, heads), weights[a, b], allowed, labels)
                  for a, l in enumerate(layers) for b, h in enumerate(heads)]
        # A row per block when both are 'all'; otherwise a roughly square grid.
        per_row = len(heads) if len(layers) > 1 and len(heads) > 1 else math.ceil(math.sqrt(len(panels)))
        grid = [panels[i : i + per_row] for i in range(0, len(panels), per_row)]
        heading = (f"{lm.name} · {view.which(layers, cfg.n_layer, 'block')} "
                   f"· {view.which(heads, cfg.n_head, 'head')} · {len(ids)} tokens")
        view.write_files(png, svg, csv_path, heading, grid, weights, layers, heads, labels)
    if as_json:
        view.patterns_json(lm.name, cfg, lm.tokenizer, text, ids, labels, layers, heads, weights)
        return
    view.patterns(lm.name, cfg, weights, allowed, labels, layers, heads, values, fit.value, zh)


def _pick(spec: str, n: int, flag: str, what: str, name: str) -> list[int]:
    from tfcli.engine.errors import UsageError

    if spec.strip().lower() == "all":
        return list(range(n))
    try:
        k = int(spec)
    except ValueError:
        k = None
    if k is not None and k < 0:  # from the end, as everywhere in tfcli (-1 = the last)
        k += n
    if k is None or not 0 <= k < n:
        raise UsageError(f"{flag} {spec} is not a {what} of {name}: it has {n} {what}s, 0 to {n - 1} "
                         "(-1 = the last, or 'all')")
    return [k]
