"""tfcli embed's reports drawn: neighbour tables, an analogy's answers, a similarity, a direction.
Drawing only: every number comes from the report dict that --json prints."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ..console import out
from .inside import bar, cell, say, uses_colour


def _word(w: dict, zh: bool = False) -> str:
    pieces = " + ".join(repr(t["text"]) for t in w["tokens"])
    ids = ",".join(str(t["id"]) for t in w["tokens"])
    split = ("（被切开：取它各个词元的平均）" if zh else " (split: the mean of its tokens)") if w["split"] else ""
    return f"{w['word']!r} → {pieces} (#{ids})" + split


def _space_zh(space: str) -> str:
    import re

    if space == "embedding rows":
        return "嵌入矩阵的行"
    m = re.match(r"residual stream at index (\d+)", space)
    return f"残差序号 {m.group(1)} 处的残差流（单独这个词）" if m else space


def _header(report: dict, what: str, zh: bool = False, what_zh: str = "") -> None:
    q = report["query"]
    if zh:
        out.print(f"[bold]{report['model']}[/] · {what_zh or what} · 在{_space_zh(q['space'])}中")
    else:
        out.print(f"[bold]{report['model']}[/] · {what} · in the {q['space']}")
    for w in q["words"]:
        out.print(Text(f"  {_word(w, zh)}"))


def _table(rows: list[dict], colour: bool, top: float | None = None, zh: bool = False) -> Table:
    table = Table(box=None, padding=(0, 1), pad_edge=False)
    names = ("#", "词元", "编号", "余弦", "夹角", "") if zh else ("#", "token", "id", "cosine", "angle", "")
    for name, justify in zip(names, ("right", "left", "right", "right", "right", "left")):
        table.add_column(name, justify=justify, no_wrap=True, style="dim" if name in ("#", "id", "编号") else None)
    top = top or max((r["cosine"] for r in rows), default=1.0)
    for n, r in enumerate(rows, 1):
        table.add_row(
            str(n),
            repr(r["shown"]),
            str(r["id"]),
            cell(f"{r['cosine']:.3f}", r["cosine"], 6, colour),
            f"{r['angle']:.1f}°",
            bar(r["cosine"], top, 20),
        )
    return table


def _baseline_line(b: dict | None, zh: bool) -> None:
    if not b:
        return
    say(out, zh,
        f"For scale: two random tokens of this model have a cosine of {b['mean']:.3f} ± {b['std']:.3f} "
        f"({b['pairs']:,} pairs of 2,000 random rows, seed 0).",
        f"作为参照：这个模型中任意两个随机词元的余弦为 {b['mean']:.3f} ± {b['std']:.3f}"
        f"（2000 个随机行的 {b['pairs']:,} 对，种子 0）。")  # fmt: skip


HONEST_EN = (
    "What this shows and does not: these are the vectors the model reads tokens with, not word2vec's. A token is often "
    "a "
    "piece of a word, the same word comes in several spellings (' king', 'King', 'king'), and in a tied model (GPT-2, "
    "SmolLM2) the same rows also write the prediction, so neighbours are often spellings and near-synonyms rather than "
    "meanings; meaning is built up by the blocks (try --resid I, or tfcli lens)."
)
HONEST_ZH = (
    "这能说明什么、不能说明什么：这些是模型读入词元所用的向量，不是 word2vec 的词向量。一个词元常常只是词的一部分，同一个词有多种写法"
    "（' king'、'King'、'king'），而在共享嵌入的模型（GPT-2、SmolLM2）中，同一组行也用来写出预测，所以近邻往往是不同写法和近义词，而不是"
    "含义；含义是由各个块逐步构建的（试试 --resid I，或 tfcli lens）。"
)


def neighbors(report: dict, zh: bool) -> None:
    colour = uses_colour(out)
    _header(report, "nearest tokens by cosine", zh, "按余弦最近的词元")
    out.print(_table(report["neighbors"], colour, zh=zh))
    say(out, zh,
        "Cosine = the angle between two directions (1 = the same, 0 = at right angles, 90°); the word's own tokens are "
        "left out.",
        "余弦表示两个方向之间的夹角（1 表示相同，0 表示垂直，即 90°）；这个词自身的词元不计入。")  # fmt: skip
    _baseline_line(report["baseline"], zh)
    say(out, zh, HONEST_EN, HONEST_ZH)


def analogy(report: dict, zh: bool) -> None:
    colour = uses_colour(out)
    _header(report, report["query"]["expression"], zh)
    out.print(_table(report["neighbors"], colour, zh=zh))
    if "expected" in report:
        e = report["expected"]
        if report["expected_rank"] is None:
            out.print(
                f"预期 {e['word']!r}：没有排名（{report['expected_note']}）"
                if zh
                else f"expected {e['word']!r}: no rank ({report['expected_note']})"
            )
        else:
            r = report["expected_rank"]
            pieces = " + ".join(repr(t["text"]) for t in e["tokens"])
            if zh:
                hit = " [bold green]（就是答案）[/]" if r == 1 else ""
                out.print(
                    f"预期 {e['word']!r}（{pieces}）：在所有词元中排第 {r:,}{hit}，余弦 {report['expected_cosine']:.3f}"
                )
            else:
                hit = " [bold green](the answer)[/]" if r == 1 else ""
                out.print(
                    f"expected {e['word']!r} ({pieces}): rank {r:,} of all tokens{hit}, cosine "
                    f"{report['expected_cosine']:.3f}"
                )
    say(out, zh,
        "Each word's vector is scaled to length 1, then a − b + c is compared with every token; the three input words "
        "are "
        "left out of the answers (word2vec's rule: otherwise a itself is usually nearest).",
        "每个词的向量先缩放到长度 1，再用 a − b + c 与所有词元比较；三个输入词不算作答案（word2vec 的规则：否则最近的通常就是 a 本身）。")  # fmt: skip
    say(out, zh, HONEST_EN, HONEST_ZH)


def similarity(report: dict, zh: bool) -> None:
    _header(report, "similarity", zh, "相似度")
    a, b = (w["word"] for w in report["query"]["words"])
    if zh:
        out.print(f"cosine({a!r}, {b!r}) = [bold]{report['cosine']:.4f}[/]，夹角 [bold]{report['angle']:.2f}°[/]")
    else:
        out.print(
            f"cosine({a!r}, {b!r}) = [bold]{report['cosine']:.4f}[/], an angle of [bold]{report['angle']:.2f}°[/]"
        )
    base = report["baseline"]
    if base:
        out.print(
            f"高于 {base['share_below']:.1%} 的随机词元对"
            if zh
            else f"higher than {base['share_below']:.1%} of random token pairs"
        )
    _baseline_line(base, zh)
    if report["query"]["layer"] is not None:
        say(out, zh,
            "At a residual index there is no random-pair baseline: hidden states share a common direction, so compare "
            "with other pairs at the same index.",
            "在残差序号处没有随机词对的基线：隐藏状态有一个共同方向，请与同一序号处的其他词对比较。")  # fmt: skip


def direction(report: dict, zh: bool) -> None:
    q = report["query"]
    _header(report, f"the {q['plus']!r} − {q['minus']!r} direction", zh, f"{q['plus']!r} − {q['minus']!r} 方向")
    rows = report["projections"]
    top = max((abs(r["projection"]) for r in rows), default=1.0) or 1.0
    table = Table(box=None, padding=(0, 1), pad_edge=False)
    table.add_column("词" if zh else "word", no_wrap=True)
    table.add_column(f"← {q['minus']}", justify="right", no_wrap=True)
    table.add_column(f"{q['plus']} →", no_wrap=True)
    table.add_column("投影" if zh else "projection", justify="right")
    for n, r in enumerate(rows):
        p = r["projection"]
        left = bar(-p, top, 15)
        table.add_row(Text(repr(r["word"]), style="dim" if n < 2 else "bold"), left, bar(p, top, 15), f"{p:+.3f}")
    out.print(table)
    say(out, zh,
        f"Each word's unit vector projected on the unit direction {q['plus']} − {q['minus']} (the first two rows are "
        "the "
        f"anchors themselves): positive leans to {q['plus']!r}, negative to {q['minus']!r}. A direction between two "
        "tokens "
        "mixes everything that tells them apart, spelling and frequency as well as meaning.",
        f"每个词的单位向量在单位方向 {q['plus']} − {q['minus']} 上的投影（前两行是两个锚点自身）：正值偏向 {q['plus']!r}，"
        f"负值偏向 {q['minus']!r}。两个词元之间的方向混合了区分它们的一切：拼写、频率以及含义。")  # fmt: skip


SHOWN_VALUES = 8  # of a text's embedding, the first values drawn (--json gives them all)


def _short(text: str, width: int = 40) -> str:
    one = " ".join(text.split())
    return repr(one if len(one) <= width else one[: width - 3] + "...")


def text(report: dict, zh: bool) -> None:
    """Each text's embedding (its first values, its length) and, for several, their cosines."""
    colour = uses_colour(out)
    pooled = {"mean": "the mean over its tokens", "last": "its last token", "first": "its first token"}[
        report["pooling"]
    ]
    pooled_zh = {"mean": "对各词元取平均", "last": "取最后一个词元", "first": "取第一个词元"}[report["pooling"]]
    if zh:
        out.print(
            f"[bold]{report['model']}[/] · 文本嵌入 · 最后一层（最终归一化之后）{pooled_zh}，缩放到长度 1，{report['dimensions']} 维"
        )
    else:
        out.print(f"[bold]{report['model']}[/] · text embeddings · the last hidden state after the final norm, "
                  f"{pooled}, "
                  f"scaled to length 1; {report['dimensions']} values")  # fmt: skip
    for n, t in enumerate(report["texts"], 1):
        head = " ".join(f"{x:+.3f}" for x in t["embedding"][:SHOWN_VALUES])
        more = " ..." if len(t["embedding"]) > SHOWN_VALUES else ""
        out.print(Text(f"{n}. {_short(t['text'])} ({t['tokens']:,} tokens)"))
        out.print(Text(f"   [{head}{more}]"))
    cos = report["cosines"]
    if cos:
        table = Table(box=None, padding=(0, 1), pad_edge=False)
        table.add_column("余弦" if zh else "cosine", justify="right", style="dim")
        for j in range(len(cos)):
            table.add_column(str(j + 1), justify="right", no_wrap=True)
        for i, row in enumerate(cos):
            table.add_row(str(i + 1), *(cell(f"{c:.3f}", c, 6, colour) for c in row))
        out.print(table)
    say(out, zh,
        "--json gives every value. Cosines of a decoder's raw hidden states tend to be high for any two texts (they "
        "share a common "
        "direction): compare pairs with each other, not with 0.",
        "--json 给出全部数值。解码器的隐藏状态之间余弦普遍偏高（它们共有一个方向）：应当在不同文本对之间比较，而不是与 0 比较。")  # fmt: skip
