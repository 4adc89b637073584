"""The one layout rule (cli/layout.py), held on everything a learner reads first: every command's
--help and every README command that runs on the shipped models, at COLUMNS=80 and 60 (as Rich
draws whenever the output is piped). No line is wider than the terminal, unless a path or a URL,
which cannot be broken, makes it so; no help example is broken inside a quoted argument, and one
copied as printed (its ' \\' continuations joined) is the command the docstring gives.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from rich.cells import cell_len

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = (80, 60)


def too_wide(text: str, width: int) -> list[str]:
    """The lines wider than `width`, leaving out those a path or a URL makes wide: without that
    word the line fits."""
    bad = []
    for line in text.splitlines():
        if cell_len(line) <= width:
            continue
        paths = [w for w in line.split() if "/" in w or "\\" in w]
        if any(cell_len(line) - cell_len(w) < width for w in paths):
            continue
        bad.append(line)
    return bad


# --- every --help ---------------------------------------------------------------------------------


def _commands() -> list[list[str]]:
    from tfcli.cli import COMMANDS
    from tfcli.cli.features import app as features

    names = [[]] + [[name] for name in COMMANDS] + [["features"]]
    return names + [["features", info.name or info.callback.__name__] for info in features.registered_commands]


def _examples(help_text: str) -> list[list[str]]:
    """The example commands of a help as printed: each a list of its physical lines."""
    if "Examples" not in help_text:
        return []
    lines = [re.sub(r"^[│ ]+|[│ ]+$", "", line) for line in help_text.split("Examples", 1)[1].splitlines()]
    examples, current = [], None
    for line in lines:
        if current is not None:
            current.append(line)
            if not line.endswith(" \\"):
                examples.append(current)
                current = None
        elif line.startswith(("tfcli ", "$ tfcli", "curl ")):
            current = [line]
            if not line.endswith(" \\"):
                examples.append(current)
                current = None
    return examples


def _docstring_examples(args: list[str]) -> list[list[str]]:
    """The examples as the docstring gives them, as shell words."""
    import inspect

    import typer

    from tfcli import cli

    cmd = typer.main.get_command(cli.app)
    ctx = None
    for name in args:
        cmd = cmd.get_command(ctx, name)
    doc = inspect.cleandoc(cmd.help or "")
    if "Examples" not in doc:
        return []
    # an example the source breaks with " \\" (the 120-character rule) is one command, as a shell reads it
    lines = doc.split("Examples", 1)[1].replace(" \\\n", " ").splitlines()
    return [shlex.split(line.strip(), comments=True) for line in lines if line.strip().startswith(("tfcli ", "curl "))]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args", _commands(), ids=lambda a: " ".join(a) or "tfcli")
def test_every_help_fits_and_its_examples_copy_whole(cli, monkeypatch, args, width):
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli(*args, "--help")
    assert r.exit_code == 0, r.stderr
    assert too_wide(r.stdout, width) == [], r.stdout
    printed = _examples(r.stdout)
    for lines in printed:
        for line in lines:
            shlex.split(line.removesuffix(" \\"))  # a line broken inside a quoted argument does not parse: ValueError
    joined = [shlex.split(" ".join(line.removesuffix(" \\").strip() for line in lines), comments=True) for lines in printed]
    assert joined == _docstring_examples(args)


def test_a_long_example_breaks_between_its_arguments():
    from tfcli.cli.layout import _WORD, command_lines

    line = '  tfcli steer "My day at the office was" --toward "I love this. It was wonderful." --away "I hate this." --block 10'
    for width in range(30, 120):
        lines = command_lines(line, width)
        assert shlex.split(" ".join(x.removesuffix(" \\") for x in lines)) == shlex.split(line)
        assert all(cell_len(x) <= width for x in lines if len(_WORD.findall(x)) > 2 or "tfcli" in x)  # a line of one word too wide stays whole
        assert all(x.endswith(" \\") for x in lines[:-1]) and not lines[-1].endswith("\\")


# --- every README command on the shipped models ------------------------------------------------------

DOWNLOADS = {"smollm2", "gemma3", "sae-smollm2"}  # pulled on first use: not run here
NOT_RUN = {"pull", "serve", "chat", "rm", "train", "convert", "bench", "--install-completion"}  # network, a server, a terminal, minutes of training or the user's shell files
OUTPUTS = {"-o", "--output", "--png", "--svg", "--csv", "--html"}
PLACEHOLDER = re.compile(r"^\[?[A-Z][A-Z_]*\]?$|\.\.\.|\|")


def _readme_commands() -> list[str]:
    """Every tfcli command of the README: the code blocks' (a quoted argument may run over lines)
    and the prose's `tfcli ...`, without placeholders (TEXT, FOLDER, ...) and once each."""
    from conftest import doc_text

    text = doc_text()  # README.md and docs/
    found = []
    for block in re.findall(r"```(?:bash|console|sh|)\n(.*?)```", text, re.S):
        lines, i = block.split("\n"), 0
        while i < len(lines):
            cmd = lines[i].removeprefix("$ ")
            if cmd.startswith("tfcli "):
                while True:
                    try:
                        shlex.split(cmd, comments=True)
                        break
                    except ValueError:  # a quoted argument goes on on the next line
                        i += 1
                        cmd += "\n" + lines[i]
                found.append(cmd)
            i += 1
    for c in re.findall(r"`(tfcli [^`]+)`", text):  # prose names commands too: `tfcli lens --compare` is no command line
        words = c.split()[1:]  # after 'tfcli': a command and at least one argument
        if len(words) > 2 or len(words) == 2 and not words[1].startswith("-"):
            found.append(c.replace("\n", " "))
    return list(dict.fromkeys(found))


def _runnable(cmd: str, tmp: Path) -> list[str] | None:
    """The command's arguments (outputs written under tmp), or None when it needs a download, a
    file the repository does not hold, or is not a command to run here."""
    try:
        words = shlex.split(cmd, comments=True)[1:]
    except ValueError:
        return None
    from tfcli.cli import COMMANDS

    if not words or words[0] not in [*COMMANDS, "features"] or words[0] in NOT_RUN or (words[:2] == ["features", "train"]) or any(w in DOWNLOADS or PLACEHOLDER.search(w) for w in words):
        return None
    args = []
    for i, w in enumerate(words):
        if i and words[i - 1] in OUTPUTS:
            w = str(tmp / Path(w).name)
        elif (w.endswith((".txt", ".gguf", ".jinja", ".npz")) or w.startswith(("./", "/", "sae-")) or ":" in w and w.split(":")[0].startswith("sae")) and not _held(w):
            return None
        args.append(w)
    return args


def _held(path: str) -> bool:
    """Whether the repository holds this file: a README example's /tmp/my-model is the reader's
    (another process may make one while the tests are collected and remove it before they run)."""
    p = (ROOT / path).resolve()
    return p.exists() and p.is_relative_to(ROOT)


README_COMMANDS = _readme_commands()


def test_the_readme_commands_are_found():
    assert len(README_COMMANDS) > 60
    runnable = [c for c in README_COMMANDS if _runnable(c, Path("/tmp")) is not None]
    assert len(runnable) >= 25, runnable


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("cmd", [c for c in README_COMMANDS if _runnable(c, Path("/tmp")) is not None])
def test_every_readme_command_fits(cli, monkeypatch, tmp_path, cmd, width):
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.chdir(ROOT)  # weights/tang and docs/ as the README gives them
    r = cli(*_runnable(cmd, tmp_path))
    assert r.exit_code == 0, r.stderr
    if _runnable(cmd, tmp_path)[0] != "generate":  # generate's stdout is the model's own text, written as sampled, never wrapped
        assert too_wide(r.stdout, width) == [], r.stdout
    said = [line for line in r.stderr.splitlines() if "tok/s" not in line]  # the statistics: one line each, for scripts
    assert too_wide("\n".join(said), width) == [], r.stderr


# --- what the issue found cut, beyond the README ----------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args", [
    ["params", "--list-presets"],
    ["params", "--preset", "gpt3"],
    ["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "-m", "shakespeare"],
    ["ablate", "ROMEO:", "-m", "shakespeare"],
    ["heads", "ROMEO:", "-m", "shakespeare"],
    ["steer", "ROMEO:", "--toward", "love", "--away", "hate", "--block", "1", "-n", "8", "-t", "0", "-m", "shakespeare"],
])  # fmt: skip
def test_the_views_the_issue_found_cut_fit_whole(cli, monkeypatch, args, width):
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert too_wide(r.stdout, width) == [], r.stdout
    assert not re.search(r"\w…", r.stdout), r.stdout  # no header, number or label cut short


@pytest.mark.parametrize("width", WIDTHS)
def test_models_gives_a_long_cache_name_a_line_of_its_own(cli, monkeypatch, tmp_path, width):
    """A cache entry named after a long GGUF file (up to 61 characters) neither pushes every
    model's columns past the width nor is cut: it has a line of its own, whole, and its columns
    go on under the other models' columns."""
    import json

    from test_gguf import MIXED, write_gguf

    gguf = write_gguf(tmp_path / "SmolLM2-135M-Instruct-a-rather-long-file-name-Q4_K_M.gguf", types=MIXED, alignment=64)
    assert cli("generate", "-m", gguf, "hi", "-n", "1", "-t", "0").exit_code == 0
    name = next(m["name"] for m in json.loads(cli("models", "--json").stdout)["models"] if m["gguf_file"])
    assert len(name) > 55
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli("models")
    assert r.exit_code == 0, r.stderr
    assert [line for line in too_wide(r.stdout, width) if line != name] == [], r.stdout  # a name wider than a line stays whole, as a path does
    lines = r.stdout.splitlines()
    assert name in lines, r.stdout  # whole, alone
    columns = lines[lines.index(name) + 1]
    shipped = next(line for line in lines if line.startswith("shakespeare "))
    assert columns.index("gguf") == shipped.index("shipped") and columns.index("params") == shipped.index("params"), r.stdout


def test_a_grid_numbers_its_columns_rather_than_cut_a_label_and_goes_on_below():
    import numpy as np

    from tfcli.cli.views.experiments import grid

    labels = ["The", "␣Eiffel/␣Colosseum", "␣Tower", "␣is"]
    t = grid(["emb", "1"], labels, np.zeros((2, 4)), False, width=80, key="positions").plain
    assert "…" not in t and "positions: 0:The  1:␣Eiffel/␣Colosseum  2:␣Tower  3:␣is" in t
    assert t.splitlines()[0].split() == ["0", "1", "2", "3"]
    narrow = grid(["emb", "1"], [f"h{i}" for i in range(9)], np.zeros((2, 9)), False, width=40).plain
    assert all(cell_len(line) <= 40 for line in narrow.splitlines()) and "h8" in narrow and "h0" in narrow


@pytest.mark.parametrize("width", WIDTHS)
def test_the_chat_banner_and_help_wrap_between_words(cli, monkeypatch, tmp_path, width):
    import shutil

    from conftest import TINY_LLAMA

    m = tmp_path / "chat-model"
    shutil.copytree(TINY_LLAMA, m)
    (m / "chat_template.jinja").write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<assistant>")
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli("chat", "-m", m, "-n", "2", input="/help\n/show\n/bye\n")
    assert r.exit_code == 0, r.stderr
    assert too_wide(r.stderr, width) == [], r.stderr
    words = set(re.findall(r"[a-z_]+", r.stderr))
    assert {"max_tokens", "repetition_penalty", "conversation"} <= words  # no word cut in two by a wrap


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_note_wraps_between_words_and_never_breaks_a_path(cli, monkeypatch, tmp_path, lang):
    monkeypatch.setenv("COLUMNS", "60")
    deep = tmp_path / ("a-rather-long-folder-name" * 2) / "page.html"
    deep.parent.mkdir()
    r = cli("explore", "-m", "tang", "今天天气很好", "--lang", lang, "-o", deep)
    assert r.exit_code == 0, r.stderr
    assert str(deep) in r.stderr  # whole, on one line
    short = cli("explore", "-m", "tang", "今天天气很好", "--lang", lang, "-o", tmp_path / "p.html")
    assert too_wide(short.stderr, 60) == [] and str(tmp_path / "p.html") in short.stderr
