"""The entry point of the `tfcli` command and of `python -m tfcli`, small on purpose: Ctrl-C while
the command line's modules load (Typer, Rich: a few hundred milliseconds) ends the run the way
Ctrl-C does later, one line and exit 130, instead of a KeyboardInterrupt traceback and a death by
the signal. Nothing is imported here before the handler is in place."""

import sys


def main() -> None:
    try:
        from tfcli.cli import main as run

        run()
    except KeyboardInterrupt:
        try:
            sys.stderr.write("error: interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):  # stderr closed or gone
            pass
        sys.exit(130)
