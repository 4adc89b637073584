"""What `tfcli generate` prints besides the text: the statistics line, the --show-probs tables
(one sample, or a batch side by side) and the texts of a batch. Drawing only: the command
(cli/generate_run.py) runs the engine and hands the steps here."""

from __future__ import annotations

import sys

from ..console import err, note
from ..lang import say, zh

# Why a generation stopped (engine/generate.py's stop_reason, and the CLI's own), in Chinese.
STOPPED_ZH = {"eos": "结束符", "stop string": "停止文本", "max tokens": "达到 -n 的词元数", "grammar": "语法已完成",
              "context full": "上下文已满", "interrupted": "被中断"}  # fmt: skip


def stopped(reason: str | None) -> str:
    """'stopped: eos', or in Chinese '停止：结束符'."""
    reason = reason or "interrupted"
    return f"停止：{STOPPED_ZH.get(reason, reason)}" if zh() else f"stopped: {reason}"


def _threads(n: int) -> str:
    return f"{n} 个线程" if zh() else f"{n} thread{'s' if n != 1 else ''}"


def labels(samplers, seed: int | None) -> list[str]:
    """'sample 2 · T=0.8 · seed 43': the settings that differ between samples, and the seed (none
    for a greedy sample: it draws nothing)."""
    varying = [
        (name, attr, fmt)
        for name, attr, fmt in (("T", "temperature", "g"), ("top-k", "top_k", "d"), ("top-p", "top_p", "g"))
        if len({getattr(s.params, attr) for s in samplers}) > 1
    ]
    labels = []
    for i, s in enumerate(samplers):
        parts = [say(f"sample {i + 1}", f"样本 {i + 1}")]
        parts += [
            f"{name} {getattr(s.params, attr):{fmt}}" if name != "T" else f"T={s.params.temperature:g}"
            for name, attr, fmt in varying
        ]
        if seed is not None and s.params.temperature != 0:
            parts.append(f"{_SEED[zh()]} {s.params.seed}")
        labels.append(" · ".join(parts))
    return labels


_SEED = {False: "seed", True: "种子"}


def unseeded(label: str) -> str:
    """A sample's label without its seed ('sample 2 · T=1 · seed 4' -> 'sample 2 · T=1')."""
    return label.split(f" · {_SEED[zh()]} ")[0]


def identical(samplers) -> str | None:
    """The line that says greedy samples are one text (temperature 0 draws nothing), or None."""
    greedy = [s for s in samplers if s.params.temperature == 0]
    if len(greedy) < 2 or len({(s.params.top_k, s.params.top_p) for s in greedy}) > 1:
        return None
    return say(
        f"the {len(greedy)} greedy samples (T=0) are identical: greedy decoding draws nothing; give -t above 0 for "
        "different texts",
        f"{len(greedy)} 个贪心样本（T=0）完全相同：贪心解码不抽样；-t 大于 0 才得到不同的文本",
    )


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
    c = zh()
    for label, run in zip(labels, batch.runs):
        st = run.stats
        speed = (
            (f"解码 {st.decode_tps:,.1f} tok/s · " if c else f"decode {st.decode_tps:,.1f} tok/s · ")
            if st.decode_tps
            else ""
        )
        note(
            f"{label}{'：' if c else ': '}{st.new_tokens} {'个新词元' if c else 'new'} · {speed}{stopped(st.stop_reason)}"
        )
    t = batch.totals
    prefill = t.prompt_tokens / t.prefill_seconds if t.prefill_seconds else 0
    if c:
        note(
            f"{t.samples} 个样本一批解码 · 提示 {t.prompt_tokens:,} 个词元 · 共 {t.new_tokens} 个新词元 · 预填充 {prefill:,.0f} tok/s · "
            + (f"解码 {t.decode_tps:,.1f} tok/s（全部样本）· " if t.decode_tps else "")
            + f"加载 {load_seconds:.2f} s · {_threads(threads)}"
        )
        return
    note(
        f"{t.samples} samples in one batch · {_tokens(t.prompt_tokens, 'prompt token')} · {t.new_tokens} new in all · "
        f"prefill {prefill:,.0f} tok/s · "
        + (f"decode {t.decode_tps:,.1f} tok/s (all samples) · " if t.decode_tps else "")
        + f"load {load_seconds:.2f} s · {_threads(threads)}"
    )


def _tokens(n: int, what: str) -> str:
    """'1 prompt token', '6 prompt tokens'."""
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def finish(
    stream, pieces: list[str], stats, load_seconds: float, threads: int, quiet: bool, lookup: bool = False, params=None
) -> None:
    """The text held back (and its last newline) on `stream` (None: none), the statistics on stderr,
    with the seed the sample drew with (params.seed; none when greedy), so that it can be drawn again."""
    if stream is not None:
        if pieces:
            stream.write("".join(pieces))
        stream.write("\n")
        stream.flush()
    if quiet:
        return
    seeded = params is not None and params.temperature != 0 and params.seed is not None
    if zh():
        note(
            f"提示 {stats.prompt_tokens:,} 个词元 · 新 {stats.new_tokens} 个 · 预填充 {stats.prefill_tps:,.0f} tok/s · "
            + (f"解码 {stats.decode_tps:,.1f} tok/s · " if stats.new_tokens > 1 else "")
            + f"加载 {load_seconds:.2f} s · {_threads(threads)} · "
            + (f"上下文滑动 {stats.slides} 次 · " if stats.slides else "")
            + (f"查找解码：草拟 {stats.drafted} 个词元，接受 {stats.accepted} 个 · " if lookup else "")
            + stopped(stats.stop_reason)
            + (f" · 种子 {params.seed}" if seeded else "")
        )
        return
    note(
        f"{_tokens(stats.prompt_tokens, 'prompt token')} · {stats.new_tokens} new · "
        f"prefill {stats.prefill_tps:,.0f} tok/s · "
        + (f"decode {stats.decode_tps:,.1f} tok/s · " if stats.new_tokens > 1 else "")
        + f"load {load_seconds:.2f} s · {_threads(threads)} · "
        + (f"context slid {stats.slides}× · " if stats.slides else "")
        + (f"lookup: {stats.accepted} of {stats.drafted} drafted tokens accepted · " if lookup else "")
        + stopped(stats.stop_reason)
        + (f" · seed {params.seed}" if seeded else "")
    )


def filters(params, temperature: bool = True) -> str:
    """The knobs that change the distribution sampled from, as a column header: 'T=0.8, top-k 40, min-p 0.05'
    (without 'T=0.8' when not `temperature`)."""
    if params.temperature == 0:
        parts = [say("greedy", "贪心")]
    else:
        parts = [f"T={params.temperature:g}"] if temperature else []
        if params.top_k > 0:
            parts.append(f"top-k {params.top_k:,}")
        if params.top_p < 1:
            parts.append(f"top-p {params.top_p:g}")
        if params.min_p > 0:
            parts.append(f"min-p {params.min_p:g}")
    if params.repetition_penalty != 1 and params.repeat_last_n > 0:
        r, n = params.repetition_penalty, params.repeat_last_n
        parts.append(say(f"repeat-penalty {r:g} over {n:,}", f"重复惩罚 {r:g}（最近 {n:,} 个）"))
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
    # the token's column fixed, so the bars line up step after step; the last header wraps over the bars' width
    table.add_column(say("token", "词元"), width=14, no_wrap=True, overflow="ellipsis")
    table.add_column(say("model (T=1)", "模型（T=1）"), no_wrap=True)
    table.add_column(say(f"sampled ({filters(sampler.params)})", f"采样（{filters(sampler.params)}）"))
    for n, (tid, pm, pf) in enumerate(zip(choice.top_ids, choice.p_model, choice.p_final)):
        if n == top_n:  # the chosen token, from outside the top N
            table.add_row("", "⋮", "", "")
        mark = "▶" if tid == choice.token else "✗" if choice.allowed is not None and not choice.allowed[n] else ""
        table.add_row(mark, Text(_show_token(tokenizer, int(tid))), _bar(float(pm), "cyan"), _bar(float(pf), "magenta"))
    chosen, kept = escape(_show_token(tokenizer, choice.token)), choice.kept
    if zh():
        err.print(f"[bold]#{index}[/] 选了 [bold]{chosen}[/][dim]（过滤后剩 {kept:,} 个候选）[/]")
    else:
        err.print(
            f"[bold]#{index}[/] chose [bold]{chosen}[/] [dim]({kept:,} candidate{'s' if kept != 1 else ''} left "
            "after the filters)[/]"
        )
    if choice.allowed is not None:
        out_of_top, top = int((~choice.allowed[:top_n]).sum()), min(top_n, len(choice.allowed))
        said = say(
            f"grammar: ruled out {choice.ruled_out:.1%} of the model's probability (✗: {out_of_top} of the top {top})",
            f"语法：排除了模型 {choice.ruled_out:.1%} 的概率（✗：前 {top} 个中的 {out_of_top} 个）",
        )
        err.print(f"[dim]  {said}[/]")
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
            after = say(f", after {knobs[0]}", f"，经过 {knobs[0]} 之后") if knobs[0] else ""
            err.print(f"[dim]{say('bars: what each sample draws from', '条形：每个样本抽取的分布')}{after}[/]")
        else:
            for (i, _), k in zip(steps, knobs):
                err.print(f"[dim]{unseeded(labels[i])}: {k or say('no filters', '无过滤')}[/]")
    per_line = max(1, (err.width + 1) // (PANEL + 1))
    for start in range(0, len(steps), per_line):
        grid = Table(
            box=None,
            show_header=True,
            pad_edge=False,
            padding=(0, 1, 0, 0),
            title=f"#{index}" if start == 0 else None,
            title_justify="left",
        )
        cells = []
        for i, step in steps[start : start + per_line]:
            grid.add_column(unseeded(labels[i]), no_wrap=True, width=PANEL)
            choice = step.choice
            inner = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1, 0, 0))
            inner.add_column("", width=1)
            inner.add_column("token", width=8, no_wrap=True, overflow="ellipsis")
            inner.add_column("p", no_wrap=True)
            for n, (tid, pf) in enumerate(zip(choice.top_ids, choice.p_final)):
                if n == top_n:
                    inner.add_row("", "⋮", "")
                mark = (
                    "▶" if tid == choice.token else "✗" if choice.allowed is not None and not choice.allowed[n] else ""
                )
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
    bar.append(
        " " * (width - len(bar.plain)) + f" {p:6.1%}" if p < 0.9995 else " " * (width - len(bar.plain)) + "   100%",
        style="default",
    )
    return bar


def _show_token(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id])
    return repr(text) if text and "\ufffd" not in text else f"<{tokenizer.piece(token_id)}>"
