"""tfcli lens: what the model would predict at each residual index (the logit lens), and one token's
hidden state in several contexts (--compare)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .console import note, out, warn
from .inputs import load, pick_position, text_ids
from .experiment import AblateOption, pass_hooks
from .json import emit  # the one float policy of every --json


Top = options.top_option("How many tokens --position shows per residual index (and --json per position).")
Png = options.png_option("the grid", " (needs Pillow)")
Svg = options.svg_option("the grid")


def lens(
    texts: Annotated[Optional[list[str]], typer.Argument(
        help="The text to look through ('-' reads stdin); with --compare, two or more texts.",
        show_default=False)] = None,
    file: options.TextFile = None,
    model: options.Model = None,
    position: Annotated[Optional[int], typer.Option(
        "--position", "-p", help="Show the top tokens of every residual index for this position (0 = the first "
                                 "token, -1 = the last).", show_default=False)] = None,
    top: Top = 5,
    compare: Annotated[bool, typer.Option(
        "--compare", help="Follow the LAST token of each text through the blocks: how alike its hidden states are "
                          "between the texts, how far each moved from the bare token's embedding, and "
                          "what the lens reads.")] = False,
    first: Annotated[bool, typer.Option(
        "--first", help="When the positions do not fit the terminal, show the first ones "
                        "(default: the last ones).")] = False,
    positions: Annotated[Optional[str], typer.Option(
        "--positions", help="Read only these positions, START:END as in Python (0:100 the first hundred, -50: the last "
                            "fifty): a long text's lens costs (L+1) unembeddings per position.",
                            show_default=False)] = None,
    png: Png = None,
    svg: Svg = None,
    lang: options.LangOption = None,
    as_json: options.Json = False,
    ablate: AblateOption = None,
) -> None:
    """The logit lens: at each residual index, what would the model predict if it stopped there?

    The residual stream h at each index goes through the model's own final norm and unembedding,
    softmax(unembed(final_norm(h))), the same step that turns the last index into the next token.
    Residual index 0 is the embeddings, index i the stream before block i (after block i-1); the
    last, L, is the model's real prediction. One forward pass records every index.

    Examples:

      tfcli lens "The Eiffel Tower is in the city of" -m smollm2

      tfcli lens "The Eiffel Tower is in the city of" -m smollm2 --position -1

      tfcli lens --compare "The Tower" "The Eiffel Tower" "The Miniature Eiffel Tower" -m smollm2

      tfcli lens -m tang "今天天气很好" --lang zh

      tfcli lens --file notes.txt --positions -50:
    """
    from tfcli.engine.errors import UsageError


    from .inputs import text_or_file

    zh = options.chinese(lang)
    options.check_top(top)
    texts = texts or []
    if compare:
        if file is not None:
            raise UsageError("--compare takes its texts on the command line, not --file")
        if len(texts) < 2:
            raise UsageError("--compare needs two or more texts",
                             'e.g. tfcli lens --compare "The Tower" "The Eiffel Tower" "The Miniature Eiffel Tower"')
        if position is not None or png or svg or positions is not None:
            raise UsageError("--compare follows each text's last token; --position, --positions, --png and --svg "
                             "belong to the lens of one text")
        if len(texts) > MAX_COMPARE:
            raise UsageError(f"--compare takes at most {MAX_COMPARE} texts, not {len(texts):,}",
                             "each is named by a letter, A to Z; compare fewer")
        _compare(texts, model, top, zh, as_json, ablate)
        return
    if len(texts) > 1:
        raise UsageError(f"give one TEXT (got {len(texts)}); to compare texts, add --compare",
                         "quote a text that has spaces")
    if positions is not None and position is not None:
        raise UsageError("--position shows one position and --positions a range: give one of them")
    _lens(text_or_file(texts[0] if texts else None, file, "lens"), model, position, top, first, png, svg, zh,
          as_json, ablate, positions)


MAX_COMPARE = 26  # texts of --compare: each is named by a letter, A to Z, in its tables


# --- the lens of one text ---------------------------------------------------------------------


def _range(spec: str, t_len: int) -> list[int]:
    """--positions START:END (Python's slice of the positions; either end may be left out)."""
    from tfcli.engine.errors import UsageError, shown

    start, sep, end = spec.partition(":")
    try:
        if not sep:
            raise ValueError
        a, b = (int(x) if x.strip() else None for x in (start, end))
    except ValueError:
        raise UsageError(f"--positions {shown(spec, 60)} is not START:END",
                         "e.g. --positions 0:100, or -50: for the last fifty") from None
    picked = list(range(t_len))[slice(a, b)]
    if not picked:
        raise UsageError(f"--positions {shown(spec, 60)} holds none of the text's {t_len:,} positions",
                         "positions run from 0 to the number of tokens - 1")
    return picked


LONG_SECONDS = 10  # a lens estimated to take longer says so first, and shows its progress


def _lens(text, model, position, top, first, png, svg, zh, as_json, ablate=None, positions=None) -> None:
    from tfcli.analysis.lens import logit_lens, residual_stream
    from tfcli.engine.fast import FAST

    from .views.attn import token_labels
    from .views import lens as view
    from .views.inside import token_str

    lm = load(model)
    ids = text_ids(lm, text, read=True)
    t_len = len(ids)
    p = None if position is None else pick_position(position, t_len)
    # The positions to read: the lens costs (L+1) products with the [D, V] unembedding per
    # position, far more than the forward pass, so the terminal grid reads only the columns it shows.
    asked = _range(positions, t_len) if positions is not None else list(range(t_len))
    shown = asked
    fit = max(1, (out.width - 5) // view.CELL)
    if fit < len(shown):
        shown = shown[:fit] if first else shown[-fit:]
    sel = asked if (png or svg or (as_json and p is None)) else [p] if p is not None else shown
    col = {t: j for j, t in enumerate(sel)}
    k = top if (p is not None or as_json) else 1
    progress = _estimate(lm, len(sel), k)  # before the pass: a lens past memory is refused, a long one says so
    hidden = residual_stream(lm.model, ids, pass_hooks(lm, ablate), FAST)  # one pass: [L+1] x [T, D]
    with progress as step:
        result = logit_lens(lm.model, [h[sel] for h in hidden], k=k, progress=step, run=FAST)  # [L+1, len(sel), k]
    tok = lm.tokenizer
    labels = token_labels(tok, ids)
    names = [[[token_str(tok, i) for i in row] for row in layer] for layer in result.ids.tolist()]  # [L+1][len(sel)][k]
    firsts = [[c[0] for c in row] for row in names]  # [L+1][len(sel)]
    n_layers = len(hidden)
    if png or svg:
        _write_images(png, svg, f"{lm.name} · logit lens · {t_len} tokens", result.probs[:, :, 0], labels, firsts)
    if as_json:
        _lens_json(lm, ids, result, sel if p is None else [p], col, k)
        return
    if zh:
        head = (f"[bold]{lm.name}[/] · 逻辑透镜 · {n_layers - 1} 个块，"
                f"残差序号 0-{n_layers - 1} · {t_len} 个词元")
    else:
        head = (f"[bold]{lm.name}[/] · logit lens · {n_layers - 1} blocks, "
                f"residual indices 0-{n_layers - 1} · {t_len} tokens")
    if p is not None:
        _position_view(head, result, labels, [names[layer][col[p]] for layer in range(n_layers)], p, col[p], zh)
    else:
        _grid_view(head, result, labels, firsts, shown, col, first, zh)


def _estimate(lm, n_positions: int, k: int):
    """The lens's memory, checked before anything runs, and its time, estimated from its first chunk
    of rows (the products with the unembedding and the softmax over V that follow them, timed on this
    machine as it is loaded now): a lens that will take more than LONG_SECONDS says so on stderr,
    with the figures and how to ask for less, and shows its progress there."""
    from tfcli.analysis.lens import lens_cost
    from tfcli.engine.memory import check_allocation

    n_layers = lm.config.n_layer + 1
    nbytes, flops = lens_cost(lm.model, n_layers * n_positions, k)
    check_allocation(nbytes, f"the lens of {n_layers} residual indices x {n_positions:,} positions",
                     "read fewer positions: --positions START:END, or --position N")
    what = (f"the lens reads {n_layers} residual indices x {n_positions:,} positions ({flops / 1e12:,.2f} "
            "TFLOP in its products)")
    return _progress(what)


def _progress(what: str):
    """The lens's progress (cli/progress.py: rows counted at a terminal), and after its first part,
    when it will take more than LONG_SECONDS, a line that says how long and how to ask for less."""
    from .progress import Counted
    from .train import _duration

    def estimate(seconds: float) -> None:
        if seconds >= LONG_SECONDS:
            note(f"{what}: about {_duration(seconds)} here (fewer: --positions START:END, or --position N)")

    return Counted("lens", "rows", "逻辑透镜", "行", estimate=estimate)


def _lens_json(lm, ids: list[int], result, positions: list[int], col: dict[int, int], k: int) -> None:
    """--json: each layer's top token at each position read, and its top k when k > 1 (--top)."""
    from tfcli.engine.memory import check_allocation

    tok = lm.tokenizer
    n_layers = len(result.ids)
    # about 400 bytes of Python objects per (layer, position, token) entry, and its text
    check_allocation(n_layers * len(col) * k * 400,
                     f"the --json of {n_layers} residual indices x {len(col):,} positions x {k} tokens",
                     "use a shorter text, a smaller --top, or --position N")

    def entry(layer, t):
        j = col[t]
        e = {"position": t, "token_id": int(result.ids[layer, j, 0]),
             "token": tok.token_text(int(result.ids[layer, j, 0])), "prob": float(result.probs[layer, j, 0])}
        if k > 1:
            e["top"] = [{"token_id": int(i), "token": tok.token_text(int(i)), "prob": float(v)}
                        for i, v in zip(result.ids[layer, j], result.probs[layer, j])]
        return e

    emit({
        "model": lm.name,
        "tokens": [{"id": int(i), "text": tok.token_text(int(i))} for i in ids],
        # "resid": the residual index; "layer" is its older name, kept for programs that read it
        "layers": [{"resid": layer, "layer": layer, "positions": [entry(layer, t) for t in positions]}
                   for layer in range(n_layers)],
    })  # fmt: skip


def _position_view(head: str, result, labels: list[str], names: list[list[str]], p: int, j: int, zh: bool) -> None:
    """--position: the top tokens of every layer at position p (column j of the lens read)."""
    from .views import lens as view
    from .views.inside import say, uses_colour

    t_len = len(labels)
    if zh:
        nxt = f"（文本中的下一个词元是 {labels[p + 1]!r}）" if p + 1 < t_len else ""
        out.print(f"{head} · 位置 {p}，{labels[p]!r} 之后{nxt}")
    else:
        nxt = f" (the next token in the text is {labels[p + 1]!r})" if p + 1 < t_len else ""
        out.print(f"{head} · position {p}, after {labels[p]!r}{nxt}")
    out.print(view.position_table(result, j, names, uses_colour(out), "", out.width, zh))
    say(out, zh,
        "Each row: what the model would predict after this token if it stopped at that residual index "
        "(softmax of unembed(final_norm(h))); residual index i is the stream before block i (0: the embeddings). "
        "bits: the entropy of that guess (0 = certain).",
        "每一行：如果模型在这个残差序号处就停下，"
        "它在这个位置会预测什么（softmax(unembed(final_norm(h)))）。残差序号 i 是第 i "
        "个块之前的残差流（0：嵌入）。bits：这个猜测的熵（0 "
        "表示完全确定）。")  # fmt: skip


def _grid_view(head: str, result, labels: list[str], firsts: list[list[str]], shown: list[int], col: dict[int, int],
               first: bool, zh: bool) -> None:
    """The default: each layer's top token at every position shown, as a grid, with a legend."""
    from .views import lens as view
    from .views.inside import say, uses_colour

    t_len = len(labels)
    colour = uses_colour(out)
    out.print(head)
    if len(shown) < t_len:
        if zh:
            out.print(f"[dim]显示 {t_len} 个位置中的{'前' if first else '后'} {len(shown)} 个（其余的用 "
                      "--first、--position N、--json 或 --png 查看）[/]")
        else:
            out.print(f"[dim]showing the {'first' if first else 'last'} {len(shown)} of {t_len} positions (--first, "
                      "--position N, --json or --png for the rest)[/]")
    cols = [col[t] for t in shown]
    out.print(view.grid([labels[t] for t in shown], result.probs[:, cols, 0],
                        [[row[j] for j in cols] for row in firsts], colour, zh))
    out.print(view.legend(colour, zh))
    settled = _settled(result.ids[:, cols, 0])
    say(out, zh,
        "Columns are the text's tokens; each cell is what the model would predict NEXT at that position if it stopped "
        "at that row's residual index: softmax(unembed(final_norm(h))), the same step that turns the last index into "
        "its real prediction (the bottom row). Reading down a column shows the guess forming. Residual index i is the "
        "stream before block i (0: the embeddings). The final answer first appears, and stays, at residual index "
        f"{settled} at the median position shown.",
        "每一列是文本中的一个词元；每个格子表示：如果模型在这一行的残差序号处就停"
        "下，它在这个位置会预测的下一个词元，即 softmax(unembed(final_norm(h)))，"
        "也就是把最后一个序号变成真实预测（最底一行）的同一步。自上而下读一列，"
        "可以看到猜测如何逐块形成。残差序号 i 是第 i 个块之前的残差流（0：嵌入）。"
        f"在所显示位置的中位数上，最终答案在残差序号 {settled} "
        "出现并保持不变。")  # fmt: skip


def _settled(top1) -> int:
    """The median (over positions) of the first layer after which the top token equals the final one."""
    import numpy as np

    n_layers, t_len = top1.shape
    same = top1 == top1[-1]  # [L+1, T]
    first = [next(layer for layer in range(n_layers) if same[layer:, t].all()) for t in range(t_len)]
    return int(np.median(first))


def _write_images(png, svg, heading, probs, labels, names) -> None:
    from tfcli.draw import images
    from .views.lens import lens_drawing

    d = lens_drawing(heading, probs, labels, names)
    if png:
        images.write_png(png, d, images.fonts_or_none())  # the shipped CJK subset first, then system fonts
        note(f"wrote {png} ({d.width}×{d.height} px)")
    if svg:
        images.write_svg(svg, d)
        note(f"wrote {svg} ({d.width}×{d.height} px)")


# --- one token in several contexts ------------------------------------------------------------


def _compare(texts, model, top, zh, as_json, ablate=None) -> None:
    from tfcli.analysis.lens import baseline_cosine, logit_lens, residual_stream, trajectory
    from tfcli.engine.fast import FAST

    lm = load(model)
    all_ids = [text_ids(lm, t, f"text {n + 1}") for n, t in enumerate(texts)]
    hooks = pass_hooks(lm, ablate)
    streams = [residual_stream(lm.model, ids, hooks, FAST) for ids in all_ids]  # one pass per text
    last = [ids[-1] for ids in all_ids]
    traj = trajectory(streams, last, lm.model.token_embedding)
    base = baseline_cosine(streams)
    reads_ids, reads_p = [], []
    for s in streams:
        r = logit_lens(lm.model, [h[-1:] for h in s], k=1, run=FAST)  # [L+1, 1, 1]
        reads_ids.append(r.ids[:, 0, 0])
        reads_p.append(r.probs[:, 0, 0])
    if as_json:
        _compare_json(lm, texts, all_ids, traj, base, reads_ids, reads_p)
    else:
        _compare_view(lm, texts, all_ids, traj, base, reads_ids, reads_p, zh)


def _compare_json(lm, texts, all_ids, traj, base, reads_ids, reads_p) -> None:
    """--compare --json: each text's tokens, then per layer the cosines, the distance from the
    embedding and what the lens reads."""
    tok = lm.tokenizer
    emit({
        "model": lm.name,
        "texts": [{"text": t, "tokens": [{"id": int(i), "text": tok.token_text(int(i))} for i in ids]}
                  for t, ids in zip(texts, all_ids)],
        "layers": [{
            "resid": layer, "layer": layer,
            "cosine": traj.pairwise[layer].round(6).tolist(),
            "baseline_cosine": None if base[layer] != base[layer] else round(float(base[layer]), 6),
            "from_embedding": [{"cosine": round(float(traj.from_embedding[c, layer]), 6),
                                "moved": round(float(traj.moved[c, layer]), 6),
                                "norm": round(float(traj.norms[c, layer]), 4)} for c in range(len(texts))],
            "reads": [{"token_id": int(reads_ids[c][layer]), "token": tok.token_text(int(reads_ids[c][layer])),
                       "prob": float(reads_p[c][layer])} for c in range(len(texts))],
        } for layer in range(traj.states.shape[1])],
    })  # fmt: skip


def _compare_view(lm, texts, all_ids, traj, base, reads_ids, reads_p, zh: bool) -> None:
    """--compare at a terminal: the texts and their tokens, warnings that change what the numbers
    mean, the tables (cosines, distance from the embedding, what the lens reads), a legend."""
    from .views import lens as view
    from .views.inside import say, token_str, uses_colour

    tok = lm.tokenizer
    n_blocks = traj.states.shape[1] - 1  # [C, L+1, D]
    last = [ids[-1] for ids in all_ids]
    colour = uses_colour(out)
    letters = [chr(ord("A") + i) for i in range(len(texts))]
    if zh:
        out.print(f"[bold]{lm.name}[/] · 每段文本的最后一个词元穿过 {n_blocks} 个块")
    else:
        out.print(f"[bold]{lm.name}[/] · the last token of each text through {n_blocks} blocks")
    for c, (t, ids) in enumerate(zip(texts, all_ids)):
        pieces = " ".join(repr(token_str(tok, i)) for i in ids)
        out.print(f"  {letters[c]}: {t!r} → {pieces}")
    ends = sorted(set(last), key=last.index)
    out.print(("  末尾词元：" if zh else "  last token" + ("" if len(ends) == 1 else "s") + ": ")
              + ", ".join(f"{token_str(tok, i)!r} #{i}" for i in ends))
    if len(set(last)) > 1:
        ends = ("、" if zh else ", ").join(f"{letters[c]} {token_str(tok, last[c])!r}" for c in range(len(texts)))
        # a text to show with its space
        bare = next((t for t in texts if t and not t[0].isspace() and len(t) <= 24), "Tower")
        warn(
            f"各段文本的末尾词元不同（{ends}）：文本开头的词前面没有空格；加上一个（\" "
            f"{bare}\"），比较的才是同一个词元" if zh else
            f"the texts end in different tokens ({ends}): at the start of a text a word has no leading space; put one "
            f"in (\" {bare}\") to compare the same token",
            wrap=True,
        )  # fmt: skip
    alone = [letters[c] for c, ids in enumerate(all_ids) if len(ids) == 1]
    if alone:
        warn(
            f"文本 {'、'.join(alone)} 只有一个词元，位于位置 0："
            "许多模型在这里长出一个格外大的状态，"
            "后面的每个词元都注意它（注意力汇聚点）；它的隐藏状态说的更多是位置 "
            "0，而不是这个词" if zh else
            f"text {', '.join(alone)} is a single token, so it sits at position 0, where many models grow one outsized "
            "state that every later token attends to (an attention sink); its hidden states say more about position 0 "
            "than about the word",
            wrap=True,
        )  # fmt: skip
    reads = [[(token_str(tok, int(i)), float(p)) for i, p in zip(reads_ids[c], reads_p[c])] for c in range(len(texts))]
    for table in view.compare_tables(texts, traj, reads, base, colour, out.width, zh):
        out.print(table)
    pw = traj.pairwise
    lo = 1 + int(pw[1:, 0, -1].argmin()) if len(pw) > 1 else 0  # past layer 0 (the embeddings themselves)
    say(out, zh,
        "A·B etc.: the cosine between the last token's hidden states in two texts at that residual index (1 = the "
        "same direction). baseline: the mean cosine between any two different positions of these texts at that index, "
        "since hidden states share a common direction a cosine only means something above it. cos: to the token's own "
        "embedding row; |h|: the state's length (the embedding's at index 0). reads: the lens's top token there. A and "
        f"{letters[-1]} are least alike at residual index {lo} (cosine {pw[lo, 0, -1]:.3f}, baseline {base[lo]:.3f}).",
        "A·B 等：同一个末尾词元在两段文本中、"
        "在这个残差序号处的隐藏状态之间的余弦相似度（1 表示方向相同）。baseline："
        "这些文本中任意两个不同位置在这个序号处的平均余弦；"
        "隐藏状态有一个共同的方向，所以余弦只有高于它才有意义。cos："
        "与该词元自身嵌入向量的余弦；|h|：状态向量的长度（序号 0 "
        "处是嵌入向量的长度）。reads：逻辑透镜在这里读出的最可能的词元。A 与 "
        f"{letters[-1]} 在残差序号 {lo} 处最不相似（余弦 {pw[lo, 0, -1]:.3f}，基线 "
        f"{base[lo]:.3f}）。",
    )  # fmt: skip
