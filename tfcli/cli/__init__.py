"""The tfcli command line: a Typer app, its commands, and the one error boundary.

Commands live one per file and import the engine (and NumPy) inside their functions, so that
`tfcli --help` and `tfcli params` start without loading what they do not use.
"""

from __future__ import annotations

import errno
import os
import sys
import warnings
from typing import Annotated

import typer
from typer.core import TyperGroup

try:  # typer >= 0.22 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors

from tfcli.engine.errors import TfcliError

from .command import INTERRUPTED, Tidy


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
                given = list(sys.argv[1:] if args is None else args)
                from .lang import remember

                remember(given)  # this run's --lang, for the errors too
                if given[:1] in (["--show-completion"], ["--install-completion"]) and len(given) <= 2:
                    rv = _completion(given[0], given[1] if len(given) > 1 else "")
                else:
                    rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                      standalone_mode=False, **extra)
                _flush_stdout()  # a full disk is noticed here, not by the interpreter as it exits
        except TfcliError as e:
            from .options import FLAGS

            _fail(e.render(FLAGS), e.exit_code)
        except click_errors.UsageError as e:
            where = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
            _fail(_other_names(e.format_message()) + where, e.exit_code)
        except click_errors.ClickException as e:
            _fail(e.format_message(), e.exit_code)
        except (typer.Abort, KeyboardInterrupt, Interrupted):
            _fail("interrupted", INTERRUPTED)
        except ReaderGone:
            sys.exit(0)  # stdout already points at /dev/null (Output.write)
        except OutputClosed:
            _fail("the standard output is closed (>&-): what this command prints cannot be written", 1,
                  "send it to a file, or to /dev/null to discard it")
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
        except KeyboardInterrupt:
            # Typer would turn it into a silent exit 130 (Ctrl-C while a command imports NumPy, say).
            raise Interrupted from None
        except BrokenPipeError:
            # The reader went away (`tfcli generate ... | head`): stop quietly, with exit code 0.
            # Typer would turn this into exit 1; and the final flush of stdout would fail again, so
            # stdout is pointed at /dev/null first (the Python docs' advice, under "Note on SIGPIPE").
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError, AttributeError):  # no real file descriptor (tests)
                pass
            raise typer.Exit(0) from None


# What other tools call a command, and tfcli's name for it (ollama run, llm list, git help).
OTHER_NAMES = {"run": "generate", "complete": "generate", "list": "models", "ls": "models", "help": "--help",
               "info": "show", "remove": "rm", "delete": "rm", "count": "params"}


def _other_names(message: str) -> str:
    """'No such command 'run'.' with tfcli's name for what was meant, when click has no close match."""
    import re

    m = re.fullmatch(r"No such command '([^']*)'\.", message.strip())
    if m and m.group(1).lower() in OTHER_NAMES:
        return f"No such command '{m.group(1)}': did you mean 'tfcli {OTHER_NAMES[m.group(1).lower()]}'?"
    return message


def _fail(message: str, code: int, hint: str | None = None) -> None:
    from . import lang
    from .console import line

    message = f"{message} ({hint})" if hint else message
    line(*(("错误：", "bold red", lang.error(message)) if lang.zh() else ("error:", "bold red", message)))
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


class Interrupted(BaseException):
    """Ctrl-C inside a command, carried past Typer's own handler to the boundary's one line."""


class ReaderGone(BaseException):
    """stdout's reader went away (`tfcli --help | true`). Not an OSError, and outside Exception, so
    that neither click (which exits 1 on EPIPE), Rich (whose help console exits 1 too) nor a
    command's own handler takes it for something else: the boundary ends the run with 0."""


class OutputClosed(BaseException):
    """A write to a stdout that was closed when tfcli started (`tfcli ... >&-`): the boundary says so, exit 1."""


class Output:
    """sys.stdout, remembering whether a write to it failed for lack of space, so that the error
    line can say that it is the output (`tfcli ... > /dev/full`) that has no room left; a reader
    that went away and a stdout closed from the start end the run the same way, whoever wrote."""

    def __init__(self, stream, closed: bool = False):
        self._stream = stream
        self.full = False
        self.closed_at_start = closed

    def write(self, text: str) -> int:
        if self.closed_at_start and text:
            raise OutputClosed
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _silence_stdout()  # the interpreter's last flush goes to /dev/null, not into a second EPIPE
            raise ReaderGone from None
        except OSError as e:
            self.full |= e.errno in _OUTPUT_FULL
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _silence_stdout()
            raise ReaderGone from None
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


def _reopen_closed_streams() -> bool:
    """`tfcli ... >&-` or `<&-`: a closed standard stream becomes /dev/null, so that reading gives
    end of file and writing goes nowhere, instead of an AttributeError on None. Returns whether
    stdout was closed: what a command prints there would be lost, which Output then says."""
    closed = sys.stdout is None
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
    return closed


ENVIRONMENT = (
    ("TFCLI_HOME", "where pulled models and the chat history are kept (default: $XDG_CACHE_HOME/tfcli, "
                   "else ~/.cache/tfcli)"),
    ("TFCLI_DATA_URL", "a mirror (http://, https://, file://) 'tfcli data pull' reads the corpora from, offline"),
    ("TFCLI_THREADS", "threads when --threads is not given (default: the idle cores)"),
    ("TFCLI_FONT", "a .ttf/.otf/.ttc font for the labels of PNG pictures"),
    ("TFCLI_LANG", "zh: Chinese where a command has --lang, and the errors (default: from LC_ALL / LANG)"),
    ("NO_COLOR", "set to anything: no colours (https://no-color.org)"),
    ("OPENBLAS_THREAD_TIMEOUT", "how long idle BLAS threads spin, 2^N cycles (tfcli sets 20 when it is not set)"),
    ("XDG_CACHE_HOME", "the cache folder TFCLI_HOME defaults under"),
)


class _Lazy:
    """App's commands, each made when first asked for: a stand-in (name and summary) while the
    app's help lists them, the real command (its module imported) otherwise."""

    _listing = False

    def list_commands(self, ctx) -> list[str]:
        return [*COMMANDS, *(n for n in super().list_commands(ctx) if n not in COMMANDS)]

    def get_command(self, ctx, name: str):
        if name in COMMANDS and name not in self.commands:
            if self._listing:
                from typer.core import TyperCommand

                return TyperCommand(name=name, short_help=COMMANDS[name], help=COMMANDS[name])
            import typer.main

            self.commands[name] = typer.main.get_command_from_info(
                command_info(name), pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode
            )
        return super().get_command(ctx, name)

    def format_help(self, ctx, formatter) -> None:
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False


class App(_Lazy, Tidy, ErrorBoundary):
    """The tfcli group: the error boundary, with the options of every help tidied (cli/command.py),
    and shell completion options that take the shell named."""

    def get_params(self, ctx) -> list:
        params = super().get_params(ctx)
        for p in params:
            if p.name in ("show_completion", "install_completion"):
                verb = "Show" if p.name == "show_completion" else "Install"
                p.help = f"{verb} completion for SHELL (bash, zsh, fish, powershell), or for the shell this runs in."
                p.metavar = "[SHELL]"
        return params


SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _completion_shell(value: str) -> str:
    """The shell named (it wins), else the one this runs in; refused with one line when there is
    none to detect (CI, `docker exec`), instead of Typer's 'Shell  not supported'."""
    from tfcli.engine.errors import UsageError

    shell = value.strip().lower()
    if not shell:
        try:
            from typer._completion_shared import _get_shell_name

            shell = _get_shell_name() or ""
        except Exception:  # noqa: BLE001 - shellingham cannot always read the process tree
            shell = ""
        if not shell:
            shell = os.path.basename(os.environ.get("SHELL", "")).lower()
    if shell not in SHELLS:
        said = f"{shell!r} is not a shell tfcli completes" if shell else "no shell found to complete for"
        raise UsageError(f"{said} (bash, zsh, fish or powershell)", "name it, e.g. tfcli --show-completion bash")
    return shell


def _completion(flag: str, shell: str) -> int:
    """--show-completion [SHELL] and --install-completion [SHELL], the shell named winning.

    Typer's options take no value when a shell can be detected among the parent processes, so
    `--show-completion zsh` printed the script of the shell pytest ran in; and with no shell
    there (CI, `docker exec`) it said 'Shell  not supported'."""
    from typer._completion_shared import get_completion_script, install

    shell = _completion_shell(shell)
    if flag == "--show-completion":
        print(get_completion_script(prog_name="tfcli", complete_var="_TFCLI_COMPLETE", shell=shell))
    else:
        shell, path = install(shell=shell, prog_name="tfcli", complete_var="_TFCLI_COMPLETE")
        print(f"{shell} completion installed in {path}; it takes effect in a new terminal")
    return 0


app = typer.Typer(
    cls=App,
    name="tfcli",
    help="See inside a GPT-style transformer: generate text with a NumPy engine, count its parameters, "
         "draw its attention.",
    # Rich help puts each paragraph of an epilog on a line of its own.
    epilog="\n\n".join(["Environment variables:", *(f"{name}: {what}" for name, what in ENVIRONMENT)]),
    invoke_without_command=True,  # bare `tfcli` prints the help and exits 0 (see _root)
    add_completion=True,  # --install-completion, --show-completion
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from tfcli import __version__

        print(f"tfcli {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option(
        "--version", "-V", help="Print the version and exit.", callback=_version, is_eager=True)] = False,
) -> None:
    # click's no_args_is_help ends with a usage error (exit 2, and an empty "error:" through the
    # boundary); a command line asked for nothing has done nothing wrong, so: the help, and 0.
    if ctx.invoked_subcommand is None:
        text = ctx.get_help()  # Rich help prints itself and returns ""; click's plain help returns the text
        if text:
            print(text)
        raise typer.Exit(0)


# One file per command, imported only when that command runs (App.get_command), so that `tfcli
# params` pays for Python, Typer and params.py, not for the other 22 modules (about 30 ms, issue 35).
# `tfcli --help` lists them from here, without importing them: each summary is the first sentence
# of the command's docstring (_summary), and tests/test_help.py holds the two equal.
COMMANDS = {
    "generate": "Continue PROMPT with a model, token by token.",
    "score": "The model's loss on a text.",
    "chat": "Chat with a model that has a chat template; by default smollm2, pulled on first use.",
    "tokenize": "Show the tokens of TEXT as the model gets them.",
    "params": "Count a GPT's parameters two ways, and what a token costs in FLOPs and memory.",
    "attn": "Show how each token looks at the tokens before it: the causal mask, and a model's real attention.",
    "bench": "Measure load time, prompt (prefill) and decode speed, peak memory, and the roofline.",
    "models": "List the shipped models (weights/), the pulled ones (the cache) and the ones 'tfcli pull' can fetch.",
    "show": "Show one model.",
    "pull": "Fetch a model into the cache ($TFCLI_HOME/models) once; later runs reuse it.",
    "rm": "Remove a pulled (or converted) model from the cache, freeing its disk space.",
    "convert": "Dequantize a GGUF file into a Hugging Face-style folder of float32 weights, or (--quantize) write a "
               "folder as a GGUF file.",
    "lens": "The logit lens: at each residual index, what would the model predict if it stopped there?",
    "embed": "The model's own token vectors (the rows of its embedding matrix) as a space of directions.",
    "neurons": "The MLP as questions: which of a block's neurons each token's vector turns on.",
    "geometry": "Near-orthogonality: the angles between random directions in D dimensions, and a model's own.",
    "explore": "Write one web page that shows what the model does with TEXT.",
    "train": "Train a GPT-2-style model on a text file with tfcli's NumPy engine.",
    "serve": "Serve a model over the OpenAI API.",
    "patch": "Activation patching: which spot of the pass carries the answer?",
    "ablate": "Ablation: how much does the answer need each head and each MLP?",
    "steer": "Steering: push the residual stream along a direction and see the text change.",
    "heads": "Direct logit attribution and head detectors.",
    "attribute": "Attribution patching: activation patching guessed from one backward pass.",
}


def command_info(name: str):
    """The Typer CommandInfo of command `name`, its module imported now (tfcli/cli/NAME.py)."""
    import importlib
    import inspect

    from typer.models import CommandInfo

    from .command import Command

    callback = getattr(importlib.import_module(f"{__name__}.{name}"), name)
    doc = inspect.getdoc(callback) or ""
    return CommandInfo(name=name, cls=Command, callback=callback, help=_unwrapped(doc), short_help=_summary(doc))




def main() -> None:
    stdout_closed = _reopen_closed_streams()
    # A terminal whose encoding cannot show a character (a Latin-1 locale, PYTHONIOENCODING=ascii)
    # gets '?' for it, not a UnicodeEncodeError in the middle of a generation.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and stream.errors == "strict":
            stream.reconfigure(errors="replace")
    sys.stdout = Output(sys.stdout, closed=stdout_closed)
    app(prog_name="tfcli")

from . import data, features, features_look  # noqa: E402, F401  (features_look adds show, top and quality to features)

app.add_typer(features.app, name="features")
app.add_typer(data.app, name="data")


def _unwrapped(doc: str) -> str:
    """A docstring's paragraphs as single lines, so that the help wraps them to the terminal (they
    were hard-wrapped near 100 columns and came out ragged at 80); indented lines (the examples)
    stay as they are."""
    paragraphs = []
    for para in doc.split("\n\n"):
        lines = para.split("\n")
        paragraphs.append(para if any(line.startswith(" ") for line in lines)
                          else " ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


def _summary(doc: str) -> str:
    """The first sentence of a docstring, for the list of commands in `tfcli --help`."""
    first = " ".join(doc.split("\n\n")[0].split())
    end = first.find(". ")
    first = first if end < 0 else first[: end + 1]
    if len(first) > 100 and ": " in first:  # a long first sentence: what comes before its colon
        first = first[: first.index(": ")] + "."
    return first


features.tidy_help(_unwrapped, _summary)
data.tidy_help(_unwrapped, _summary)
