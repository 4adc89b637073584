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
