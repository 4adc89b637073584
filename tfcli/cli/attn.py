"""tfcli attn: the causal mask, a worked example, and a model's real attention patterns."""

from __future__ import annotations

import json
import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options
from .console import note, out, warn


class Fit(str, Enum):
    last = "last"
    first = "first"
    pool = "pool"


def attn(
    text: Annotated[
        Optional[str],
        typer.Argument(help="The text to run through the model ('-' reads stdin). With --show-mask, the text whose tokens label the mask.", show_default=False),
    ] = None,
    model: options.Model = None,
    layer: Annotated[str, typer.Option("--layer", "-l", help="The layer to draw, counting from 0, or 'all'.")] = "0",
    head: Annotated[str, typer.Option("--head", help="The head to draw, counting from 0, or 'all': small heatmaps side by side and what each head mostly attends to.")] = "0",
    values: Annotated[bool, typer.Option("--values", help="Print the weights as numbers (2 decimals, each row's sum at the end) instead of cells.")] = False,
    fit: Annotated[Fit, typer.Option("--fit", help="When the tokens do not fit the terminal: show the last ones, the first ones, or pool blocks of tokens.")] = Fit.last,
    show_mask: Annotated[bool, typer.Option("--show-mask", help="Draw the mask for the tokens of TEXT: the scores with -inf where a token may not look, then the weights after softmax. Without -m, one token per character (or per word if TEXT has spaces); no model is run.")] = False,
    pattern: Annotated[
        Optional[str],
        typer.Option("--pattern", help="The mask for --show-mask: causal, sliding:W (each token sees the last W) or banded:W (blocks of W, the local layers of GPT-3). Implies --show-mask.", show_default=False),
    ] = None,
    demo: Annotated[bool, typer.Option("--demo", help="A worked example with hand-set scores: scores, masked scores, softmax weights and the context vector of one token, step by step.")] = False,
    png: Annotated[Optional[Path], typer.Option("--png", help="Also write the heatmap(s) as a PNG image with token labels (needs Pillow).", show_default=False, dir_okay=False)] = None,
    svg: Annotated[Optional[Path], typer.Option("--svg", help="Also write the heatmap(s) as an SVG image.", show_default=False, dir_okay=False)] = None,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", help="Also write the weights as CSV: layer, head, query, key, their tokens, weight.", show_default=False, dir_okay=False)] = None,
    as_json: options.Json = False,
) -> None:
    """Show how each token looks at the tokens before it: the causal mask, and a model's real attention.

    A head's weights for token t are softmax(q_t . k_i / sqrt(d_k)) over the tokens i <= t; the
    future is set to -inf before softmax, so each row sums to 1 and the future gets exactly 0.
    The weights come from the same forward pass that generates text.

    Examples:

      tfcli attn --demo

      tfcli attn --show-mask "今天天气很好"

      tfcli attn --show-mask "the cat sat on the mat" --pattern sliding:3

      tfcli attn "To be, or not to be" --layer 0 --head 0 --values

      tfcli attn "To be, or not to be" --layer 2 --head all --png attn.png

      tfcli attn -m tang "今天天气很好" --layer all --head all
    """
    from tfcli.engine.errors import UsageError

    if demo:
        if png or svg or csv_path:
            raise UsageError("--demo prints a worked example; --png, --svg and --csv draw a mask or a model's attention")
        _demo(as_json)
    elif show_mask or pattern is not None:
        _mask(text, model, pattern or "causal", as_json, png, svg, csv_path)
    else:
        _patterns(text, model, layer, head, values, fit, as_json, png, svg, csv_path)


# --- tokens and their labels ------------------------------------------------------------------

_SUPERSCRIPTS = "¹²³⁴"  # the ones CJK fonts have too
_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "→", "\r": "␍"}


def visible(s: str) -> str:
    """A token's text with whitespace and control characters made visible, for a label."""
    return "".join(_VISIBLE.get(c, c if c.isprintable() else f"\\x{ord(c):02x}") for c in s)


def token_labels(tokenizer, ids: list[int]) -> list[str]:
    """One label per token: its text, made visible.

    With byte-level BPE a character can be split over several tokens (a Chinese character is three
    UTF-8 bytes), and each piece alone decodes to U+FFFD. Such tokens are grouped until their text
    is whole again, and each is labelled with the character it belongs to and its place in it: 今¹ 今² 今³.
    """
    labels: list[str] = []
    i = 0
    while i < len(ids):
        j, text = i + 1, tokenizer.decode(ids[i : i + 1])
        if "\ufffd" in text:
            for k in range(i + 2, min(i + 8, len(ids)) + 1):
                whole = tokenizer.decode(ids[i:k])
                if "\ufffd" not in whole:
                    j, text = k, whole
                    break
        if j - i == 1:
            labels.append(visible(text) or f"<{tokenizer.piece(ids[i])}>")
        else:
            labels += _part_labels(tokenizer, ids[i:j], text)
        i = j
    return labels


def _part_labels(tokenizer, group: list[int], text: str) -> list[str]:
    """Labels for tokens that only together spell `text`: each names the character it starts in
    (and any it completes), numbered when that character spans several tokens."""
    done = [len(tokenizer.decode(group[: k + 1]).rstrip("\ufffd")) for k in range(len(group))]  # whole characters so far
    first = [0] + done[:-1]  # the character each token starts in
    labels = []
    for k, a in enumerate(first):
        label = visible(text[a : max(done[k], a + 1)])
        if first.count(a) > 1:
            n = first[:k].count(a)
            label += _SUPERSCRIPTS[n] if n < len(_SUPERSCRIPTS) else f"#{n + 1}"
        labels.append(label)
    return labels


def _offline_tokens(text: str) -> tuple[list[str], str]:
    """Tokens without a model: words if the text has spaces, else characters (Chinese has no spaces)."""
    if any(c.isspace() for c in text.strip()):
        return text.split(), "one token per word"
    return [visible(c) for c in text], "one token per character"


def _read_text(text: str | None, what: str) -> str:
    from .options import read_text

    return read_text(text or "", "the text", f"give some text to {what}")


# --- the worked example -----------------------------------------------------------------------


def _demo(as_json: bool) -> None:
    import numpy as np
    from rich.table import Table

    from tfcli.analysis.attention import worked_example

    from . import heatmap

    ex = worked_example()
    t, tokens = ex.row, ex.tokens
    w, masked = ex.weights, ex.masked
    c = ex.context(t)
    if as_json:
        finite = lambda a: [[None if not np.isfinite(x) else float(x) for x in r] for r in a]  # noqa: E731
        print(json.dumps({
            "tokens": tokens, "scores": ex.scores.tolist(), "masked_scores": finite(masked), "weights": w.tolist(),
            "values": ex.values.tolist(), "value_dims": ex.value_dims, "row": t, "context": c.tolist(),
        }, ensure_ascii=False))  # fmt: skip
        return
    colour = heatmap.uses_colour(out)
    everything = np.ones_like(ex.allowed)
    out.print(f"[bold]Attention, worked by hand[/]: [italic]{' '.join(tokens)}[/] ({len(tokens)} tokens)\n")
    out.print("[bold]1. Scores[/] s_ti = q_t · k_i / √d_k: how well token t's query matches token i's key (set by hand here).")
    out.print(heatmap.numbers(ex.scores, everything, tokens, tokens, False, fmt="{:.1f}", row_sums=False))
    out.print("\n[bold]2. The causal mask[/] sets the future (i > t) to -inf, [italic]before[/] softmax.")
    out.print(heatmap.numbers(masked, ex.allowed, tokens, tokens, False, masked_as="-inf", fmt="{:.1f}", row_sums=False, masked_style="red"))
    out.print("\n[bold]3. Softmax[/] of each row: e^s / Σ e^s. e^-inf = 0, so the future gets exactly 0 and each row still sums to 1 (Σ).")
    out.print(heatmap.numbers(w, ex.allowed, tokens, tokens, colour))

    out.print(f"\n[bold]4. One row, step by step[/]: token {t} [bold]{tokens[t]!r}[/] mixes the value vectors x_i of the tokens it may see.")
    out.print(f"[dim]Each x_i is ({', '.join(ex.value_dims)}), set by hand.[/]")
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_footer=True)
    exps = ex.exps(t)
    table.add_column("i", justify="right")
    table.add_column("token", footer="Σ")
    table.add_column("score", justify="right")
    table.add_column("masked", justify="right")
    table.add_column("e^(s-max)", justify="right", footer=f"{exps.sum():.3f}")
    table.add_column("weight w", justify="right", footer=f"{w[t].sum():.3f}")
    table.add_column("x_i", footer="c =")
    table.add_column("w · x_i", footer=_vec(c), footer_style="bold")
    for i, tok in enumerate(tokens):
        future = i > t
        table.add_row(
            str(i), tok, f"{ex.scores[t, i]:.1f}", "-inf" if future else f"{masked[t, i]:.1f}",
            f"{exps[i]:.3f}", f"{w[t, i]:.3f}", _vec(ex.values[i], 1), _vec(w[t, i] * ex.values[i]),
            style="dim" if future else None,
        )  # fmt: skip
    out.print(table)
    leak = ex.unmasked_weights(t)
    out.print(
        f"\nc_{t} = Σ_i w_{t}i x_i = {_vec(c)}: {tokens[t]!r} now carries mostly {tokens[int(w[t].argmax())]!r} "
        f"({w[t].max():.0%} of its weight). Without the mask, {tokens[int(leak[t + 1:].argmax()) + t + 1]!r} from the future "
        f"would have taken {leak[t + 1:].max():.0%}: at training time the model would read the answer it must predict."
    )
    out.print("[dim]In a model, q, k and the values come from learned matrices (x W_Q, x W_K, x W_V); see 'tfcli attn TEXT' for real weights.[/]")


def _vec(v, digits: int = 2) -> str:
    return "[" + " ".join(f"{x:.{digits}f}" for x in v) + "]"


# --- masks ------------------------------------------------------------------------------------


def _mask(text, model, spec, as_json, png, svg, csv_path) -> None:
    import numpy as np

    from tfcli.analysis.attention import masked_softmax, parse_pattern
    from tfcli.engine.errors import PromptError

    from . import heatmap

    pat = parse_pattern(spec)
    text = "the cat sat on the mat" if text is None else _read_text(text, "draw the mask for")
    if model is None:
        labels, how = _offline_tokens(text)
    else:
        from tfcli.engine.tokenizer import Tokenizer

        tok = Tokenizer(options.model_folder(model) / "tokenizer.json")
        labels, how = token_labels(tok, tok.prompt(text)), f"{model}'s tokenizer"
    if not labels:
        raise PromptError("the text has no tokens", "give some text to draw the mask for")
    n = len(labels)
    allowed = pat.mask(n)  # [T, T]
    scores = np.zeros((n, n), dtype=np.float32)  # all equal, so that only the mask shapes the weights
    w = masked_softmax(scores, allowed)  # [T, T]
    _write_files(png, svg, csv_path, f"{pat.name} mask · {n} tokens", [[_panel("softmax(masked scores)", w, allowed, labels)]], w[None, None], [0], [0], labels)
    if as_json:
        print(json.dumps({"pattern": pat.name, "tokens": labels, "allowed": allowed.tolist(), "weights": w.tolist()}, ensure_ascii=False))
        return

    colour = heatmap.uses_colour(out)
    shown = min(n, heatmap.columns_that_fit(out.width, labels, 5, extra=6))
    out.print(f"[bold]Mask: {pat.name}[/] — {pat.describe()}")
    out.print(f"[dim]{n} tokens, {how}.[/]")
    if shown < n:
        out.print(f"[dim]Showing the first {shown} of {n} tokens: the pattern goes on the same way (--png draws them all).[/]")
    cut = slice(0, shown)
    sub_labels = labels[cut]
    out.print("\n[bold]1. Scores[/] q·k/√d_k with the mask applied: -inf where a token may not look. All scores are 0 here, so only the mask shapes the weights.")
    out.print(heatmap.numbers(np.where(allowed, scores, -np.inf)[cut, cut], allowed[cut, cut], sub_labels, sub_labels, False, masked_as="-inf", fmt="{:g}", row_sums=False, masked_style="red"))
    out.print("\n[bold]2. Softmax of each row[/]: e^-inf = 0, so the masked places get exactly 0 and each row still sums to 1 (Σ).")
    out.print(heatmap.numbers(w[cut, cut], allowed[cut, cut], sub_labels, sub_labels, colour))
    kept = int(allowed.sum())
    far = 2048
    this = "" if pat.kind == "causal" else f", {pat.name} {_count(int(pat.mask(far).sum()))}"
    out.print(
        f"\n[bold]Cost[/]: this mask keeps {kept} of the {n}×{n} = {n * n} scores ({kept / (n * n):.0%}). "
        f"At {far:,} tokens: all pairs {_count(far * far)} scores, causal {_count(far * (far + 1) // 2)}{this}."
    )
    if pat.kind == "causal":
        out.print("[dim]The mask only removes scores; the ones it keeps still grow as T², which is what sliding:W and banded:W avoid.[/]")


def _count(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.1f} K" if n >= 1e3 else str(n)


# --- a model's attention ----------------------------------------------------------------------


def _patterns(text, model, layer_spec, head_spec, values, fit, as_json, png, svg, csv_path) -> None:
    from tfcli.analysis.attention import causal_mask
    from tfcli.engine.errors import PromptError, UsageError

    if text is None:
        raise UsageError("give the TEXT to run through the model", 'e.g. tfcli attn "To be, or not to be" --head all; or try --demo or --show-mask')
    text = _read_text(text, "run through the model")
    options.apply_threads(None)  # only the idle cores: busy ones stall BLAS threads (engine/threads.py)
    lm = options.load_model(model)
    for w in lm.warnings:
        warn(w)
    cfg = lm.config
    layers = _pick(layer_spec, cfg.n_layer, "--layer", "layer", lm.name)
    heads = _pick(head_spec, cfg.n_head, "--head", "head", lm.name)
    ids = lm.tokenizer.prompt(text)  # what the model sees, a BOS included where the tokenizer adds one
    if not ids:
        raise PromptError("the text encodes to no tokens", "give some text to run through the model")
    if len(ids) > cfg.n_ctx:
        raise PromptError(f"the text is {len(ids)} tokens but {lm.name}'s context is {cfg.n_ctx}", "shorten it")

    weights = attention_weights(lm.model, ids, layers)[:, heads]  # [nL, nH, T, T]
    labels = token_labels(lm.tokenizer, ids)
    t_len = len(ids)
    allowed = causal_mask(t_len)
    panels = [_panel(_title(l, h, layers, heads), weights[a, b], allowed, labels) for a, l in enumerate(layers) for b, h in enumerate(heads)]
    # A row per layer when both are 'all'; otherwise a roughly square grid.
    per_row = len(heads) if len(layers) > 1 and len(heads) > 1 else math.ceil(math.sqrt(len(panels)))
    grid = [panels[i : i + per_row] for i in range(0, len(panels), per_row)]
    heading = f"{lm.name} · {_which(layers, cfg.n_layer, 'layer')} · {_which(heads, cfg.n_head, 'head')} · {t_len} tokens"
    _write_files(png, svg, csv_path, heading, grid, weights, layers, heads, labels)
    if as_json:
        print(json.dumps({
            "model": lm.name, "text": text,
            "tokens": [{"position": i, "id": int(t), "label": s} for i, (t, s) in enumerate(zip(ids, labels))],
            "layers": layers, "heads": heads, "shape": list(weights.shape), "weights": weights.tolist(),
        }, ensure_ascii=False))  # fmt: skip
        return
    _terminal_view(lm.name, cfg, weights, allowed, labels, layers, heads, values, fit.value)


def attention_weights(model, ids: list[int], layers: list[int]):
    """Run ids through the model from an empty cache -> weights [len(layers), H, T, T]."""
    import numpy as np

    from tfcli.engine.errors import ResourceError
    from tfcli.engine.memory import available_bytes, human_bytes

    need = len(layers) * model.config.n_head * len(ids) ** 2 * 4  # float32, kept until drawn
    avail = available_bytes()
    if avail is not None and need > avail // 2:
        raise ResourceError(
            f"the attention weights of {len(layers)} layer(s) for {len(ids)} tokens would need {human_bytes(need)} "
            f"of the {human_bytes(avail)} of memory available",
            "pick one --layer, or use a shorter text",
        )
    from tfcli.engine.inspect import Recorder

    rec = Recorder(attention=True, layers=layers)  # only these layers: all of a deep model could take gigabytes
    model.forward(np.asarray(ids), model.new_cache(len(ids)), record=rec)
    return np.stack([rec.attn[i] for i in layers])  # [len(layers), H, T, T]


def _pick(spec: str, n: int, flag: str, what: str, name: str) -> list[int]:
    from tfcli.engine.errors import UsageError

    if spec.strip().lower() == "all":
        return list(range(n))
    try:
        k = int(spec)
    except ValueError:
        k = None
    if k is None or not 0 <= k < n:
        raise UsageError(f"{flag} {spec} is not a {what} of {name}: it has {n} {what}s, 0 to {n - 1} (or 'all')")
    return [k]


def _which(picked: list[int], n: int, what: str) -> str:
    return f"all {n} {what}s" if len(picked) > 1 else f"{what} {picked[0]} of {n}"


def _title(layer: int, head: int, layers, heads) -> str:
    if len(layers) > 1 and len(heads) > 1:
        return f"L{layer} H{head}"
    return f"layer {layer}" if len(layers) > 1 else f"head {head}"


def _panel(title, w, allowed, labels):
    from .images import Panel

    return Panel(title, w, allowed, labels, labels)


def _terminal_view(name, cfg, weights, allowed, labels, layers, heads, values, how) -> None:
    from tfcli.analysis.attention import fit as fit_cells
    from tfcli.analysis.attention import summarize

    from . import heatmap

    colour = heatmap.uses_colour(out)
    t_len = len(labels)
    summaries = [summarize(weights[a, b], l, h) for a, l in enumerate(layers) for b, h in enumerate(heads)]

    def fitted(w, n):
        """(w, allowed, row/column labels, a note) for at most n tokens."""
        w2, allowed2, groups = fit_cells(w, allowed, n, how)
        if len(groups) == t_len:
            return w2, allowed2, labels, None
        if how == "pool":
            shown = [labels[g.start] if len(g) == 1 else f"{g.start}-{g.stop - 1}" for g in groups]
            msg = f"{t_len} tokens pooled into {len(groups)} blocks (positions shown): rows averaged, columns summed, so rows still sum to 1"
        else:
            shown = [labels[g.start] for g in groups]
            msg = f"showing the {how} {len(groups)} of {t_len} tokens" + (", so the rows miss their weight on earlier tokens" if how == "last" else "")
        return w2, allowed2, shown, msg + " (--fit last|first|pool; --png draws them all)"

    single = len(layers) == 1 and len(heads) == 1
    if single or values:
        for a, l in enumerate(layers):
            for b, h in enumerate(heads):
                width = 5 if values else 2
                n = heatmap.columns_that_fit(out.width, labels, width, extra=6 if values else 0)
                w, al, shown, msg = fitted(weights[a, b], n)
                out.print(f"[bold]{name}[/] · layer {l} of {cfg.n_layer} · head {h} of {cfg.n_head} · {t_len} tokens")
                if msg:
                    out.print(f"[dim]{msg}.[/]")
                out.print(heatmap.numbers(w, al, shown, shown, colour) if values else heatmap.heatmap(w, al, shown, shown, colour))
                if not values:
                    out.print(heatmap.legend(colour))
                else:
                    out.print("[dim]Each row is one token looking back; it sums to 1 (Σ). 0 = masked (the future).[/]")
                if single:
                    s = summaries[0]
                    out.print(
                        f"Rows are queries, columns the keys they look at. Most attention goes to {labels[s.top_key]!r} (#{s.top_key}, "
                        f"{s.top_share:.0%} of all); on average {_pct(s.to_first)} to the first token, {_pct(s.to_previous)} to the "
                        f"previous one, {_pct(s.to_self)} to itself."
                    )
                out.print()
        if single:
            return
    else:
        _thumbnails(weights, labels, layers, heads, colour, fitted)
    _summary_table(summaries, labels)


def _thumbnails(weights, labels, layers, heads, colour, fitted) -> None:
    from . import heatmap

    gap = 3
    n = min(len(labels), max(4, (out.width - gap) // 4))  # cells of two characters, at most half the width a panel
    panels = []
    note_shown = None
    for a, l in enumerate(layers):
        for b, h in enumerate(heads):
            w, al, _, msg = fitted(weights[a, b], n)
            note_shown = note_shown or msg
            panels.append((_title(l, h, layers, heads), heatmap.thumbnail(w, al, colour)))
    per_line = max(1, (out.width + gap) // (n * 2 + gap))
    rows = [panels[i : i + len(heads)] for i in range(0, len(panels), len(heads))] if len(heads) > 1 else [panels]
    out.print(f"[dim]Each panel: rows are queries, columns keys, {len(labels)} tokens from {labels[0]!r} to {labels[-1]!r}.[/]")
    if note_shown:
        out.print(f"[dim]{note_shown}.[/]")
    for row in rows:
        for i in range(0, len(row), per_line):
            out.print(heatmap.side_by_side(row[i : i + per_line], n, gap))
            out.print()
    out.print(heatmap.legend(colour))


def _summary_table(summaries, labels) -> None:
    from rich.table import Table

    from .heatmap import clip

    table = Table(box=None, padding=(0, 1), pad_edge=False, title="What each head attends to", title_justify="left")
    for col in ("layer", "head", "top token", "share", "first", "prev", "self", "bits", "mostly"):
        table.add_column(col, justify="left" if col in ("top token", "mostly") else "right", no_wrap=True)
    for s in summaries:
        table.add_row(
            str(s.layer), str(s.head), f"{clip(labels[s.top_key], 8)} #{s.top_key}", f"{s.top_share:.0%}",
            _pct(s.to_first), _pct(s.to_previous), _pct(s.to_self), f"{s.entropy:.2f}", s.kind,
        )  # fmt: skip
    out.print(table)
    out.print(
        "[dim]top token: the one receiving the largest share of all attention. first, prev, self: mean weight that "
        "tokens 1..T-1 give the first token, the one before them, themselves. bits: mean entropy of a row (0 = all on one token).[/]"
    )


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0%}"


# --- files ------------------------------------------------------------------------------------


def _write_files(png, svg, csv_path, heading, grid, weights, layers, heads, labels) -> None:
    """--png, --svg, --csv: the image(s) of the panels in `grid`, the weights [nL, nH, T, T] as rows."""
    from . import images

    if png or svg:
        drawing = images.layout(grid, heading)
        if png:
            font = images.find_font(images.needs_cjk_font(labels + [heading]))
            images.write_png(png, drawing, font)
            note(f"wrote {png} ({drawing.width}×{drawing.height} px)")
        if svg:
            images.write_svg(svg, drawing)
            note(f"wrote {svg} ({drawing.width}×{drawing.height} px)")
    if csv_path:
        import csv

        try:
            with open(csv_path, "w", newline="", encoding="utf-8") as f:
                rows = csv.writer(f)
                rows.writerow(["layer", "head", "query", "key", "query_token", "key_token", "weight"])
                for a, l in enumerate(layers):
                    for b, h in enumerate(heads):
                        for q, row in enumerate(weights[a, b]):
                            rows.writerows([l, h, q, k, labels[q], labels[k], f"{x:.9g}"] for k, x in enumerate(row))
        except OSError as e:
            from tfcli.engine.errors import TfcliError

            raise TfcliError(f"cannot write {csv_path}: {e.strerror or e}") from None
        note(f"wrote {csv_path} ({weights.size:,} weights)")
