"""The one layout rule: every line fits the terminal (80 columns when piped), and is cut only where
a reader would cut it.

- Prose wraps between words (Rich does it for any text not printed with soft_wrap or no_wrap).
- A command line (a help example, a hint to type) breaks between its arguments, never inside a
  quoted one, with a shell's continuation (' \\' at the end, the rest indented), so that a copy of
  the lines still runs.
- A table keeps its numbers and labels whole: what does not fit goes on in a second table or a
  second line, never an ellipsis inside a number.
- A path or a URL longer than the width is left whole: a terminal wraps it, and a copy pastes it.
"""

from __future__ import annotations

import re

from rich.cells import cell_len

# A shell word: runs of unquoted characters and quoted strings, glued ("a b"c is one word).
_WORD = re.compile(r"""(?:[^\s"']+|"(?:[^"\\]|\\.)*"|'[^']*')+""")
CONTINUATION = 4  # the extra indent of a command's continuation lines


def command_lines(line: str, width: int) -> list[str]:
    """A command line (its indent kept) as lines of at most `width` cells, broken between its
    words with ' \\' at the end of each line but the last; a word wider than a line stays whole."""
    if cell_len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    words = _WORD.findall(line.strip())
    if " ".join(words) != line.strip():  # not a plain command (unbalanced quotes, tabs): left as it is
        return [line]
    lines, current = [], indent + words[0]
    for w in words[1:]:
        if cell_len(current) + 1 + cell_len(w) + 2 <= width:  # room for the word and a ' \'
            current += " " + w
        else:
            lines.append(current + " \\")
            current = indent + " " * CONTINUATION + w
    lines.append(current)
    return lines


def is_command(line: str) -> bool:
    """A line of help that is an example to type: indented, starting with 'tfcli', '$ tfcli', 'curl'
    (serve's) or a pipe into tfcli ('echo ... | tfcli')."""
    s = line.strip()
    return line[:1] == " " and (s.startswith(("tfcli ", "$ tfcli ", "curl ", "python ")) or " | tfcli " in s)


def fit_examples(text: str, width: int) -> str:
    """A help text whose example lines are broken to `width` by command_lines."""
    out = []
    for line in text.split("\n"):
        out.extend(command_lines(line, width) if is_command(line) else [line])
    return "\n".join(out)


# a path or a URL: a word with a slash (Chinese punctuation ends it)
_PATH = re.compile(r"([^\s（）：，；。]*/[^\s（）：，；。]*)")


def prose_lines(text: str, width: int) -> list[str]:
    """A sentence as lines of at most `width` cells: English between words, Chinese between
    characters (views/prose.py), a path or URL never broken: one too long for a line has a line
    of its own, however wide."""
    from .views.prose import wrap_chinese

    lines: list[str] = []
    line = ""
    for k, unit in enumerate(_PATH.split(text)):
        if not unit:
            continue
        if k % 2:  # a path: whole, on this line if it fits, else on the next
            if line.strip() and cell_len(line + unit) > width:
                lines.append(line.rstrip())
                line = ""
            line += unit
            if cell_len(line) > width:
                lines.append(line)
                line = ""
            continue
        pieces = wrap_chinese((line + unit).lstrip() if not line else line + unit, width)
        lines += pieces[:-1]
        line = (pieces[-1] if pieces else "") + (" " if unit[-1:].isspace() else "")  # the space before a path
    if line.strip():
        lines.append(line.rstrip())
    return lines
