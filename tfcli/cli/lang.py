"""The language a run speaks: English, or with --lang zh (TFCLI_LANG=zh, a zh_* locale) Chinese.

One rule for every command: under zh what a learner reads is in Chinese only (headings, tables,
statistics, notes, progress, the common errors); numbers, units (tok/s, MB, nats), token text,
file and model names, flags and formulas stay as they are. The choice is made once per run: the
error boundary reads it from the command line (`remember`), a command's --lang sets it
(`options.chinese`), and whatever prints asks `zh()`, so that no view needs a flag threaded to it.
"""

from __future__ import annotations

import os
import re

HELP = (
    "zh: Chinese instead of English (numbers, units, token text and names stay as they are;"
    " default: TFCLI_LANG, else LC_ALL / LANG)."
)

_chosen: bool | None = None  # this run's --lang, once known; None: the environment decides


def from_environment() -> bool:
    """TFCLI_LANG (en or zh), else the locale the way POSIX picks it: LC_ALL, then LC_MESSAGES, then LANG."""
    for var in ("TFCLI_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var)
        if value:
            return value.lower().startswith("zh")
    return False


def choose(zh: bool | None) -> None:
    """This run's --lang (None: not given, the environment decides)."""
    global _chosen
    _chosen = zh


def remember(args: list[str]) -> None:
    """The --lang of a command line, before its command runs (so that a usage error speaks it too)."""
    chosen = None
    for k, a in enumerate(args):
        value = args[k + 1] if a == "--lang" and k + 1 < len(args) else a[7:] if a.startswith("--lang=") else None
        if value in ("en", "zh"):
            chosen = value == "zh"
    choose(chosen)


def zh() -> bool:
    """Whether this run speaks Chinese."""
    return from_environment() if _chosen is None else _chosen


def say(en: str, cn: str) -> str:
    """`cn` under zh, else `en`."""
    return cn if zh() else en


# The common errors, as the boundary prints them: a pattern of the English line and its Chinese.
# A line no pattern matches keeps its English, under the Chinese label.
_ERRORS = [
    (r"unknown model '(.*)' \((.*)\)", lambda m: f"没有叫 '{m[1]}' 的模型（{_model_hint(m[2])}）"),
    (r"model '(.*)' has not been pulled yet \(run: (.*)\)", r"模型 '\1' 还没有下载（运行：\2）"),
    (r"no such folder: (.*?) \((.*)\)", r"没有这个文件夹：\1（检查路径，或给出模型名，见 'tfcli models'）"),
    (r"(.*) does not exist \(check the path\)", r"\1 不存在（检查路径）"),
    (r"the corpus (\S+) is not in the cache yet \(run: (.*)\)", r"语料 \1 还不在缓存中（运行：\2）"),
    (r"no corpus named '(.*)' \(did you mean '(.*)'\?\)", r"没有叫 '\1' 的语料（你是说 '\2' 吗？）"),
    (r"(.*) is empty \((.*)\)", r"\1 是空的（给一个有文字的文件）"),
    (r"(.*) is not valid UTF-8 \(byte (\S+) at offset (\S+)\) \(.*\)",
     r"\1 不是有效的 UTF-8（偏移 \3 处的字节 \2）（先把文字转成 UTF-8）"),
    (r"give a TEXT or --file FILE \(one of the two\) \(e\.g\. (.*), or (.*)\)",
     r"给出文本 TEXT 或 --file FILE（二选一）（例如 \1，或 \2）"),
    (r"(.*) encodes to no tokens \(.*\)", r"\1 编码后没有词元（给一些文字让模型读）"),
    (r"(.*) is (\S+) tokens but (\S+)'s context is (\S+) \(shorten it\)",
     r"\1 有 \2 个词元，但 \3 的上下文只有 \4 个（缩短它）"),
    (r"Missing argument '(.*)'\.(.*)", r"缺少参数 '\1'。\2"),
    (r"No such option: (\S+?)(?: Did you mean (\S+?)\?)?(?: \(Possible options: (.*?)\))?( \(see .*)?",
     lambda m: f"没有选项 {m[1]}" + (f"，你是说 {m[2]}？" if m[2] else "")
     + (f"（可能的选项：{m[3]}）" if m[3] else "") + (m[4] or "")),
    (r"No such command '(.*?)'\.(.*)", r"没有命令 '\1'。\2"),
    (r"Invalid value for '(.*?)': (.*)", r"'\1' 的值无效：\2"),
    (r"Option '(.*?)' requires an argument\.(.*)", r"选项 '\1' 需要一个值。\2"),
    (r"interrupted", "已中断"),
]


def _model_hint(hint: str) -> str:
    hint = re.sub(r"did you mean (.*)\?", r"你是说 \1 吗？", hint)
    hint = re.sub(r"known models: ", "已知的模型：", hint)
    return re.sub(r"; to use the folder (.*), write (.*)", r"；要用文件夹 \1，请写 \2", hint)


_SEE = re.compile(r" \(see '(.*) --help'\)$")


def error(message: str) -> str:
    """An error line in Chinese where it is a common one (the hint `see '... --help'` included)."""
    for pattern, replacement in _ERRORS:
        m = re.fullmatch(pattern, message)
        if m:
            message = m.expand(replacement) if isinstance(replacement, str) else replacement(m)
            break
    return _SEE.sub(r"（见 '\1 --help'）", message)
