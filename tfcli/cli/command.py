"""What every tfcli command and the app share on top of Typer: flags shown as flags, and start-up.

Two things Typer 0.2x does that a command line should not:

- Its Rich help prints a value type for every option, flags included (`--chat <bool>`), though a
  flag takes no value; its plain help skips them (core.TyperOption.get_help_record checks is_flag,
  rich_utils does not). A flag is given an empty metavar here, which both helps print as nothing.
- It converts every value, even a default, through a pydantic TypeAdapter, so that the first
  command-line value costs the import of pydantic (about 50 ms, a sixth of `tfcli params`'s start).
  tfcli's options are str, int, float, bool, Path, list[str] and str Enums: those are converted here
  with click's rules and click's messages, and anything else is left to Typer.

And one thing that costs start-up: rendering the help imports typer.rich_utils, which imports
rich.markdown (markdown-it) and rich.traceback (pygments) at its top, for the "markdown" markup
mode and for pretty tracebacks, neither of which tfcli uses: about a third of `tfcli --help`.
`light_help()` imports typer.rich_utils with those two names standing in for the real modules,
each loading the real one if it is ever used.

All three reach into Typer's internals (metavar, _runtime_param, rich_utils' imports): on a Typer
without them nothing is changed and Typer's own behaviour stands.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

try:
    from typer._coercion import RuntimeParam
except ImportError:  # a Typer before 0.22 converts with click's types, which are already cheap
    RuntimeParam = None


INTERRUPTED = 130  # the exit code after Ctrl-C: 128 + SIGINT, as a shell reports a process it ended


def interrupted() -> typer.Exit:
    """What a command raises after Ctrl-C once it has kept what it made (the text so far, a
    checkpoint): exit 130 and no error line, the partial output being the answer. A Ctrl-C that no
    command catches reaches the error boundary (cli/__init__.py): `error: interrupted`, 130 too."""
    return typer.Exit(INTERRUPTED)


# an on/off flag's long names, as the help joins them -> its --no- names (names_on_lines)
_NEGATIVES: dict[str, str] = {}


def tidy(params: list) -> None:
    """Flags without a type in the help, and plain values converted without pydantic."""
    for param in params:
        negative = [o for o in getattr(param, "secondary_opts", ()) if o.startswith("--")]
        if negative:
            _NEGATIVES[",".join(o for o in param.opts if o.startswith("--"))] = ",".join(negative)
        if getattr(param, "is_flag", False) and not getattr(param, "count", False) and param.metavar is None:
            param.metavar = ""
        if RuntimeParam is not None and getattr(param, "_runtime_param", False) is None:
            light = _light(param)
            if light is not None:
                param._runtime_param = light


class Tidy:
    """tidy() applied to a command's parameters (--help included, which click adds when they are
    asked for), and light_help() before its help is drawn: for the commands and for the app."""

    def get_params(self, ctx) -> list:
        params = super().get_params(ctx)
        tidy(params)
        return params

    def format_help(self, ctx, formatter) -> None:
        light_help()
        names_on_lines()
        given = self.help
        if given:  # the examples broken between their arguments to the width the help is drawn at (cli/layout.py)
            from .layout import fit_examples

            self.help = fit_examples(given, help_width() - 2)  # Typer pads the help text by a column each side
        try:
            return super().format_help(ctx, formatter)
        finally:
            self.help = given


def help_width() -> int:
    """The width Typer's Rich help is drawn at: its console's (TERMINAL_WIDTH, else COLUMNS or the
    terminal, else 80)."""
    try:
        from typer import rich_utils

        return rich_utils._get_rich_console().width
    except Exception:  # noqa: BLE001 - a Typer laid out otherwise: the terminal's width
        import shutil

        return shutil.get_terminal_size((80, 24)).columns


def names_on_lines() -> None:
    """An option's long names one per line in the Rich help: Typer joins them with ',' and no
    space, which Rich cannot wrap, so at 80 columns '--repetition-penalty,--repeat-penalty' was
    cut to '--repetition-penalty,--repea…'. An on/off flag's --no- name goes under its name too,
    not in a column of its own, which at 80 columns cut '--no-batch-invariant' to
    '--no-batch-invari…' and left the help text 18 columns."""
    import sys

    rich_utils = sys.modules.get("typer.rich_utils")
    hl, negative = getattr(rich_utils, "highlighter", None), getattr(rich_utils, "negative_highlighter", None)
    if hl is None or negative is None or getattr(hl, "_tfcli_lines", False):
        return

    def highlighter(text, *args, **kwargs):
        if isinstance(text, str) and text in _NEGATIVES:
            text += "," + _NEGATIVES[text]
        if isinstance(text, str) and text.startswith("--") and ",--" in text:
            text = text.replace(",--", ",\n--")
        return hl(text, *args, **kwargs)

    def negative_highlighter(text, *args, **kwargs):
        return negative("" if isinstance(text, str) and text in _NEGATIVES.values() else text, *args, **kwargs)

    highlighter._tfcli_lines = True
    rich_utils.highlighter, rich_utils.negative_highlighter = highlighter, negative_highlighter


class Command(Tidy, TyperCommand):
    """A tfcli command: Typer's, tidied."""


def light_help() -> None:
    """Import typer.rich_utils without rich.markdown and rich.traceback (see the module docstring)."""
    import sys

    if "typer.rich_utils" in sys.modules:
        return
    stand_ins = {}
    for module, name in (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback")):
        if module not in sys.modules:
            stand_ins[module] = sys.modules[module] = _stand_in(module, name)
    try:
        import typer.rich_utils  # noqa: F401
    except Exception:  # noqa: BLE001 - a Typer laid out otherwise: Typer imports its own way later
        pass
    finally:
        for module, stand_in in stand_ins.items():
            if sys.modules.get(module) is stand_in:
                del sys.modules[module]  # the next `import rich.markdown` gets the real module


def _stand_in(module: str, name: str):
    """A module holding one class that, when first used, imports the real `module` and becomes its `name`."""
    import importlib
    import types

    stand_in = types.ModuleType(module)

    class Lazy:
        def __new__(cls, *args, **kwargs):
            return getattr(importlib.import_module(module), name)(*args, **kwargs)

        @classmethod
        def from_exception(cls, *args, **kwargs):  # Traceback's constructor used by typer's pretty exceptions
            return getattr(importlib.import_module(module), name).from_exception(*args, **kwargs)

    Lazy.__name__ = Lazy.__qualname__ = name
    setattr(stand_in, name, Lazy)
    return stand_in


def _light(param):
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or descriptor.file_annotation is not None:
        return None
    info = descriptor.parameter_info
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return None
    if getattr(info, "min", None) is not None or getattr(info, "max", None) is not None:
        return None
    annotation = descriptor.annotation
    many = getattr(annotation, "__origin__", None) is list
    kind = annotation.__args__[0] if many and len(getattr(annotation, "__args__", ())) == 1 else annotation
    if kind is Path or (isinstance(kind, type) and issubclass(kind, Path)):
        # A path as typed; any check click would make on it (exists=, dir_okay=, ...) is Typer's to do.
        checks = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False, "resolve_path": False,
                  "allow_dash": False, "path_type": None}
        if any(getattr(info, k, v) != v for k, v in checks.items()):
            return None
    elif not (kind in (str, int, float, bool)
              or (isinstance(kind, type) and issubclass(kind, Enum) and issubclass(kind, str))):
        return None
    return _Plain(parameter_info=info, annotation=annotation, kind=kind, many=many)


if RuntimeParam is not None:
    from dataclasses import dataclass

    from typer._click.exceptions import BadParameter

    _TRUE = {"1", "true", "t", "yes", "y", "on"}
    _FALSE = {"0", "false", "f", "no", "n", "off"}

    @dataclass(frozen=True)
    class _Plain(RuntimeParam):
        """Conversion of a str, int, float, bool or str-Enum value (or a list of them), as click does."""

        kind: Any = str
        many: bool = False

        def _coerce_value(self, value: Any, param, ctx) -> Any:
            if self.many:
                items = value if isinstance(value, (list, tuple)) else [value]
                return [self._one(v, param, ctx) for v in items]
            return self._one(value, param, ctx)

        def _one(self, value: Any, param, ctx) -> Any:
            kind = self.kind
            if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
                return value
            text = str(value)
            try:
                if kind is bool:
                    low = text.strip().lower()
                    if low in _TRUE or low in _FALSE:
                        return low in _TRUE
                    raise ValueError
                if kind is int or kind is float:
                    return kind(text)
                if kind is str:
                    return text
                if issubclass(kind, Path):
                    return kind(text)
                return _member(kind, text, self.parameter_info.case_sensitive)
            except ValueError:
                pass
            # an echo is capped
            shown = repr(text) if len(text) <= 60 else repr(text[:40]) + f"... ({len(text):,} characters)"
            digits = text.strip().lstrip("+-")
            if issubclass(kind, Enum):
                choices = ", ".join(repr(m.value) for m in kind)
                message = f"{shown} is not one of {choices}."
            elif kind in (int, float) and digits.isascii() and digits.isdigit():
                # More digits than Python converts (4,300): a number, but larger than any option takes.
                message = f"{shown} is far too large a number ({len(digits):,} digits)."
            else:
                kinds = {int: "integer", float: "number", bool: "boolean"}
                message = f"{shown} is not a valid {kinds.get(kind, kind.__name__)}."
            raise BadParameter(message, ctx=ctx, param=param)
else:  # pragma: no cover - older Typer
    _Plain = None


def _member(kind: type[Enum], text: str, case_sensitive: bool) -> Enum:
    for member in kind:
        if member.value == text or (not case_sensitive and str(member.value).lower() == text.lower()):
            return member
    raise ValueError(text)
