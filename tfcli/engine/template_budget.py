"""The budget a chat template renders under (engine/chat.py renders; this module bounds it).

One budget per render, RENDER_SECONDS and OUTPUT_CHARS, on any thread: the server renders on a
worker thread, where no signal can interrupt anything. The time is checked at every token while
the template is parsed (_parse_budget), at every item of every `{% for %}` loop (_checked_loops
rewrites the parsed template so that each loop draws its items through _Checked before Jinja
generates code), and at every call, filter, test, attribute, operator and piece of output (the
sandbox's hooks in chat._bounded_environment). What a value would write is estimated before it is
built (_estimated_chars: a list of a thousand references to one long string costs nothing to hold
and gigabytes to print). A timer interrupts the main thread at the deadline; elsewhere a watchdog
raises the bound in the rendering thread, for Python loops inside a library a filter calls (both in
template_timers.py). The names are private to engine/chat.py, which re-exports what callers use.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time

from .errors import TfcliError


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


class _ThreadBudget(threading.local):
    """The budget of the render running on this thread. One environment serves every thread and
    compiles a template once (a long real template, Kimi's, takes a second to compile); what it
    checks against is the budget of whichever render calls it."""

    limits: _Limits | None = None

    def check(self, size: int = 0, what: str = "wrote") -> None:
        self.limits.check(size, what)

    def sized(self, value):
        return self.limits.sized(value)

    def writable(self, value, extra: int = 0) -> None:
        self.limits.writable(value, extra)

    def arguments(self, args, kwargs) -> None:
        self.limits.arguments(args, kwargs)

    @property
    def max_chars(self) -> int:
        return self.limits.max_chars


def _time_bound() -> TemplateBoundError:
    return TemplateBoundError(
        f"the model's chat template ran for more than {RENDER_SECONDS:g} s", f"it does not end in time; {FIX}"
    )


class _Expired(BaseException):
    """Raised in a rendering thread by _Watchdog at the deadline (a class: Python raises it there)."""


class _Limits:
    def __init__(self, deadline: float, max_chars: int):
        self.deadline = deadline
        self.max_chars = max_chars
        self.expired = False

    def check(self, size: int = 0, what: str = "wrote") -> None:
        if self.expired or time.monotonic() > self.deadline:
            self.expired = True
            raise _Stop(_time_bound())
        if size > self.max_chars:
            raise _Stop(
                TemplateBoundError(
                    f"the model's chat template {what} more than {self.max_chars:,} characters",
                    f"it does not stop; {FIX}",
                )
            )

    def sized(self, value):
        """value, refused when it is a string or a container longer than the output may be."""
        if isinstance(value, (str, bytes, list, tuple, dict, set)) and len(value) > self.max_chars:
            self.check(len(value), "built a value of")
        return value

    def writable(self, value, extra: int = 0) -> None:
        """Refuse a value whose text (str(), join, JSON) would be longer than the output may be, before
        that text is built: a list of a thousand references to one long string costs nothing to hold
        and gigabytes to print."""
        if isinstance(value, str):
            size = len(value)
        else:
            size = _estimated_chars(value, self.max_chars - extra, self)
        if size + extra > self.max_chars:
            self.check(size + extra, "would write")

    def arguments(self, args, kwargs) -> None:
        """Refuse a number a call would build that much from (a width, a count, a range)."""
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.max_chars:
                raise _Stop(
                    TemplateBoundError(
                        f"the model's chat template asks for a size of {_digits(value)}",
                        f"that is more than any output; {FIX}",
                    )
                )


_WIDE = re.compile(r"\d{8,}")  # a field width in a format string of 10^7 characters or more
CHECKED, WRITABLE = "tfcli_checked", "tfcli_writable"  # the filters _checked_loops puts in a template


def _checked_loops(tree):
    """The parsed template with every loop's items drawn through a checker of the budget (the
    iterable of each `{% for %}`, and of each recursive `loop(...)` call) and every piece of a `~`
    concatenation checked for the size of its text, before Jinja generates the code: a loop over a
    string or a list calls nothing the sandbox sees, so without this only range() could stop it."""
    from jinja2 import nodes

    def wrap(node, name: str):
        return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)

    for loop in tree.find_all(nodes.For):
        loop.iter = wrap(loop.iter, CHECKED)
    for call in tree.find_all(nodes.Call):
        if isinstance(call.node, nodes.Name) and call.node.name == "loop" and call.args:
            call.args[0] = wrap(call.args[0], CHECKED)
    for concat in tree.find_all(nodes.Concat):
        concat.nodes = [wrap(n, WRITABLE) for n in concat.nodes]
    return tree


class _Checked:
    """A loop's items, the budget checked at each one; its length (for `loop.length`) is the
    iterable's own."""

    def __init__(self, value, limits: _Limits):
        self._value = value
        self._limits = limits

    def __iter__(self):
        check = self._limits.check
        for item in self._value:
            check()
            yield item

    def __len__(self) -> int:
        return len(self._value)


def _parse_budget(limits: _Limits):
    """An extension that checks the time at every token while a template is parsed: a template of
    millions of tokens takes minutes to compile, none of which the checks above would see."""
    from jinja2.ext import Extension

    class ParseBudget(Extension):
        def filter_stream(self, stream):
            for token in stream:
                limits.check()
                yield token

    return ParseBudget


def _finalizer(limits: _Limits):
    """What `{{ value }}` writes, its size checked before Jinja turns it into text."""

    def finalize(value):
        if not isinstance(value, str):
            limits.writable(value)
        return value

    return finalize


def _estimated_chars(value, limit: int, limits: _Limits) -> int:
    """About how many characters str() or JSON would write for `value`, counted until `limit` is
    passed (so the count ends even for a structure that holds itself, or the same list many times)."""
    from jinja2.utils import Namespace

    total, stack, seen = 0, [value], 0
    while stack and total <= limit:
        v = stack.pop()
        seen += 1
        if seen % 4096 == 0:
            limits.check()
        if isinstance(v, (str, bytes)):
            total += len(v) + 2
        elif isinstance(v, bool) or v is None:
            total += 5
        elif isinstance(v, int):
            total += v.bit_length() * 3 // 10 + 2
        elif isinstance(v, float):
            total += 24
        elif isinstance(v, dict):
            total += 2
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, Namespace):
            total += 12
            stack.append(getattr(v, "_Namespace__attrs", {}))
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 2 + len(v)
            stack.extend(v)
        elif isinstance(v, _Range):
            total += 16
        else:
            total += 64
    return total


def _check_str_method(limits: _Limits, s: str, name: str, args, kwargs) -> None:
    """Refuse a string method that would write more than the output may hold, before it runs."""
    if name in ("join",) and args:
        items = args[0]
        if isinstance(items, (list, tuple, dict, set, frozenset, str)):
            limits.writable(items, len(s) * len(items))
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = args[2] if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0 else None
        hits = len(s) + 1 if args[0] == "" else s.count(args[0])
        hits = hits if count is None else min(hits, count)
        limits.check(len(s) + hits * max(len(args[1]) - len(args[0]), 0), "would write")
    elif name == "expandtabs":
        width = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(width, int):
            limits.check(len(s) + s.count("\t") * max(width, 0), "would write")
    elif name in ("format", "format_map"):
        for value in (*args, *kwargs.values()):
            limits.writable(value, len(s))


# Filters that turn their value into text: its size is estimated before they run.
_WRITING_FILTERS = frozenset([
    "string", "tojson", "pprint", "join", "e", "escape", "forceescape", "safe", "trim", "upper", "lower",
    "title", "capitalize", "center", "replace", "indent", "wordwrap", "truncate", "striptags", "urlencode",
    "urlize", "xmlattr", "format", "wordcount", "int", "float",
])  # fmt: skip


WRAP_CHARS = 250_000  # wordwrap's split takes about 0.4 s on this much (1.8 s a million characters)


def _check_filter(limits: _Limits, name: str, args, kwargs) -> None:
    """What a filter would write, refused before it runs when the output could not hold it."""
    if not args or name not in _WRITING_FILTERS:
        return
    value = args[0]
    if name == "join" and not isinstance(value, (str, list, tuple, dict, set, frozenset)):
        return  # a generator: its items come through checked calls (map, select)
    sep = args[1] if len(args) > 1 else kwargs.get("d", "")
    extra = len(sep) * len(value) if name == "join" and isinstance(sep, str) else 0
    limits.writable(value, extra)
    if not isinstance(value, str):
        return
    if name == "indent":
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        wide = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        limits.check(len(value) + (value.count("\n") + 2) * max(wide, 0), "would write")
    elif name == "replace" and len(args) >= 3:
        _check_str_method(limits, value, "replace", args[1:], {})
    elif name == "wordwrap":
        if len(value) > WRAP_CHARS:  # textwrap splits the text with one regular expression: no check can enter it
            raise _Stop(
                TemplateBoundError(
                    f"the model's chat template wraps a text of more than {WRAP_CHARS:,} characters", FIX
                )
            )
        wrap = args[3] if len(args) > 3 else kwargs.get("wrapstring")
        if isinstance(wrap, str):
            limits.check(len(value) + (len(value) + 1) * len(wrap), "would write")


def _checked_sum(limits: _Limits):
    """Jinja's sum, its additions made here one at a time, each checked: Python's sum() of lists
    or strings copies what it has built at every step, a quadratic loop no check could enter."""
    from jinja2.filters import make_attrgetter
    from jinja2.utils import pass_environment

    @pass_environment
    def do_sum(environment, iterable, attribute=None, start=0):
        if attribute is not None:
            iterable = map(make_attrgetter(environment, attribute), iterable)
        if isinstance(start, (int, float)) and not isinstance(start, bool):
            items = [limits.check() or item for item in iterable]
            if all(isinstance(i, (int, float)) for i in items):
                return sum(items, start)  # numbers: no copying, and math.fsum-like care as Python's sum
            iterable = items
        total = start
        for item in iterable:
            limits.check()
            total = limits.sized(total + item)
        return total

    return do_sum


def _bounded_lipsum(limits: _Limits):
    """Jinja's lipsum (a global of every environment), its paragraphs and words counted against the
    output before any is made."""
    from jinja2.utils import generate_lorem_ipsum

    def lipsum(n=5, html=True, min=20, max=100):  # noqa: A002 - jinja's own names
        words = n * max if isinstance(n, int) and isinstance(max, int) and n > 0 and max > 0 else 0
        if words * 12 > limits.max_chars:
            raise _Stop(
                TemplateBoundError(
                    f"the model's chat template asks lipsum for {_digits(words)} words",
                    f"that is more than any output; {FIX}",
                )
            )
        return generate_lorem_ipsum(n, html, min, max)

    return lipsum


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


def _passes_first(f) -> bool:
    """Whether Jinja passes the filter its context, environment or eval context before the value."""
    return getattr(f, "jinja_pass_arg", None) is not None


def _checked_filter(limits: _Limits, name: str, f):
    @functools.wraps(f)  # keeps jinja's pass_context / pass_environment marks
    def checked(*args, **kwargs):
        limits.check()
        limits.arguments(args, kwargs)
        _check_filter(limits, name, args[1:] if _passes_first(f) else args, kwargs)
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
                raise big(
                    f"the model's chat template repeats a value {_digits(n)} times",
                    f"that is more than any output; {FIX}",
                )
        if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > 100_000:
            raise big("the model's chat template multiplies numbers of more than 100,000 bits", FIX)
    elif operator == "**":
        if isinstance(left, (int, float)) and isinstance(right, (int, float)) and abs(left) > 1:
            bits = abs(right) * math.log2(abs(left)) if math.isfinite(right) else math.inf
            if bits > 100_000:
                raise big(f"the model's chat template raises a number to the power {_digits(right)}", FIX)
    elif operator == "+":
        if (
            isinstance(left, (str, list, tuple))
            and isinstance(right, (str, list, tuple))
            and len(left) + len(right) > limits.max_chars
        ):
            limits.check(len(left) + len(right), "built a value of")
    elif operator == "%" and isinstance(left, str):
        _check_format(limits, left)


def _check_format(limits: _Limits, fmt: str) -> None:
    if _WIDE.search(fmt):
        raise _Stop(
            TemplateBoundError("the model's chat template formats a field of ten million characters or more", FIX)
        )


def _digits(n) -> str:
    text = (
        f"{n:,}" if isinstance(n, int) and abs(n) < 10**30 else "an enormous number" if isinstance(n, int) else f"{n:g}"
    )
    return text
