"""The tfcli command line: a Typer app, its commands, and the one error boundary.

Commands live one per file and import the engine (and NumPy) inside their functions, so that
`tfcli --help` and `tfcli params` start without loading what they do not use.
"""

from __future__ import annotations

import errno
import os
import sys
import warnings

import typer
from typer.core import TyperGroup

try:  # typer >= 0.22 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors

from tfcli.engine.errors import TfcliError


class ErrorBoundary(TyperGroup):
    """Turn known errors into one line on stderr and an exit code; let real bugs keep their traceback.

    exit 1: a problem with a file or model the user can fix (TfcliError)
    exit 2: a bad flag or value (click's usage errors, UsageError)
    exit 130: Ctrl-C

    Errors from the OS (a full disk, a name too long for the file system) are worded here too, and
    a warning from a library (a NumPy RuntimeWarning) becomes one `warning:` line, never a raw one
    with a source line.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra)
                _flush_stdout()  # a full disk is noticed here, not by the interpreter as it exits
        except TfcliError as e:
            _fail(str(e), e.exit_code)
        except click_errors.UsageError as e:
            where = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
            _fail(e.format_message() + where, e.exit_code)
        except click_errors.ClickException as e:
            _fail(e.format_message(), e.exit_code)
        except (typer.Abort, KeyboardInterrupt):
            _fail("interrupted", 130)
        except BrokenPipeError:
            # The reader went away (`tfcli ... | head`): not an error worth a message.
            sys.stderr.close()
            sys.exit(0)
        except OSError as e:
            _fail(*_os_error(e))
        if isinstance(rv, int):
            sys.exit(rv)
        sys.exit(0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader went away (`tfcli generate ... | head`): stop quietly, with exit code 0.
            # Typer would turn this into exit 1; and the final flush of stdout would fail again, so
            # stdout is pointed at /dev/null first (the Python docs' advice, under "Note on SIGPIPE").
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError, AttributeError):  # no real file descriptor (tests)
                pass
            raise typer.Exit(0) from None


def _fail(message: str, code: int) -> None:
    from .console import line

    line("error:", "bold red", message)
    sys.exit(code)


_OUTPUT_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _flush_stdout() -> None:
    if sys.stdout is not None:
        sys.stdout.flush()


def _os_error(e: OSError) -> tuple[str, int]:
    """One line, in our words, for an error the OS raised, and its exit code."""
    from tfcli.engine.errors import shown

    where = f": {shown(str(e.filename), 80)}" if e.filename is not None else ""
    if e.errno in _OUTPUT_FULL and _stdout_is_full():
        _silence_stdout()  # the interpreter's last flush of stdout would fail the same way
        return "no space left on the output (free some space, or send the output elsewhere)", 1
    if e.errno in _OUTPUT_FULL:
        return f"no space left on the device{where} (free some space)", 1
    if e.errno == errno.ENAMETOOLONG:
        return f"a file name is too long for the file system{where} (use a shorter model name or path)", 1
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{e.strerror or 'permission denied'}{where} (check the permissions, or use another folder)", 1
    return f"{e.strerror or type(e).__name__}{where} (check the path and the disk)", 1


def _stdout_is_full() -> bool:
    return isinstance(sys.stdout, Output) and sys.stdout.full


class Output:
    """sys.stdout, remembering whether a write to it failed for lack of space, so that the error
    line can say that it is the output (`tfcli ... > /dev/full`) that has no room left."""

    def __init__(self, stream):
        self._stream = stream
        self.full = False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            self.full |= e.errno in _OUTPUT_FULL
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self.full |= e.errno in _OUTPUT_FULL
            raise

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (tests)
        pass


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    from .console import warn

    text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    warn(f"{text} ({category.__name__})")


def _reopen_closed_streams() -> None:
    """`tfcli ... >&-` or `<&-`: a closed standard stream becomes /dev/null, so that reading gives
    end of file and writing goes nowhere, instead of an AttributeError on None."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            new = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: fd itself, in this order
            if new != fd:
                os.dup2(new, fd)
                os.close(new)
        setattr(sys, name, open(fd, mode, encoding="utf-8", errors="replace", closefd=False))


app = typer.Typer(
    cls=ErrorBoundary,
    name="tfcli",
    help="See inside a GPT-style transformer: generate text with a NumPy engine, count its parameters, draw its attention.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# One file per command; each module keeps its heavy imports inside the command function.
from . import attn, bench, chat, generate, params, tokenize  # noqa: E402

app.command("generate")(generate.generate)
app.command("chat")(chat.chat)
app.command("tokenize")(tokenize.tokenize)
app.command("params")(params.params)
app.command("attn")(attn.attn)
app.command("bench")(bench.bench)

from . import convert, explore, models, pull  # noqa: E402

app.command("models")(models.models)
app.command("pull")(pull.pull)
app.command("convert")(convert.convert)
app.command("explore")(explore.explore)

from . import embed, geometry, lens, neurons  # noqa: E402

app.command("lens")(lens.lens)
app.command("embed")(embed.embed)
app.command("neurons")(neurons.neurons)
app.command("geometry")(geometry.geometry)


def main() -> None:
    _reopen_closed_streams()
    # A terminal whose encoding cannot show a character (a Latin-1 locale, PYTHONIOENCODING=ascii)
    # gets '?' for it, not a UnicodeEncodeError in the middle of a generation.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and stream.errors == "strict":
            stream.reconfigure(errors="replace")
    sys.stdout = Output(sys.stdout)
    app(prog_name="tfcli")
