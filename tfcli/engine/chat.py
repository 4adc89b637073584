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
reaching Python, and one budget (engine/template_budget.py: RENDER_SECONDS, OUTPUT_CHARS) keeps it
from running forever or filling memory, on any thread. The time is checked at every token parsed,
every item of every loop, every call, filter, test, attribute, operator and piece of output; what
a value would write is estimated before it is built (`'x' * 10**9`, `range(10**9)`,
`'x'|center(10**9)`, a list of a thousand references to one long string printed or joined).
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .errors import TfcliError, printable
from .files import TEMPLATE_BYTES, read_small_text
from .template_budget import (
    CHECKED, FIX, OUTPUT_CHARS, RENDER_SECONDS, WRITABLE, TemplateBoundError, _bounded_lipsum, _Checked,
    _check_binop, _check_format, _check_str_method, _checked_filter, _checked_loops, _checked_sum, _Expired,
    _finalizer, _Limits, _parse_budget, _Range, _Stop, _ThreadBudget, _time_bound,
)  # fmt: skip
from .template_timers import _alarm, _Watchdog


@dataclass(frozen=True)
class ChatTemplate:
    source: str  # the Jinja text
    bos_token: str = ""
    eos_token: str = ""

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True, **variables) -> str:
        """The conversation as the model's text. `variables`: what else the template reads, as
        transformers' apply_chat_template(**kwargs) passes it (`enable_thinking=False`, `tools=[...]`)."""
        try:
            return self._render(messages, add_generation_prompt, variables)
        except _Expired:  # the watchdog struck in _render's own handlers, before it was stopped there
            raise _time_bound() from None

    def _render(self, messages: list[dict[str, str]], add_generation_prompt: bool, variables: dict) -> str:
        from jinja2 import TemplateError

        given = sum(len(str(m.get("content", ""))) for m in messages)
        limits = _Limits(time.monotonic() + RENDER_SECONDS, OUTPUT_CHARS + 4 * given)
        # transformers defines these whether given or not: `{% if tools is not none %}` must see None
        context = {
            "bos_token": self.bos_token, "eos_token": self.eos_token, "tools": None, "documents": None, **variables,
        }
        _BUDGET.limits = limits
        watchdog = _Watchdog(limits)
        try:
            with _alarm(limits), watchdog:
                template = _compiled(self.source)  # compiled under the budget of its first render
                pieces, size = [], 0
                for piece in template.generate(context, messages=messages, add_generation_prompt=add_generation_prompt):
                    size += len(piece)
                    limits.check(size)
                    pieces.append(piece)
            limits.check(0)  # the timer may have fired inside a library call that swallowed it
            return "".join(pieces)
        except _Stop as stop:
            raise stop.error from None
        except _Expired:
            raise _time_bound() from None
        except TfcliError:
            raise
        except TemplateError as e:
            raise TfcliError(f"the model's chat template failed: {_first_line(e)}", FIX) from None
        except MemoryError:
            raise TemplateBoundError("the model's chat template needs more memory than there is", FIX) from None
        except Exception as e:  # noqa: BLE001 - the template is code from the model folder: any failure is the file's
            raise TfcliError(f"the model's chat template failed: {type(e).__name__}: {_first_line(e)}", FIX) from None
        finally:
            watchdog.stop()
            _BUDGET.limits = None


def _raise_exception(message: str):
    raise TfcliError(f"the chat template refused the conversation: {printable(str(message))[:200]}")


_BUDGET = _ThreadBudget()


@functools.cache
def _environment():
    env = _bounded_environment(_BUDGET)
    env.globals["raise_exception"] = _raise_exception
    return env


@functools.lru_cache(maxsize=16)
def _compiled(source: str):
    env = _environment()
    return env.from_string(_checked_loops(env.parse(source)))


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
            if isinstance(getattr(__obj, "__self__", None), str):  # a string's method: what it would write
                _check_str_method(limits, __obj.__self__, __obj.__name__, args, kwargs)
            return limits.sized(super().call(__context, __obj, *args, **kwargs))

        def call_test(self, name, value, args=None, kwargs=None, context=None, eval_ctx=None):
            limits.check()  # `select('test')` calls it once an item
            return super().call_test(name, value, args, kwargs, context, eval_ctx)

        def getattr(self, obj, attribute):
            limits.check()
            if isinstance(obj, str) and attribute in ("format", "format_map"):
                _check_format(limits, obj)  # the sandbox hands out a wrapper, which call() cannot recognise
                formatter = super().getattr(obj, attribute)  # the sandbox's own: attributes in fields stay checked

                def checked_format(*args, **kwargs):
                    for value in (*args, *kwargs.values()):
                        limits.writable(value, len(obj))
                    return formatter(*args, **kwargs)

                return checked_format
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

    env = Bounded(trim_blocks=True, lstrip_blocks=True, finalize=_finalizer(limits),
                  extensions=["jinja2.ext.loopcontrols", _generation_block(), _parse_budget(limits)])  # fmt: skip

    def bounded_range(*args):
        try:
            return _Range(safe_range(*args), limits)  # jinja's range refuses more than MAX_RANGE items
        except OverflowError:
            raise _Stop(
                TemplateBoundError(
                    f"the model's chat template asks for a range of more than {MAX_RANGE:,} items",
                    f"that is more than any output; {FIX}",
                )
            ) from None

    env.globals["range"] = bounded_range
    env.globals["strftime_now"] = _strftime_now  # Llama 3.x dates its system turn
    env.globals["namespace"] = _Namespace
    env.globals["dict"] = _TemplateDict()
    env.globals["lipsum"] = _bounded_lipsum(limits)
    env.filters["tojson"] = _tojson
    env.filters["sum"] = _checked_sum(limits)
    env.filters = {name: _checked_filter(limits, name, f) for name, f in env.filters.items()}
    env.filters[CHECKED] = lambda value: _Checked(value, limits)
    env.filters[WRITABLE] = lambda value: limits.writable(value) or value
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
    if any(
        len(s) > JSON_SPACING_CHARS if isinstance(s, str) else isinstance(s, int) and s > JSON_SPACING_CHARS
        for s in spacing
    ):
        raise _Stop(
            TemplateBoundError(
                f"the model's chat template asks tojson for an indent or separator wider than {JSON_SPACING_CHARS}", FIX
            )
        )
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    """transformers' strftime_now: the local date and time in a strftime format."""
    if isinstance(fmt, str) and len(fmt) > DATE_FORMAT_CHARS:
        raise _Stop(
            TemplateBoundError(
                f"the model's chat template gives strftime_now a format of more than {DATE_FORMAT_CHARS} characters",
                FIX,
            )
        )
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
            raise TfcliError(
                f"{printable(str(template_file))} is empty",
                "give a Jinja chat template (a model's chat_template.jinja)",
            )
    elif os.path.lexists(jinja_path):
        source = read_small_text(jinja_path, TEMPLATE_BYTES, TfcliError)
    elif isinstance(cfg.get("chat_template"), str):
        source = cfg["chat_template"]
    elif isinstance(cfg.get("chat_template"), list):  # [{"name": "default", "template": ...}, ...]
        named = {
            t.get("name"): t.get("template")
            for t in cfg["chat_template"]
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        }
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
