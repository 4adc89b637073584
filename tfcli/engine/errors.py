"""Errors the user can fix.

Every problem caused by input (a file, a flag, a prompt) is raised as a `TfcliError` carrying a
one-line message and, where there is one, a hint that says how to fix it. The CLI prints these as a
single line and exits with `exit_code`; anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

import re


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (ESC, CR, backspace, a newline that would
    start a second line, C1 controls, bidi overrides, lone surrogates) written as a visible escape,
    ESC as \\x1b: a name from a file or an argument can then neither move the cursor, retitle the
    window or write the clipboard, nor forge another line of output."""
    if text.isprintable():  # the common case, at C speed
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a file name that is not UTF-8 (PEP 383): the byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(value: object, limit: int = 60) -> str:
    """A value read from a file, for a message: its repr, cut so that a corrupt file cannot flood
    the terminal or turn one line into many."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int of more than 4300 digits, a list nested past the stack
        text = f"<a {type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown_number(n: int) -> str:
    """An integer with thousands separators, or cut short when absurdly long."""
    return f"{n:,}" if abs(n) < 10**24 else shown(n, 24)


# The settings the engine validates, as its errors name them: `{temperature}` in a message is the
# field; the command line shows its flag there (cli/options.FLAGS), chat's /set its knob name.
FIELDS = frozenset({
    "max_new_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "repeat_last_n", "seed",
    "samples", "stop", "window", "stride", "lookup", "slide", "truncate",
})  # fmt: skip
_FIELD = re.compile(r"\{([a-z_]+)\}")


class TfcliError(Exception):
    """A problem the user can fix; `hint` says how. A setting is named as `{field}` (FIELDS)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self, names: dict[str, str] | None = None) -> str:
        """The message and hint, each `{field}` named as `names` says (default: the field itself)."""
        names = names or {}

        def named(text: str) -> str:
            return _FIELD.sub(lambda m: names.get(m.group(1), m.group(1)) if m.group(1) in FIELDS else m.group(0), text)

        message = named(self.message)
        return f"{message} ({named(self.hint)})" if self.hint else message

    def __str__(self) -> str:
        return self.render()


class UsageError(TfcliError):
    """An impossible option value or combination (exit code 2, like a bad flag)."""

    exit_code = 2


class ModelNotFoundError(TfcliError):
    """A model name or path that does not lead to a model folder."""


class CheckpointError(TfcliError):
    """A model folder or weight file that is missing, corrupt or inconsistent with its config."""


class ConfigError(CheckpointError):
    """A config.json that is missing, malformed or describes an impossible model."""


class TokenizerError(CheckpointError):
    """A tokenizer.json that is missing or malformed, or text it cannot encode."""


class PromptError(TfcliError):
    """A prompt that cannot be run: empty, or longer than the model's context."""

    exit_code = 2


class ResourceError(TfcliError):
    """Something that would need more memory than the machine has; refused before it is tried."""


class GGUFError(CheckpointError):
    """A GGUF file that is not one, is truncated, or uses an unsupported architecture or type."""


class PullError(TfcliError):
    """Obtaining a model failed (offline, package index unreachable, interrupted)."""
