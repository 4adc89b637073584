"""Source a reader can read: no line over 120 characters and no file over 500 lines, in the rooms
that have been wrapped so far (store, analysis, explore and the command files of the CLI below).

The cap on lines is counted in characters, as an editor shows them; a line of Chinese text counts
each character once."""

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tfcli"
WIDTH, LENGTH = 120, 500

ROOMS = ("store", "analysis", "explore", "api", "draw")
TOP = ("__main__.py", "numbers.py", "numbering.py", "start.py")
CLI = (
    "__init__", "ablate", "attn", "attribute", "command", "console", "constrain", "embed", "experiment", "explore",
    "features_look", "features_page", "geometry", "inputs", "json", "layout", "lens", "models",
    "options", "output", "params", "patch", "pull", "quantize", "rm", "show", "steer",
)


def _files() -> list[Path]:
    files = [p for room in ROOMS for p in sorted((PACKAGE / room).rglob("*.py"))]
    files += [PACKAGE / name for name in TOP]
    files += [PACKAGE / "cli" / f"{name}.py" for name in CLI]
    return files


def test_the_files_are_found():
    """An empty or mistyped list would pass every check below."""
    files = _files()
    assert len(files) > 60
    assert all(p.is_file() for p in files), [str(p) for p in files if not p.is_file()]


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_lines_and_length(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    long = [f"{path.name}:{i}: {len(line)} characters" for i, line in enumerate(lines, 1) if len(line) > WIDTH]
    assert not long, "\n".join(long)
    assert len(lines) <= LENGTH, f"{path.name} has {len(lines)} lines; split it along a seam"
