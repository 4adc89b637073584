"""The two Rich consoles: stdout for results, stderr for progress, statistics, warnings and errors.

Rich already drops colour when a stream is not a terminal or NO_COLOR is set. Whatever a message
or a table holds (a path, a tensor name, a model's token), nothing in it reaches the terminal as a
control: warn, note and the error line show the text escaped (engine/errors.py `printable`), without
markup or emoji codes, and the consoles themselves escape any control character left in the text
they draw, as a last guard for every command.
"""

from __future__ import annotations

import re

from rich.console import Console as RichConsole
from rich.segment import Segment
from rich.text import Text

from tfcli.engine.errors import printable


class Console(RichConsole):
    def __init__(self, **options) -> None:
        super().__init__(**options)
        # Rich reads COLUMNS and LINES once, when a console is made (at import here); its `size` reads
        # them each time it is asked when no width was fixed, so a width set later is the one drawn to.
        self._width = options.get("width")
        self._height = options.get("height")

    def _check_buffer(self) -> None:
        # stdout first, then this: when both streams go to one pipe (`2>&1 | cat`), whatever the
        # text wrote is in the pipe before a line of statistics or a warning, so they never share
        # a line (`... a good to7 prompt tokens`). Every line on stderr passes here, so no command
        # needs to remember to flush.
        if self.stderr and self._buffer_index == 0 and self._buffer:
            _flush_stdout()
        super()._check_buffer()

    def on_broken_pipe(self) -> None:
        # Rich would exit with code 1 here; the error boundary (cli/__init__.py) ends a command whose
        # reader went away (`tfcli params | head`) quietly and with 0, whichever way it noticed.
        self.quiet = True
        raise BrokenPipeError

    def _render_buffer(self, buffer) -> str:
        # Rich's own escape codes travel as styles and control segments; the text of the other
        # segments is ours or the user's, and a control character in it is shown, never obeyed.
        text = super()._render_buffer(s if s.control or s.text == "\n" else Segment(_visible(s.text), s.style)
                                      for s in buffer)
        if not self.is_terminal:
            # Rich pads table cells and wrapped lines to the width; in a pipe or a file those trailing
            # spaces are only noise for diff, grep and editors.
            text = _TRAILING.sub("", text)
        return text


_TRAILING = re.compile(r"[ \t]+(?=\n)")


def _flush_stdout() -> None:
    import sys

    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):  # a closed or full stdout is the error boundary's to say, not a warning's
        pass
    except BaseException as e:  # the boundary's ReaderGone: stdout already points at /dev/null
        if type(e).__name__ != "ReaderGone":
            raise


def _visible(text: str) -> str:
    return text if text.isprintable() else "\n".join(printable(line) for line in text.split("\n"))


def _sane_columns() -> None:
    """COLUMNS=0 (or -5, or text) made Rich draw every table zero wide: an empty stdout with exit 0.
    A width that is not a positive number is ignored, as if unset (the terminal's, else 80)."""
    import os

    value = os.environ.get("COLUMNS")
    if value is not None and not (value.isascii() and value.isdigit() and value.strip("0")):
        del os.environ["COLUMNS"]


_sane_columns()
# emoji=False: `:thumbs_up:` in a name stays those characters.
out = Console(highlight=False, emoji=False)
err = Console(stderr=True, highlight=False, emoji=False)


def shown(text: str, style: str = "") -> Text:
    """A string from a user, a file or a model as a Rich Text: control characters escaped, no markup."""
    return Text(printable(str(text)), style=style)


MESSAGE_CHARS = 2_000  # a message echoes names, words and paths: a 50 KB word is not read back whole


def capped(text: str, limit: int = MESSAGE_CHARS) -> str:
    """text cut in the middle when longer than limit, keeping its start and its end (the hint)."""
    if len(text) <= limit:
        return text
    keep = (limit - 40) // 2
    return f"{text[:keep]} … ({len(text) - 2 * keep:,} characters cut) … {text[-keep:]}"


def line(label: str, style: str, message: str) -> None:
    """One line on stderr: `label: message`, the message escaped (no markup, no controls, no second
    line) and capped (MESSAGE_CHARS)."""
    err.print(Text.assemble((label, style), " ", capped(printable(message))), soft_wrap=True)


def warn(message: str, wrap: bool = False) -> None:
    """`warning: message` on stderr: one line (a script greps it); with `wrap`, prose for a reader
    wrapped between words (Chinese between characters) to the width, as note() wraps it."""
    from .lang import zh

    label = "警告：" if zh() else "warning:"
    if not wrap:
        line(label, "yellow", message)
        return
    from .layout import prose_lines

    for k, piece in enumerate(prose_lines(label + " " + capped(printable(message)), err.width)):
        head, rest = (label, piece[len(label) :]) if k == 0 else ("", piece)
        err.print(Text.assemble((head, "yellow"), rest), soft_wrap=True)


def note(message: str, wrap: bool = False) -> None:
    """A line on stderr, dim. A statistic or a message a script reads stays one line whatever the
    width (a terminal wraps it itself); with `wrap`, prose for a reader (a banner, where a page was
    written) is wrapped between words to the width (cli/layout.py), Chinese between characters."""
    if not wrap:
        err.print(shown(message, "dim"), soft_wrap=True)
        return
    from .layout import prose_lines

    for piece in prose_lines(printable(message), err.width):
        err.print(Text(piece, style="dim"), soft_wrap=True)


def for_terminal(text: str) -> str:
    """Generated text for a terminal: newlines and tabs kept, every other control character shown
    escaped (a model can write ESC too). For a pipe or a file the text is the product and stays as
    the model wrote it. Per character, so that a sequence split across tokens is escaped all the same."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in "\n\t" else printable(ch) for ch in text)
