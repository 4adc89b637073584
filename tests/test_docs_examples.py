"""Every `$ tfcli ...` example of README.md and docs/*.md runs, and prints what the page says it prints.

The conventions a page follows (docs/development.md, "Examples in the docs", says them to writers):

- An example is a line `$ tfcli ...` in a fenced block; the lines after it, up to the next `$ ` line
  or the end of the block, are its output: stdout and stderr as a terminal shows them, piped
  (80 columns, no colour). A quoted argument may go on over several lines, as in a shell.
- A line that is only `...` stands for any number of lines left out.
- `# excerpt` after the command: the lines shown are some of the output's lines, in order.
  Any other comment is prose for the reader and is not compared.
- `+0.00` and `-0.00` are the same figure.
- On a pulled model (quantized: its products round activations to 8 bits, and the CPU's float32
  sums, AVX2 or AVX-512, round some of them the other way), a figure with decimals or of 3+ digits may
  differ by 5 units of its last digit or 2%, a percentage by 2 points or a tenth; words and smaller
  whole numbers (a row's index) may not.
- Lines that carry a timing (`tok/s`, seconds, or a thread count: the statistics lines on stderr)
  are compared with every figure free; when the example shows none, they are left out of the output
  before comparing.
- `<!-- docs-test: skip REASON -->` on the line before a block: its examples are not run (they need
  files an earlier step makes, or a download the suite does not make); the reason is the skip's.

Examples on a pulled model (`smollm2`, `gemma3`) run on the suite's copy (conftest's pulled models)
and are skipped, saying why, when it cannot be had. Everything runs in-process (CliRunner).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s+(.*?)\s*-->")
PULLED = ("smollm2", "gemma3")  # models a page may use that the suite pulls (tests/conftest.py)
TIMING = re.compile(r"tok/s|tokens/s|\d s\b|\d+ threads?\b")
NUMBER = re.compile(r"\d[\d,.]*")
ZERO = re.compile(r"-(0\.0+)(?![\d])")


@dataclass
class Example:
    page: str
    line: int  # 1-based, of the `$ tfcli` line
    command: str
    output: list[str]
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def examples(path: Path) -> list[Example]:
    """The `$ tfcli` examples of one page, in order."""
    lines = path.read_text(encoding="utf-8").split("\n")
    found, i, skip, page = [], 0, None, str(path.relative_to(ROOT))
    while i < len(lines):
        m = SKIP.search(lines[i])
        if m:
            skip = m.group(1)
        if not lines[i].startswith("```"):
            i += 1
            continue
        j = i + 1  # inside the block
        end = next((k for k in range(j, len(lines)) if lines[k].startswith("```")), len(lines))
        k = j
        while k < end:
            if not lines[k].startswith("$ tfcli"):
                k += 1
                continue
            start, command = k, lines[k][2:]
            while not complete(command) and k + 1 < end:  # a quoted argument over several lines
                k += 1
                command += "\n" + lines[k]
            out_start = k + 1
            k = next((n for n in range(out_start, end) if lines[n].startswith("$ ")), end)
            found.append(Example(page, start + 1, command, lines[out_start:k], skip))
        i, skip = end + 1, None
    return found


def complete(command: str) -> bool:
    try:
        shlex.split(command, comments=True)
    except ValueError:  # "No closing quotation"
        return False
    return True


ALL = [e for page in PAGES for e in examples(page)]


def test_the_pages_have_examples():
    """The parser finds the examples (an empty list would pass every check below)."""
    assert len(ALL) >= 20
    assert any(e.page == "README.md" for e in ALL)


def expected_pattern(expected: list[str], excerpt: bool, read_line=None) -> re.Pattern:
    """A regex for the output a page states: `...` lines are any lines, each other line as
    `read_line` reads it (default line_pattern: as printed, timing figures free)."""
    read = read_line or line_pattern
    gap = r"(?:[^\n]*\n)*?"
    parts = [gap if line.strip() == "..." else read(line).pattern + r"\n" for line in expected]
    if excerpt:
        return re.compile(gap + gap.join(parts) + r"(?:[^\n]*\n)*")
    return re.compile("".join(parts))


def line_pattern(line: str) -> re.Pattern:
    """One stated line: as printed, but with every figure free on a line that carries a timing."""
    if TIMING.search(line):
        pattern = r"\d[\d,.]*".join(re.escape(p) for p in NUMBER.split(line))
        return re.compile(re.sub(r"threads?", "threads?", pattern))  # "1 thread", "2 threads"
    return re.compile(re.escape(line))


FIGURE = re.compile(r"[+-]?\d[\d,]*(?:\.\d+%?|%)|[+-]?\d{3,}")  # decimals, a percentage, or 3+ digits


def figures_line(line: str) -> re.Pattern:
    """line_pattern with every figure (decimals, percentages, whole numbers of 3+ digits) of a line without a
    timing captured; smaller whole numbers (a row's index) stay as stated."""
    if TIMING.search(line):
        return line_pattern(line)
    return re.compile(f"({FIGURE.pattern})".join(re.escape(p) for p in FIGURE.split(line)))


def within_rounding(expected: list[str], excerpt: bool, text: str) -> bool:
    """Whether text is what the page states but for figures each near() the stated one."""
    m = expected_pattern(expected, excerpt, figures_line).fullmatch(text)
    stated = [f for line in expected if line.strip() != "..." and not TIMING.search(line) for f in FIGURE.findall(line)]
    return m is not None and all(near(e, a) for e, a in zip(stated, m.groups(), strict=True))


def near(stated: str, got: str) -> bool:
    """Whether a figure printed on another CPU is within the rounding a pulled model's pass allows."""
    if ("." in stated) != ("." in got):
        return False
    e, a = float(stated.rstrip("%").replace(",", "")), float(got.rstrip("%").replace(",", ""))
    if "." not in stated and not stated.endswith("%"):  # 3+ digits: a length, a count
        return abs(a - e) <= 0.02 * abs(e)
    if stated.endswith("%"):
        return abs(a - e) <= max(2, 0.1 * abs(e))
    return abs(a - e) <= max(5 * 10.0 ** -len(stated.split(".")[1].rstrip("%")), 0.02 * abs(e)) + 1e-9


def normal(text: str) -> list[str]:
    """Lines without trailing spaces or blank lines at the end; -0.00 read as +0.00 (the sign of
    a zero rounded from a few float32 steps is the CPU's BLAS kernels' choice)."""
    lines = [ZERO.sub(lambda m: "+" + m.group(1), line.rstrip()) for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run(example: Example, request, monkeypatch, tmp_path):
    args = shlex.split(example.command, comments=True)[1:]
    home = tmp_path / "tfcli-home"
    for name in PULLED:
        if name in args or (args[:1] == ["chat"] and "-m" not in args and name == "smollm2"):
            folder = request.getfixturevalue(f"{name}_folder")
            home = folder.parent.parent  # the suite's TFCLI_HOME: HOME/models/NAME
    monkeypatch.setenv("TFCLI_HOME", str(home))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("COLUMNS", raising=False)
    from tfcli.cli import app

    return CliRunner().invoke(app, args, catch_exceptions=True)


@pytest.mark.parametrize("example", ALL, ids=[e.id for e in ALL])
def test_example_runs_as_shown(example: Example, request, monkeypatch, tmp_path):
    if example.skip:
        pytest.skip(example.skip)
    r = run(example, request, monkeypatch, tmp_path)
    assert r.exit_code == 0, f"{example.id}: exit {r.exit_code}\n{r.output}\n{r.exception!r}"
    expected = normal("\n".join(example.output))
    if not expected:
        return
    lines = [line_pattern(line) for line in expected if line.strip() != "..."]
    stdout = set(normal(r.stdout))
    # stderr's lines the page does not show (progress, the statistics line) are left out
    actual = [a for a in normal(r.output) if a in stdout or any(p.fullmatch(a) for p in lines)]
    excerpt = bool(re.search(r"#\s*excerpt", example.command))
    pattern = expected_pattern(expected, excerpt)
    text = "\n".join(actual) + "\n"
    if pattern.fullmatch(text) is None and any(name in shlex.split(example.command, comments=True) for name in PULLED):
        if within_rounding(expected, excerpt, text):
            return
    assert pattern.fullmatch(text), f"{example.id}: the page says\n" + "\n".join(expected) + "\n\ntfcli printed\n" + text


def test_the_readme_links_every_page_once():
    """Each page of docs/ is linked from README.md exactly once (the reader's way to it)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        links = re.findall(rf"\]\(docs/{re.escape(page.name)}(?:#[^)]*)?\)", readme)
        assert len(links) == 1, f"README.md links docs/{page.name} {len(links)} times"


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300



def test_the_readme_says_what_the_lens_reads_at_layer_0():
    from conftest import doc_text

    readme = doc_text()  # README.md and docs/
    assert "The embedding row reads the input token itself" not in readme
    assert "␣strugg" in readme


def test_a_pulled_models_figures_may_round_the_other_way_but_nothing_else():
    """The tolerance for figures on a pulled model: small differences in decimals and percentages
    pass; another token, another whole number, a figure far off, or a missing line do not."""
    page = ["resid #1           #2", "   29 ␣Paris 8%    ␣T 6%", "   30 ␣Paris 69%   ␣Rome 3%", "cos 0.810 -8.78 626"]

    def passes(printed: list[str]) -> bool:
        return within_rounding(page, False, "\n".join(printed) + "\n")

    assert passes(page)
    assert passes([page[0], "   29 ␣Paris 9%    ␣T 6%", "   30 ␣Paris 69%   ␣Rome 4%", "cos 0.808 -8.92 625"])
    assert not passes([page[0], "   29 ␣Paris 9%    ␣L 6%", *page[2:]])  # another token
    assert not passes([page[0], "   28 ␣Paris 8%    ␣T 6%", *page[2:]])  # another row
    assert not passes([*page[:3], "cos 0.850 -8.78 626"])  # 40 units of the last digit
    assert not passes([*page[:3], "cos 0.810 -8.78 650"])  # a length 4% off
    assert not passes([page[0], "   29 ␣Paris 18%   ␣T 6%", *page[2:]])  # 10 points
    assert not passes(page[:3])
    assert not passes([page[0], "   29 ␣Paris 8%    ␣T 6%", "   31 ␣Paris 69%   ␣Rome 3%", page[3]])  # a small index
