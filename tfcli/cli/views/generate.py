"""What `tfcli generate` prints besides the text: the statistics line, the --show-probs tables
(one sample, or a batch side by side) and the texts of a batch. Drawing only: the command
(cli/generate.py) runs the engine and hands the steps here."""

from __future__ import annotations

import sys

from ..console import err, note


def labels(samplers, seed: int | None) -> list[str]:
    """'sample 2 · T=0.8 · seed 43': the settings that differ between samples, and the seed."""
    varying = [
        (name, attr, fmt)
        for name, attr, fmt in (("T", "temperature", "g"), ("top-k", "top_k", "d"), ("top-p", "top_p", "g"))
        if len({getattr(s.params, attr) for s in samplers}) > 1
    ]
    labels = []
    for i, s in enumerate(samplers):
        parts = [f"sample {i + 1}"] + [f"{name} {getattr(s.params, attr):{fmt}}" if name != "T" else f"T={s.params.temperature:g}" for name, attr, fmt in varying]
        if seed is not None:
            parts.append(f"seed {s.params.seed}")
        labels.append(" · ".join(parts))
    return labels


COLUMN_MIN = 22  # narrower columns than this wrap a text into a strip of a few words per line


def side_by_side(n: int, width: int) -> bool:
    """Whether n texts fit side by side in `width` columns: a table's n + 1 rules and a space each
    side of a column leave COLUMN_MIN or more for each text (three samples in 80 columns, not four)."""
    return n * (COLUMN_MIN + 3) + 1 <= width


def print_samples(texts: list[str], labels: list[str]) -> None:
    """The texts of a batch: side by side at a terminal with room for them, else (piped, or a narrow
    terminal) one after another, each under a '── label ──' line."""
    import shutil

    from ..console import out

    width = shutil.get_terminal_size((80, 24)).columns
    if sys.stdout.isatty() and side_by_side(len(texts), width):
        from rich.table import Table
        from rich.text import Text

        table = Table(show_lines=False, expand=True, padding=(0, 1))
        for label in labels:
            table.add_column(label, overflow="fold", ratio=1)
        table.add_row(*(Text(t) for t in texts))
        out.print(table)
        return
    for n, (label, t) in enumerate(zip(labels, texts)):
        sys.stdout.write(("\n" if n else "") + f"── {label} ──\n{t}\n")
    sys.stdout.flush()


def finish_samples(batch, labels: list[str], load_seconds: float, threads: int, quiet: bool) -> None:
    if quiet:
        return
    for label, run in zip(labels, batch.runs):
        st = run.stats
        speed = f"decode {st.decode_tps:,.1f} tok/s · " if st.decode_tps else ""
        note(f"{label}: {st.new_tokens} new · {speed}stopped: {st.stop_reason or 'interrupted'}")
    t = batch.totals
    note(
        f"{t.samples} samples in one batch · {_tokens(t.prompt_tokens, 'prompt token')} · {t.new_tokens} new in all · "
        f"prefill {t.prompt_tokens / t.prefill_seconds if t.prefill_seconds else 0:,.0f} tok/s · "
        + (f"decode {t.decode_tps:,.1f} tok/s (all samples) · " if t.decode_tps else "")
        + f"load {load_seconds:.2f} s · {threads} thread{'s' if threads != 1 else ''}"
    )


def _tokens(n: int, what: str) -> str:
    """'1 prompt token', '6 prompt tokens'."""
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def finish(stream, pieces: list[str], stats, load_seconds: float, threads: int, quiet: bool, lookup: bool = False, params=None) -> None:
    """The text held back (and its last newline) on `stream` (None: none), the statistics on stderr,
    with the seed the sample drew with (params.seed; none when greedy), so that it can be drawn again."""
    if stream is not None:
        if pieces:
            stream.write("".join(pieces))
        stream.write("\n")
        stream.flush()
    if not quiet:
        note(
            f"{_tokens(stats.prompt_tokens, 'prompt token')} · {stats.new_tokens} new · "
            f"prefill {stats.prefill_tps:,.0f} tok/s · "
            + (f"decode {stats.decode_tps:,.1f} tok/s · " if stats.new_tokens > 1 else "")
            + f"load {load_seconds:.2f} s · {threads} thread{'s' if threads != 1 else ''} · "
            + (f"context slid {stats.slides}× · " if stats.slides else "")
            + (f"lookup: {stats.accepted} of {stats.drafted} drafted tokens accepted · " if lookup else "")
            + f"stopped: {stats.stop_reason or 'interrupted'}"
            + (f" · seed {params.seed}" if params is not None and params.temperature != 0 and params.seed is not None else "")
        )


def filters(params, temperature: bool = True) -> str:
    """The knobs that change the distribution sampled from, as a column header: 'T=0.8, top-k 40, min-p 0.05'
    (without 'T=0.8' when not `temperature`)."""
    if params.temperature == 0:
        parts = ["greedy"]
    else:
        parts = [f"T={params.temperature:g}"] if temperature else []
        if params.top_k > 0:
            parts.append(f"top-k {params.top_k:,}")
        if params.top_p < 1:
            parts.append(f"top-p {params.top_p:g}")
        if params.min_p > 0:
            parts.append(f"min-p {params.min_p:g}")
    if params.repetition_penalty != 1 and params.repeat_last_n > 0:
        parts.append(f"repeat-penalty {params.repetition_penalty:g} over {params.repeat_last_n:,}")
    return ", ".join(parts)


def show_choice(tokenizer, step, index: int, sampler, top_n: int) -> None:
    """One step of --show-probs: the candidates, their probability under the model (temperature 1,
    no filters) and in the distribution actually sampled from, as bars. The chosen token is always
    a row: after the top N, below a '⋮', when it is not among them."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    choice = step.choice
    table = Table(box=None, show_header=index == 1, pad_edge=False, padding=(0, 1))
    table.add_column("", width=1)
    table.add_column("token", width=14, no_wrap=True, overflow="ellipsis")  # fixed, so the bars line up step after step
    table.add_column("model (T=1)", no_wrap=True)
    table.add_column(f"sampled ({filters(sampler.params)})")  # the header wraps over the bars' width when long
    for n, (tid, pm, pf) in enumerate(zip(choice.top_ids, choice.p_model, choice.p_final)):
        if n == top_n:  # the chosen token, from outside the top N
            table.add_row("", "⋮", "", "")
        mark = "▶" if tid == choice.token else "✗" if choice.allowed is not None and not choice.allowed[n] else ""
        table.add_row(mark, Text(_show_token(tokenizer, int(tid))), _bar(float(pm), "cyan"), _bar(float(pf), "magenta"))
    err.print(
        f"[bold]#{index}[/] chose [bold]{escape(_show_token(tokenizer, choice.token))}[/] "
        f"[dim]({choice.kept:,} candidate{'s' if choice.kept != 1 else ''} left after the filters)[/]"
    )
    if choice.allowed is not None:
        out_of_top = int((~choice.allowed[:top_n]).sum())
        err.print(f"[dim]  grammar: ruled out {choice.ruled_out:.1%} of the model's probability (✗: {out_of_top} of the top {min(top_n, len(choice.allowed))})[/]")
    err.print(table)


PANEL = 26  # one sample's candidates: the mark, the token (8), a bar (8) and "100.0%", a space between


def show_choices(tokenizer, steps, index: int, samplers, labels: list[str], top_n: int) -> None:
    """One step of --show-probs for a batch: each sample's candidates side by side, so that the
    same first distribution is seen at every temperature (later steps follow each sample's text).
    Panels that do not fit the width go on the next line; the knobs shared by every sample are
    said once, at the first step, and each panel is headed by what differs (its T)."""
    from rich.table import Table
    from rich.text import Text

    if index == 1:
        knobs = [filters(samplers[i].params, temperature=False) for i, _ in steps]
        if len(set(knobs)) == 1:
            err.print(f"[dim]bars: what each sample draws from, after {knobs[0]}[/]" if knobs[0] else "[dim]bars: what each sample draws from[/]")
        else:
            for (i, _), k in zip(steps, knobs):
                err.print(f"[dim]{labels[i].split(' · seed ')[0]}: {k or 'no filters'}[/]")
    per_line = max(1, (err.width + 1) // (PANEL + 1))
    for start in range(0, len(steps), per_line):
        grid = Table(box=None, show_header=True, pad_edge=False, padding=(0, 1, 0, 0), title=f"#{index}" if start == 0 else None, title_justify="left")
        cells = []
        for i, step in steps[start : start + per_line]:
            grid.add_column(labels[i].split(" · seed ")[0], no_wrap=True, width=PANEL)
            choice = step.choice
            inner = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1, 0, 0))
            inner.add_column("", width=1)
            inner.add_column("token", width=8, no_wrap=True, overflow="ellipsis")
            inner.add_column("p", no_wrap=True)
            for n, (tid, pf) in enumerate(zip(choice.top_ids, choice.p_final)):
                if n == top_n:
                    inner.add_row("", "⋮", "")
                mark = "▶" if tid == choice.token else "✗" if choice.allowed is not None and not choice.allowed[n] else ""
                inner.add_row(mark, Text(_show_token(tokenizer, int(tid))), _bar(float(pf), "magenta", width=8))
            cells.append(inner)
        grid.add_row(*cells)
        err.print(grid)


def _bar(p: float, colour: str, width: int = 20):
    from rich.text import Text

    filled = p * width
    full = int(filled)
    partial = " ▏▎▍▌▋▊▉"[int((filled - full) * 8)] if full < width else ""
    bar = Text("█" * full + partial.strip(), style=colour)
    bar.append(" " * (width - len(bar.plain)) + f" {p:6.1%}" if p < 0.9995 else " " * (width - len(bar.plain)) + "   100%", style="default")
    return bar


def _show_token(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id])
    return repr(text) if text and "\ufffd" not in text else f"<{tokenizer.piece(token_id)}>"
