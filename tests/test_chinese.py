"""--lang zh: every command that offers it speaks Chinese throughout (headings, tables, legends),
and Chinese prose is wrapped between characters, never inside a formula or a number."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from tfcli.cli.views.inside import wrap_chinese

from conftest import TINY_GPT2, TINY_LLAMA

CHINESE = "今天天气很好"


@pytest.fixture
def cli80(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    return cli


@pytest.mark.parametrize("args, chinese, english", [
    (["attn", "--show-mask", CHINESE], ["遮罩", "分数", "代价"], ["Scores", "Softmax of each row", "Cost", "tokens,", "masked (the future"]),
    (["attn", "--demo"], ["手算注意力", "因果遮罩", "一行，一步一步"], ["worked by hand", "The causal mask", "One row, step by step", "In a model"]),
    (["attn", "-m", "tang", CHINESE], ["第 0 个块", "行是查询", "被遮住"], ["Rows are queries", "block 0 of", "masked (the future"]),
    (["attn", "-m", "tang", CHINESE, "--head", "all"], ["每个头主要看向哪里", "每个小图"], ["What each head", "Each panel", "top token"]),
    (["lens", "-m", "tang", CHINESE], ["逻辑透镜", "数字："], ["logit lens", "the number:", "Columns are"]),
    (["lens", "-m", "tang", CHINESE, "--position", "-1"], ["位置 5"], ["position 5", "Each row:"]),
    (["lens", "-m", "tang", "--compare", "天气", CHINESE], ["两段文本中状态之间的余弦", "末尾词元"], ["cosine between", "last token", "through"]),
    (["neurons", CHINESE, "-m", "tang", "--block", "1"], ["每个词元激活最强的神经元", "最常出现"], ["the neurons each token", "most often"]),
    (["neurons", CHINESE, "-m", "tang", "--block", "1", "--neuron", "3"], ["推高", "压低"], ["pushes up", "its activation", "Solid bars"]),
    (["embed", "neighbors", "天", "-m", "tang"], ["按余弦最近的词元", "余弦", "夹角"], ["nearest tokens", "cosine  angle"]),
    (["embed", "similarity", "天", "地", "-m", "tang"], ["相似度", "夹角"], ["an angle of", "higher than"]),
    (["geometry", "-m", "tang"], ["夹角的直方图", "这意味着什么", "精确"], ["Histograms", "What this promises", "exact", "random"]),
])
def test_chinese_throughout(cli80, args, chinese, english):
    r = cli80(*args, "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    for word in chinese:
        assert word in r.stdout, word
    for word in english:
        assert word not in r.stdout, word
    assert all(cell_len(line) <= 80 for line in r.stdout.splitlines())


def test_the_locale_picks_chinese_when_no_lang_is_given(cli, monkeypatch):
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    assert "遮罩" in cli("attn", "--show-mask", CHINESE).stdout
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    assert "Cost" in cli("attn", "--show-mask", CHINESE).stdout


def test_a_formula_is_not_split_by_wrapping(cli80):
    r = cli80("attn", "--explain", "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    assert "96 × 128 = 12,288 = D" in r.stdout  # the GPT-3 split, whole on one line
    for width in range(20, 81):
        text = "投影成 H 个头，每头（D → Dh）个数：softmax(unembed(final_norm(h)))，再乘以 1 ± 0.1 倍。"
        lines = wrap_chinese(text, width)
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")
        assert all(cell_len(line) <= width for line in lines)
        assert any("（D → Dh）" in line for line in lines) and any("1 ± 0.1" in line for line in lines)
        assert not any(line.startswith(("，", "。", "）", "：")) for line in lines)  # punctuation stays with its word


def test_without_colour_the_neuron_bars_say_their_sign(cli):
    r = cli("neurons", "hello there", "--block", "0", "-m", TINY_GPT2, "--neuron", "3")
    assert r.exit_code == 0, r.stderr
    assert "Green bars" not in r.stdout and ", red:" not in r.stdout and "light ones (░): negative" in r.stdout
    signs = [line.split()[2][0] for line in r.stdout.splitlines() if line[:1].isdigit() or line[:2].strip().isdigit()]
    shades = [("░" in line) for line in r.stdout.splitlines() if line[:1].isdigit() or line[:2].strip().isdigit()]
    assert signs and all((s == "-") == light for s, light in zip(signs, shades) if s in "+-")


def test_tiny_models_too(cli):
    r = cli("lens", "-m", TINY_LLAMA, "hello there", "--lang", "zh")
    assert r.exit_code == 0 and "逻辑透镜" in r.stdout



ZH = "今天天气很好"


def english_sentences(text: str) -> list[str]:
    """Runs of three or more English words in a row (between spaces, commas, colons, brackets, '·'
    or '-'): a phrase left untranslated. Names, numbers, tokens ('…' and "…"), flags (--scale) and
    paths are not words here."""
    import re

    found = []
    for line in text.splitlines():
        line = re.sub(r"'[^']*'|\"[^\"]*\"|--?[\w-]+|\S*/\S*|\S+\.(?:html|png|svg|npz)", " ", line)
        found += [m.group(0) for m in re.finditer(r"\b[A-Za-z]{2,}(?:[ ,:;()·-]+[A-Za-z]{2,}){2,}\b", line)]
    return found


@pytest.mark.parametrize("args", [
    ["ablate", "ROMEO:", "-m", "shakespeare"],
    ["heads", "ROMEO:", "-m", "shakespeare"],
    ["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "-m", "shakespeare"],
    ["steer", "ROMEO:", "--toward", "love", "--away", "hate", "--block", "1", "-n", "3", "-t", "0", "-m", "shakespeare"],
    ["attn", "-m", "tang", ZH],
    ["attn", "--show-mask", ZH],
    ["lens", "-m", "tang", ZH],
    ["neurons", ZH, "-m", "tang", "--block", "1"],
    ["embed", "neighbors", "天", "-m", "tang"],
    ["geometry", "-m", "tang"],
    ["explore", "-m", "tang", ZH, "-o", "{tmp}/page.html"],
])  # fmt: skip
def test_lang_zh_leaves_no_english_sentence(cli, tmp_path, args):
    r = cli(*[a.replace("{tmp}", str(tmp_path)) for a in args], "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "tok/s" not in line]
    assert english_sentences(r.stdout) == [], r.stdout
    assert english_sentences("\n".join(said)) == [], r.stderr


def _untranslated_words(lines: list[str]) -> list[str]:
    """English words of a table (its lines are indented; its cells apart by two spaces or more)
    without Chinese under them. A word is a letter, then lowercase letters: GELU, W_Q, d_model,
    FLOPs and the axis Hkv are names. A cell with a word needs a Chinese character in its columns
    on the next line, or the line after when the English wraps once (the next line has text in
    those columns): a formula's words and a unit after a number under themselves; a note (a line of
    one cell after a Chinese name) under itself."""
    import re

    from rich.cells import cell_len

    cjk = re.compile("[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
    word = re.compile(r"(?<![\w'’])(?!Hkv\b)[A-Za-z][a-z]{2,}(?![\w'’])")

    def cells(line: str) -> list[tuple[int, int, str]]:  # (first cell, past the last cell, text)
        return [(cell_len(line[: m.start()]), cell_len(line[: m.end()]), m.group(0)) for m in re.finditer(r"\S+(?: \S+)*", line)]

    def chinese_under(line: str, a: int, b: int) -> bool:
        x = 0
        for ch in line:
            w = cell_len(ch)
            if cjk.match(ch) and x < b and x + w > a:
                return True
            x += w
        return False

    table = [line if line.startswith(" ") else "" for line in lines] + ["", ""]
    found = []
    for i, line in enumerate(table[:-2]):
        row = cells(line)
        for k, (a, b, text) in enumerate(row):
            if not word.search(text):
                continue
            note = len(row) == 1 and i > 0 and bool(cjk.search(table[i - 1]))
            nxt = [c for c in cells(table[i + 1]) if c[0] < b and c[1] > a]  # the next line's text in these columns
            wraps = bool(nxt) and not chinese_under(table[i + 1], a, b) and (len(cells(table[i + 1])) == 1 if note else True)
            if not (chinese_under(table[i + 1], a, b) or (wraps and chinese_under(table[i + 2], a, b))):
                found.append(f"{text!r} in {line.strip()!r}")
    return found


@pytest.mark.parametrize("preset", ["gpt3", "smollm2-135m", "qwen3-0.6b", "gemma-3-270m"])
def test_params_in_chinese_says_each_english_sentence_in_chinese_too(cli, monkeypatch, preset):
    """params --lang zh speaks Chinese (the one rule of every command, cli/lang.py): no English
    sentence stands without its Chinese, each English word of a table (a name, a formula's words, a note, a unit) its
    Chinese in the same columns, and the Chinese is wrapped between characters, not at its spaces."""
    import re

    monkeypatch.setenv("COLUMNS", "80")
    r = cli("params", "--preset", preset, "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    cjk = re.compile("[\u4e00-\u9fff]")

    def paragraph(i: int) -> list[str]:  # the line and those after it, up to a blank line
        end = next((j for j in range(i, len(lines)) if not lines[j].strip()), len(lines))
        return lines[i:end]

    alone = [line for i, line in enumerate(lines) if english_sentences(line) and not any(cjk.search(x) for x in paragraph(i))]
    assert alone == [], r.stdout
    assert _untranslated_words(lines) == [], r.stdout
    assert not re.search(r"…$", r.stdout, re.M), r.stdout  # nothing cut, in either language (a cut cell ends in '…')
    for head in ("个块", "词表", "公式", "参数"):
        assert head in r.stdout, head
