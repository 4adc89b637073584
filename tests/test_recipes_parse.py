"""Every `tfcli ...` line of README.md, docs/*.md and the model cards parses as written (issue 49 item 6): its command
exists and takes every flag, value and argument the line gives it. tests/test_docs_examples.py runs
the `$ tfcli` examples and tests/test_width.py the README's runnable lines; this covers the rest too
(the recipes that download, train or read a corpus: `"$(tfcli data path NAME)"` stands for a file),
without running them: click parses each line as the shell would split it, types and choices checked."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

try:
    from typer import _click as click  # typer 0.2x parses with a copy of click of its own
except ImportError:  # pragma: no cover - older typer: click itself
    import click

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "weights").glob("*/README.md"))]


def _complete(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:  # a quoted argument going on to the next line, as in a shell
        return False
    return True


def recipe_lines(page: Path) -> list[str]:
    """The `tfcli` command lines of a page's fenced blocks ('$ ' and VAR=value prefixes taken off,
    lines ending in '\\' and quotes over several lines joined as a shell joins them)."""
    found = []
    for block in re.findall(r"```[\w-]*\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL):
        pending = ""
        for line in block.splitlines():
            line = line.rstrip().removeprefix("$ ")
            if pending:
                pending += ("\n" + line) if not pending.endswith(" ") else line.strip()
            else:
                m = re.match(r"^(?:[A-Z_]+=\S+ )*(tfcli .*)$", line)
                if not m:
                    continue
                pending = m[1]
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip() + " "
            elif _complete(pending):
                found.append(pending)
                pending = ""
    return found


RECIPES = [(page.relative_to(ROOT).as_posix(), line) for page in PAGES for line in recipe_lines(page)]


def parse(line: str) -> None:
    """Parse `line` down to its command, as `tfcli` would before running it (raises click's errors)."""
    from typer.main import get_command

    from tfcli.cli import app

    line = re.sub(r"\"\$\(tfcli data path [\w-]+\)\"", "corpus.txt", line)
    args = shlex.split(line, comments=True)[1:]
    cmd, name, parent = get_command(app), "tfcli", None
    while True:
        ctx = cmd.make_context(name, list(args), parent=parent)
        if not hasattr(cmd, "resolve_command"):  # a command, not a group
            return
        rest = [*getattr(ctx, "_protected_args", []), *getattr(ctx, "protected_args", []), *ctx.args]
        if not rest:
            return
        name, cmd, args = cmd.resolve_command(ctx, rest)
        parent = ctx


def test_the_pages_have_recipes():
    assert len(RECIPES) >= 80
    assert any("features train" in line and "tfcli data path" in line for _, line in RECIPES)


@pytest.mark.parametrize("page, line", RECIPES, ids=[f"{p}:{i}" for i, (p, _) in enumerate(RECIPES)])
def test_recipe_parses_as_written(page, line):
    try:
        parse(line)
    except typer.Exit:  # --help, --version: parsed, then done
        pass
    except click.ClickException as e:
        pytest.fail(f"{page}: {line!r}: {e.format_message()}")


@pytest.mark.parametrize("line", [
    "tfcli generate 'hi' --temprature 0.5",
    "tfcli data pull",
    "tfcli features train corpus.txt --steps many",
    "tfcli nosuch thing",
])  # fmt: skip
def test_a_wrong_line_is_caught(line):
    with pytest.raises(click.ClickException):
        parse(line)
