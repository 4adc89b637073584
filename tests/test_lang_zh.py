"""--lang zh (and TFCLI_LANG=zh, a zh_CN locale) on the commands a learner reads: generate (its
statistics and --show-probs), score, tokenize, chat's help lines, bench and features print no
English sentence (token text, numbers, units, flags and file names aside), and the common errors
come in Chinese through the error boundary. One rule for every command: Chinese only."""

from __future__ import annotations

import re
import shutil

import pytest

from conftest import TINY_LLAMA

POEM = "床前明月光，疑是地上霜。"
# Words that are not English prose: units, names of models, formats and methods, what a token is.
ALLOWED = {
    "tok", "s", "ms", "kb", "mb", "gb", "nats", "bits", "tang", "shakespeare", "f32", "f16", "kv", "sae", "relu",
    "resid_post", "l0", "mse", "top", "k", "p", "min", "t", "tfcli", "bench", "features", "unk", "id", "text_file",
    "endoftext", "html", "txt", "bos", "eos", "softmax", "json", "utf", "smollm", "gemma", "ctrl", "tokenize",
    "generate", "score", "chat", "lens", "models",
}  # fmt: skip
# Words of the English these commands print, which must not be left under zh.
ENGLISH = {
    "the", "of", "and", "tokens", "token", "sample", "decode", "prefill", "stopped", "load", "thread", "threads",
    "seed", "chose", "candidates", "after", "filters", "model", "bytes", "characters", "measure", "value", "wrote",
    "steps", "vectors", "feature", "pushes", "error", "warning", "scored", "perplexity", "window", "memory", "peak",
    "weights", "ceiling", "held", "explained", "variance", "loss", "conversation", "leave", "message", "system",
    "setting", "this", "list", "greedy", "identical", "sampled", "new", "prompt", "unknown", "such", "option",
}  # fmt: skip


def english_left(text: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The English words left in `text` once token text ('...'), flags, paths and `skip` are taken out."""
    for s in skip:
        text = re.sub(rf"(?<!\w){re.escape(s)}(?!\w)", " ", text)
    text = re.sub(r"^\s+-?\d+\.\d+  .*$", " ", text, flags=re.M)  # a feature's contexts: the text read
    text = re.sub(r"'[^'\n]*?(?:'|…|\.\.\.)", " ", text)  # token text, shown quoted (or cut short)
    text = re.sub(r"(?<!\w)--?[\w-]+", " ", text)  # flags
    text = re.sub(r"(?:/[\w.+-]+)+/?|\b[\w-]+\.(?:txt|html)\b", " ", text)  # paths, file names
    text = re.sub(r"\b[A-Z][A-Z_]+\b|\b[a-z]+_[a-z_]+\b", " ", text)  # metavars (TEXT, KNOB), identifiers (top_k)
    words = [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z_]*", text)]
    return [w for w in words if w in ENGLISH or (len(w) > 3 and w not in ALLOWED)]


def assert_chinese(r, skip: tuple[str, ...] = ()) -> None:
    assert r.exit_code == 0, r.stderr
    left = english_left(r.stdout + "\n" + r.stderr, skip)
    assert not left, (left, r.stdout, r.stderr)
    assert re.search(r"[\u4e00-\u9fff]", r.stdout + r.stderr)


@pytest.mark.parametrize("args", [
    ["generate", "-m", "tang", "床前", "-n", "4", "--seed", "1", "--show-probs", "3", "--repetition-penalty", "1.2"],
    ["generate", "-m", "tang", "床前", "-n", "3", "-t", "0.5,1", "--seed", "1", "--show-probs", "2"],
    ["generate", "-m", "tang", "床前", "-n", "3", "-t", "0", "--samples", "2"],
    ["score", "-m", "tang", POEM, "--text"],
    ["tokenize", "-m", "tang", POEM + "x"],
    ["bench", "-m", "tang", "--prompts", "8", "-n", "4", "--runs", "1"],
])  # fmt: skip
def test_a_learners_commands_speak_chinese_only(cli, args):
    assert_chinese(cli(*args, "--lang", "zh"))


def test_the_environment_makes_chinese_the_default(cli, monkeypatch):
    for var, value in (("TFCLI_LANG", "zh"), ("LANG", "zh_CN.UTF-8")):
        with monkeypatch.context() as m:
            for other in ("TFCLI_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
                m.delenv(other, raising=False)
            m.setenv(var, value)
            assert_chinese(cli("score", "-m", "tang", POEM))
            r = cli("score", "-m", "tang", POEM, "--lang", "en")  # the flag wins
            assert "tokens scored" in r.stdout


def test_chat_help_lines_in_chinese(cli, tmp_path):
    folder = tmp_path / "tiny-chat"
    shutil.copytree(TINY_LLAMA, folder)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    r = cli("chat", "-m", folder, "--lang", "zh", input="/help\n/clear\n/nope\n/bye\n")
    from tfcli.cli.chat import KNOBS

    assert "这份列表" in r.stderr and "对话已清空" in r.stderr and "未知命令" in r.stderr
    assert_chinese(r, tuple(KNOBS))  # /set's knobs are named as they are typed


def test_features_in_chinese(cli, tmp_path):
    text = tmp_path / "small.txt"
    text.write_text("ROMEO: But soft, what light through yonder window breaks? It is the east. " * 30, encoding="utf-8")
    sae = tmp_path / "sae"
    skip = (str(tmp_path), "small.txt")
    assert_chinese(cli("features", "train", text, "-o", sae, "--steps", "4", "--batch-size", "64", "--buffer", "512",
                       "--features", "32", "--lang", "zh"), skip)  # fmt: skip
    page = tmp_path / "cards.html"
    r = cli("features", "top", sae, text, "-n", "1", "--contexts", "1", "--html", page, "--lang", "zh")
    assert page.exists() and f"已写入 {page}" in r.stderr  # every file written is announced
    assert_chinese(r, skip)
    assert_chinese(cli("features", "show", sae, "ROMEO", "--top", "2", "--lang", "zh"), skip)
    assert_chinese(cli("features", "quality", sae, text, "--tokens", "200", "--lang", "zh"), skip)


@pytest.mark.parametrize("args, said", [
    (["lens", "-m", "nosuch", "hi"], "没有叫 'nosuch' 的模型"),
    (["score", "--file", "/no/such/file.txt"], "不存在"),
    (["tokenize"], "给出文本 TEXT 或 --file FILE"),
    (["lens", "hi", "--nope"], "没有选项 --nope"),
    (["generate", "hi", "-m"], "需要一个值"),
])  # fmt: skip
def test_common_errors_in_chinese(cli, args, said):
    r = cli(*args, "--lang", "zh") if args[-1] != "-m" else cli(*args[:-1], "--lang", "zh", "-m")
    assert r.exit_code in (1, 2)
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("错误：") and said in line, line
    assert not english_left(line, ("nosuch", "file.txt", "tfcli")), line
