"""Shared builders for the bad-input tests (tests/test_bad_*.py, one file per kind of bad input).

Each of those files keeps a table of cases: a function that damages a copy of a tiny model (or
builds a bad command line) and returns the command line to run, with the exit code and the words
the one error line must hold. `assert_error` is the one definition of a clean failure: exit code,
nothing on stdout, one `error:` line on stderr (after any `warning:` lines), no traceback, no raw
control character, the fix in parentheses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import TINY_GPT2, TINY_LLAMA

ROOT = Path(__file__).resolve().parent.parent
DELETE = object()  # a config value that is removed


# --- building bad model folders ---------------------------------------------------------------------


@dataclass
class Env:
    tmp: Path
    monkeypatch: pytest.MonkeyPatch

    def model(self, src: Path = TINY_GPT2) -> Path:
        """A copy of a tiny checkpoint to damage."""
        dst = self.tmp / "model"
        shutil.copytree(src, dst)
        return dst

    def model_with(self, name: str, content: str | bytes | None) -> Path:
        """A copy of the tiny GPT-2 whose file `name` holds `content` (None: the file is removed)."""
        m = self.model()
        if content is None:
            (m / name).unlink()
        elif isinstance(content, bytes):
            (m / name).write_bytes(content)
        else:
            (m / name).write_text(content)
        return m

    def chat_model(self) -> Path:
        """The tiny Llama with a chat template."""
        m = self.model(TINY_LLAMA)
        (m / "chat_template.jinja").write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<assistant>")
        return m

    def gguf(self, **kw) -> Path:
        from test_gguf import write_gguf

        return write_gguf(self.tmp / "tiny.gguf", **kw)


def edit_config(m: Path, **changes) -> Path:
    cfg = json.loads((m / "config.json").read_text())
    for k, v in changes.items():
        if v is DELETE:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (m / "config.json").write_text(json.dumps(cfg))
    return m


def read_safetensors(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def safetensors_bytes(header: dict | bytes, body: bytes = b"", n: int | None = None) -> bytes:
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return (len(head) if n is None else n).to_bytes(8, "little") + head + body


def edit_header(m: Path, change) -> Path:
    """change(header) mutates the header dict of m/model.safetensors; the data stays as it was."""
    header, body = read_safetensors(m / "model.safetensors")
    change(header)
    (m / "model.safetensors").write_bytes(safetensors_bytes(header, body))
    return m


def gen(m, *extra, prompt="Hi") -> list:
    return ["generate", "-m", m, prompt, *extra]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every regular file under folder and its bytes: compare before and after, nothing deleted or changed."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


# --- the tables -------------------------------------------------------------------------------------

ALL_CASES: list = []  # every case of every table, for the count in test_bad_flags.py


class Cases(list):
    """One file's table of bad inputs. `@CASES.case(code, *needles)` registers a builder: the
    function builds the bad input and returns the command line; the error line must contain every
    needle (the problem, then the fix)."""

    def case(self, code: int, *needles: str):
        def register(make):
            param = pytest.param(make, code, needles, id=make.__name__)
            self.append(param)
            ALL_CASES.append(param)
            return make

        return register


def run_case(cli, tmp_path, monkeypatch, make, code, needles) -> None:
    args = make(Env(tmp_path, monkeypatch))
    assert_error(cli(*args), code, *needles)


def raw_control(text: str) -> list[str]:
    """Control characters other than the newline that ends a line (ESC, CR, BEL, C1, DEL...)."""
    return [ch for ch in text if ch != "\n" and (ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0)]


def assert_error(r, code: int, *needles: str) -> None:
    """Exit code, nothing on stdout, and one `error:` line on stderr (after any `warning:` lines)."""
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), r.stderr
    assert all(line.startswith("warning: ") for line in lines[:-1]), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not raw_control(r.stderr), repr(r.stderr)
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    if code == 1:
        assert lines[-1].endswith(")"), lines[-1]  # the fix, in parentheses (a bad value says its range)


# --- the real program, in a process of its own ----------------------------------------------------------


def subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS")}
    return env | {"TFCLI_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)} | extra


def tfcli_command(*args) -> list[str]:
    return [sys.executable, "-m", "tfcli", *(os.fsencode(a) if isinstance(a, (str, Path)) else a for a in args)]


def run_tfcli(tmp_path: Path, *args, timeout: float = 60, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    """`tfcli ARGS` in a fresh process through the real entry point; a hang fails the test (timeout)."""
    kw.setdefault("capture_output", not ("stdout" in kw or "stderr" in kw))
    return subprocess.run(tfcli_command(*args), env=env or subprocess_env(tmp_path), cwd=ROOT, timeout=timeout, **kw)


# `python -m tfcli` once per command line, one after another in one process: what a shell's runs of
# tfcli in the same environment do, without starting Python, NumPy and the command line's modules
# again for each (about a second each on a busy machine). stdout is put back between runs (the entry
# point wraps it), and each run's output ends with a separator that no run writes.
SEPARATOR = "\x1e"
EACH = (
    "import json, runpy, sys\n"
    "stdout, codes = sys.stdout, []\n"
    "for args in json.loads(sys.argv[1]):\n"
    "    sys.argv = ['tfcli', *args]\n"
    "    try:\n"
    "        runpy.run_module('tfcli', run_name='__main__', alter_sys=True)\n"
    "        codes.append(0)\n"
    "    except SystemExit as e:\n"
    "        codes.append(e.code if isinstance(e.code, int) else 0 if e.code is None else 1)\n"
    "    sys.stdout.flush(), sys.stderr.flush()\n"
    "    sys.stdout = stdout\n"
    f"    print({SEPARATOR!r}, end='', flush=True), print({SEPARATOR!r}, end='', file=sys.stderr, flush=True)\n"
    "print(json.dumps(codes))\n"
)


def run_tfcli_each(tmp_path: Path, commands: list[list], env: dict[str, str] | None = None, timeout: float = 60) -> list[subprocess.CompletedProcess]:
    """Each of `commands` run as `tfcli ARGS` through the real entry point (tfcli/__main__.py), in
    order, in ONE fresh process with env: for what a process's environment does to every command.
    Returns one CompletedProcess per command (its exit code, stdout and stderr bytes)."""
    import json

    args = [[str(a) for a in c] for c in commands]
    r = subprocess.run([sys.executable, "-c", EACH, json.dumps(args)], env=env or subprocess_env(tmp_path), cwd=ROOT,
                       timeout=timeout * len(commands), capture_output=True)  # fmt: skip
    outs, errs = r.stdout.split(SEPARATOR.encode()), r.stderr.split(SEPARATOR.encode())
    assert r.returncode == 0 and len(outs) == len(errs) == len(commands) + 1, (r.returncode, r.stderr.decode(errors="replace")[-3000:])
    codes = json.loads(outs[-1])
    return [subprocess.CompletedProcess(c, code, out, err) for c, code, out, err in zip(commands, codes, outs, errs)]


def assert_one_line(stderr: bytes, returncode: int, code: int, *needles: bytes) -> None:
    """A subprocess failed cleanly: its exit code, one `error:` line on stderr (after any warnings),
    no traceback, no raw control character."""
    text = stderr.decode("utf-8", "replace")
    assert returncode == code, (returncode, text)
    lines = text.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), text
    assert all(line.startswith("warning: ") for line in lines[:-1]), text
    assert "Traceback" not in text and not raw_control(text), repr(text)
    for needle in needles:
        assert needle.decode() in lines[-1], (needle, lines[-1])
