"""Chat templates: how a chat model wants a conversation laid out as text.

Hugging Face models ship the layout as a Jinja template (`chat_template.jinja`, or the
`chat_template` field of tokenizer_config.json). It is rendered as transformers renders it
(transformers.utils.chat_template_utils): a sandboxed Jinja environment with trim_blocks/lstrip_blocks
and loop controls (`{% break %}`), its globals `raise_exception`, `strftime_now`, `namespace` and
`dict`, its `tojson` (no HTML escaping, `indent`/`separators`/`sort_keys`), its `{% generation %}`
block, the special tokens as variables, `tools` and `documents` (None unless given), switches such
as Qwen3's `enable_thinking`, and `add_generation_prompt` to open the assistant's turn. Real
templates (Llama 3.x, Qwen2.5/3, Phi-3.5, Gemma 2, SmolLM3...) render to transformers' string
exactly (tests/test_real_templates.py).

A template is a program from the model folder (or a converted GGUF): the sandbox keeps it from
reaching Python, and the bounds here keep it from running forever or filling memory. Its output is
streamed and cut past OUTPUT_CHARS; the time is checked at every call, attribute, operator and
piece of output, and (on the main thread) by a timer that interrupts a loop that does nothing
else; operators, calls and filters that would build a huge value in one step (`'x' * 10**9`,
`range(10**9)`, `'x'|center(10**9)`, `'%999999999d' % 1`) are refused before they run.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
import math
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import TfcliError, printable
from .files import TEMPLATE_BYTES, read_small_text

OUTPUT_CHARS = 4_000_000  # beyond any conversation that fits a context (plus the messages themselves)
RENDER_SECONDS = 2.0  # real templates render in milliseconds
FIX = "check chat_template in the model folder"


class TemplateBoundError(TfcliError):
    """A chat template that ran too long or built too much."""


class _Stop(BaseException):
    """A bound reached inside the template's code, carried out of Jinja untouched: Jinja catches
    Exception to rewrite its traceback, and that rewriting itself failed when the timer struck at an
    instruction without a line number ("'<=' not supported between 'int' and 'NoneType'" took the
    place of the bound's message)."""

    def __init__(self, error: TemplateBoundError):
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class ChatTemplate:
    source: str  # the Jinja text
    bos_token: str = ""
    eos_token: str = ""

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True, **variables) -> str:
        """The conversation as the model's text. `variables`: what else the template reads, as
        transformers' apply_chat_template(**kwargs) passes it (`enable_thinking=False`, `tools=[...]`)."""
        from jinja2 import TemplateError

        def raise_exception(message: str):
            raise TfcliError(f"the chat template refused the conversation: {printable(str(message))[:200]}")

        given = sum(len(str(m.get("content", ""))) for m in messages)
        limits = _Limits(time.monotonic() + RENDER_SECONDS, OUTPUT_CHARS + 4 * given)
        env = _bounded_environment(limits)
        env.globals["raise_exception"] = raise_exception
        # transformers defines these whether given or not: `{% if tools is not none %}` must see None
        context = {"bos_token": self.bos_token, "eos_token": self.eos_token, "tools": None, "documents": None, **variables}
        try:
            with _alarm(limits):
                template = env.from_string(self.source)
                pieces, size = [], 0
                for piece in template.generate(context, messages=messages, add_generation_prompt=add_generation_prompt):
                    size += len(piece)
                    limits.check(size)
                    pieces.append(piece)
            limits.check(0)  # the timer may have fired inside a library call that swallowed it
            return "".join(pieces)
        except _Stop as stop:
            raise stop.error from None
        except TfcliError:
            raise
        except TemplateError as e:
            raise TfcliError(f"the model's chat template failed: {_first_line(e)}", FIX) from None
        except MemoryError:
            raise TemplateBoundError("the model's chat template needs more memory than there is", FIX) from None
        except Exception as e:  # noqa: BLE001 - the template is code from the model folder: any failure is the file's
            raise TfcliError(f"the model's chat template failed: {type(e).__name__}: {_first_line(e)}", FIX) from None


class _Limits:
    def __init__(self, deadline: float, max_chars: int):
        self.deadline = deadline
        self.max_chars = max_chars
        self.expired = False

    def check(self, size: int = 0, what: str = "wrote") -> None:
        if self.expired or time.monotonic() > self.deadline:
            self.expired = True
            raise _Stop(TemplateBoundError(f"the model's chat template ran for more than {RENDER_SECONDS:g} s", f"it does not end in time; {FIX}"))
        if size > self.max_chars:
            raise _Stop(TemplateBoundError(f"the model's chat template {what} more than {self.max_chars:,} characters", f"it does not stop; {FIX}"))

    def sized(self, value):
        """value, refused when it is a string or a container longer than the output may be."""
        if isinstance(value, (str, bytes, list, tuple, dict, set)) and len(value) > self.max_chars:
            self.check(len(value), "built a value of")
        return value

    def arguments(self, args, kwargs) -> None:
        """Refuse a number a call would build that much from (a width, a count, a range)."""
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.max_chars:
                raise _Stop(TemplateBoundError(f"the model's chat template asks for a size of {_digits(value)}", f"that is more than any output; {FIX}"))


_WIDE = re.compile(r"\d{8,}")  # a field width in a format string of 10^7 characters or more


def _bounded_environment(limits: _Limits):
    from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment, safe_range

    class Bounded(ImmutableSandboxedEnvironment):
        # Operators that can build a large value in one step go through call_binop (which also
        # keeps the compiler from folding them into constants at compile time).
        intercepted_binops = frozenset(["*", "**", "%", "+"])

        def call_binop(self, context, operator, left, right):
            limits.check()
            _check_binop(limits, operator, left, right)
            return limits.sized(super().call_binop(context, operator, left, right))

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's own signature
            limits.check()
            limits.arguments(args, kwargs)
            return limits.sized(super().call(__context, __obj, *args, **kwargs))

        def getattr(self, obj, attribute):
            limits.check()
            if isinstance(obj, str) and attribute in ("format", "format_map"):
                _check_format(limits, obj)  # the sandbox hands out a wrapper, which call() cannot recognise
            return limits.sized(super().getattr(obj, attribute))

        def getitem(self, obj, argument):
            limits.check()
            return limits.sized(super().getitem(obj, argument))

        def handle_exception(self, source=None):
            # Jinja rewrites the traceback to point into the template; if that fails (a frame
            # without a line number), the template's own error is raised, not the rewriting's.
            import sys

            original = sys.exc_info()[1]
            try:
                return super().handle_exception(source)
            except BaseException as e:
                if e is original or original is None:
                    raise
                raise original.with_traceback(None) from None

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _generation_block()])

    def bounded_range(*args):
        try:
            return _Range(safe_range(*args), limits)  # jinja's range refuses more than MAX_RANGE items
        except OverflowError:
            raise _Stop(TemplateBoundError(f"the model's chat template asks for a range of more than {MAX_RANGE:,} items", f"that is more than any output; {FIX}")) from None

    env.globals["range"] = bounded_range
    env.globals["strftime_now"] = _strftime_now  # Llama 3.x dates its system turn
    env.globals["namespace"] = _Namespace
    env.globals["dict"] = _TemplateDict()
    env.filters["tojson"] = _tojson
    env.filters = {name: _checked_filter(limits, name, f) for name, f in env.filters.items()}
    return env


# What a template may ask of tojson and strftime_now: an indent or separator is repeated for every
# item and level, a format for every directive, so a wide one would build a huge string in one call
# (real templates indent by 2 or 4 and date with "%d %b %Y").
JSON_SPACING_CHARS = 16
DATE_FORMAT_CHARS = 256


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """transformers' tojson: JSON as json.dumps writes it (Jinja's own escapes <, >, & and ' for HTML
    and takes only `indent`); tool definitions are written with it."""
    spacing = [indent, *(separators if isinstance(separators, (list, tuple)) else [separators])]
    if any(len(s) > JSON_SPACING_CHARS if isinstance(s, str) else isinstance(s, int) and s > JSON_SPACING_CHARS for s in spacing):
        raise _Stop(TemplateBoundError(f"the model's chat template asks tojson for an indent or separator wider than {JSON_SPACING_CHARS}", FIX))
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    """transformers' strftime_now: the local date and time in a strftime format."""
    if isinstance(fmt, str) and len(fmt) > DATE_FORMAT_CHARS:
        raise _Stop(TemplateBoundError(f"the model's chat template gives strftime_now a format of more than {DATE_FORMAT_CHARS} characters", FIX))
    return datetime.now().strftime(fmt)


class _TemplateDict:
    """dict() and dict.fromkeys() for templates, without the class itself (transformers' TemplateDict)."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _Namespace(*args, **kwargs):  # noqa: N802 - a template calls it as a class
    """Jinja's namespace(), refusing names that start with an underscore (as transformers does: a
    namespace's attributes are the one thing a sandboxed template can set)."""
    from jinja2.exceptions import SecurityError
    from jinja2.utils import Namespace

    class TemplateNamespace(Namespace):
        def __setitem__(self, name, value):
            if isinstance(name, str) and name.startswith("_"):
                raise SecurityError(f"a chat template cannot set {name!r} on a namespace")
            super().__setitem__(name, value)

    attrs = dict(*args, **kwargs)
    for name in attrs:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a chat template cannot set {name!r} on a namespace")
    return TemplateNamespace(attrs)


def _generation_block():
    """`{% generation %}...{% endgeneration %}`: transformers marks the assistant's text with it (to
    mask training losses); rendered, it is its body unchanged."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    return Generation


class _Range:
    """range() for templates: a real sequence (length, index, slice, `in`, iterated any number of
    times, as Python's range and as transformers' templates see it), whose iteration checks the time
    every 1,024 items, so that nested loops that write nothing still stop at the deadline off the
    main thread (where no timer can interrupt them)."""

    def __init__(self, r: range, limits: _Limits):
        self._r = r
        self._limits = limits

    def __len__(self) -> int:
        return len(self._r)

    def __getitem__(self, index):
        item = self._r[index]
        return _Range(item, self._limits) if isinstance(item, range) else item

    def __contains__(self, value) -> bool:
        return value in self._r

    def __iter__(self):
        for i, value in enumerate(self._r):
            if i % 1024 == 0:
                self._limits.check()
            yield value

    def __reversed__(self):
        return iter(self[::-1])

    def __eq__(self, other) -> bool:
        return self._r == (other._r if isinstance(other, _Range) else other)

    def __hash__(self) -> int:
        return hash(self._r)

    def __repr__(self) -> str:
        return repr(self._r)

    def __bool__(self) -> bool:
        return bool(self._r)

    def index(self, value) -> int:
        return self._r.index(value)

    def count(self, value) -> int:
        return self._r.count(value)


def _checked_filter(limits: _Limits, name: str, f):
    @functools.wraps(f)  # keeps jinja's pass_context / pass_environment marks
    def checked(*args, **kwargs):
        limits.check()
        limits.arguments(args, kwargs)
        if name == "format" and args and isinstance(args[0], str):
            _check_format(limits, args[0])
        return limits.sized(f(*args, **kwargs))

    return checked


def _check_binop(limits: _Limits, operator: str, left, right) -> None:
    def big(message: str, hint: str) -> _Stop:
        return _Stop(TemplateBoundError(message, hint))

    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * max(n, 0) > limits.max_chars:
                raise big(f"the model's chat template repeats a value {_digits(n)} times", f"that is more than any output; {FIX}")
        if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > 100_000:
            raise big("the model's chat template multiplies numbers of more than 100,000 bits", FIX)
    elif operator == "**":
        if isinstance(left, (int, float)) and isinstance(right, (int, float)) and abs(left) > 1:
            bits = abs(right) * math.log2(abs(left)) if math.isfinite(right) else math.inf
            if bits > 100_000:
                raise big(f"the model's chat template raises a number to the power {_digits(right)}", FIX)
    elif operator == "+":
        if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)) and len(left) + len(right) > limits.max_chars:
            limits.check(len(left) + len(right), "built a value of")
    elif operator == "%" and isinstance(left, str):
        _check_format(limits, left)


def _check_format(limits: _Limits, fmt: str) -> None:
    if _WIDE.search(fmt):
        raise _Stop(TemplateBoundError("the model's chat template formats a field of ten million characters or more", FIX))


def _digits(n) -> str:
    text = f"{n:,}" if isinstance(n, int) and abs(n) < 10**30 else "an enormous number" if isinstance(n, int) else f"{n:g}"
    return text


class _alarm:
    """On the main thread, a timer that interrupts the render at its deadline even inside a loop
    that calls nothing (the checks above never run there). Restored on the way out."""

    def __init__(self, limits: _Limits):
        self.limits = limits
        self.armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")

    def __enter__(self):
        if self.armed:
            def expire(signum, frame):
                self.limits.expired = True
                self.limits.check()

            try:
                self.previous = signal.signal(signal.SIGALRM, expire)
                signal.setitimer(signal.ITIMER_REAL, max(self.limits.deadline - time.monotonic(), 0.001))
            except (ValueError, OSError):  # not allowed here (an embedded interpreter)
                self.armed = False
        return self

    def __exit__(self, *exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


def load_chat_template(folder: Path, template_file: Path | None = None) -> ChatTemplate | None:
    """The folder's chat template, or None for a model without one (a plain language model).
    `template_file`: a Jinja file given beside the model (`--template`), used in place of the
    folder's own, with the folder's special tokens."""
    cfg: dict = {}
    cfg_path = folder / "tokenizer_config.json"
    if os.path.lexists(cfg_path):
        text = read_small_text(cfg_path, TEMPLATE_BYTES, TfcliError)  # a regular file, of bounded size
        try:
            loaded = json.loads(text)
            cfg = loaded if isinstance(loaded, dict) else {}
        except (ValueError, RecursionError):
            raise TfcliError(f"{cfg_path} is not valid JSON", "fix or re-convert the model folder") from None
    source = None
    jinja_path = folder / "chat_template.jinja"
    if template_file is not None:
        source = read_small_text(Path(template_file), TEMPLATE_BYTES, TfcliError)
        if not source.strip():
            raise TfcliError(f"{printable(str(template_file))} is empty", "give a Jinja chat template (a model's chat_template.jinja)")
    elif os.path.lexists(jinja_path):
        source = read_small_text(jinja_path, TEMPLATE_BYTES, TfcliError)
    elif isinstance(cfg.get("chat_template"), str):
        source = cfg["chat_template"]
    elif isinstance(cfg.get("chat_template"), list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in cfg["chat_template"] if isinstance(t, dict) and isinstance(t.get("name"), str)}
        source = named.get("default") or next(iter(named.values()), None)
    if not source:
        return None
    if not isinstance(source, str):
        raise TfcliError(f"the chat_template in {cfg_path} is not text", "fix or re-convert the model folder")

    def token(key: str) -> str:
        value = cfg.get(key)
        if isinstance(value, dict):  # {"content": "<s>", ...}
            value = value.get("content")
        return value if isinstance(value, str) else ""

    return ChatTemplate(source, token("bos_token"), token("eos_token"))


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return printable(text.splitlines()[0][:200]) if text else type(e).__name__
