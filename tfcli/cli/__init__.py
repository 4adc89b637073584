"""The tfcli command line: a Typer app, its commands, and the one error boundary.

Commands live one per file and import the engine (and NumPy) inside their functions, so that
`tfcli --help` and `tfcli params` start without loading what they do not use.
"""

from __future__ import annotations

import os
import sys

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
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra)
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
    from rich.markup import escape

    from .console import err

    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True, highlight=False)
    sys.exit(code)


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

from . import convert, models, pull  # noqa: E402

app.command("models")(models.models)
app.command("pull")(pull.pull)
app.command("convert")(convert.convert)

from . import score  # noqa: E402

app.command("score")(score.score)


def main() -> None:
    # A terminal whose encoding cannot show a character (a Latin-1 locale, PYTHONIOENCODING=ascii)
    # gets '?' for it, not a UnicodeEncodeError in the middle of a generation.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and stream.errors == "strict":
            stream.reconfigure(errors="replace")
    app(prog_name="tfcli")
