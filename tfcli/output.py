"""The one way tfcli writes a file the user names (explore -o, --png, --svg, --csv, ...): never over
something it did not mean to replace.

What the path is decides how it is written:

    nothing yet, or a regular file   the whole output goes to a temporary file in the same folder,
                                     which is renamed over the path only when complete: a full disk
                                     or a killed run leaves the old file as it was (and its mode)
    a named pipe, a character device written as a stream, in place (`-o /dev/null`, `-o /dev/stdout`,
    (/dev/null, a terminal)          a FIFO someone reads): such a node is never replaced by a file
    a symbolic link                  followed, as the shell's `>` does: the file it points to is
                                     replaced as above (the link stays a link), a pipe or device it
                                     points to is written as a stream; a link to nothing is refused
    a folder, a block device,        refused with one line, before the model runs
    a socket, anything else

A named pipe nobody reads is waited for a few seconds (a reader may be starting), then refused:
never a hang.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from tfcli.engine.errors import TfcliError, printable
from tfcli.engine.files import kind_of

PIPE_WAIT = 5.0  # seconds to wait for the reader of a named pipe


class OutputError(TfcliError):
    """An output path that cannot or must not be written."""


def check(path: Path) -> None:
    """Refuse, before any work, a path that save() would refuse: a folder, a block device, a socket,
    a link to nothing, a folder that does not exist or cannot be written."""
    _target(Path(path), probe=True)


def save(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write an output through `write(f)` (f: a binary file) to `path`, the safe way for what it is."""
    path = Path(path)
    kind, real = _target(path, probe=False)
    if kind == "stream":
        _stream(path, write)
    else:
        _replace(path, real, write)


def save_text(path: Path, text: str) -> None:
    save(path, lambda f: f.write(text.encode("utf-8")))


def _shown(path: Path) -> str:
    return printable(os.fsdecode(path))


def _target(path: Path, probe: bool) -> tuple[str, Path]:
    """("stream", path) or ("file", the path of the regular file to replace, links followed)."""
    try:
        st = os.stat(path)  # follows links: what a write would reach
    except FileNotFoundError:
        if os.path.islink(path):
            raise OutputError(f"{_shown(path)} is a link to nothing ({printable(os.readlink(path))})",
                              "remove the link, or give another path") from None
        real = Path(os.path.realpath(path))
        _folder_ok(path, real.parent, probe)
        return "file", real
    except NotADirectoryError:
        raise OutputError(f"cannot write {_shown(path)}: a part of the path is not a folder",
                          "give a path inside a folder") from None
    except OSError as e:
        raise OutputError(f"cannot write {_shown(path)}: {e.strerror or e}", "check the path") from None
    mode = st.st_mode
    if stat.S_ISREG(mode):
        real = Path(os.path.realpath(path))
        _folder_ok(path, real.parent, probe)
        return "file", real
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "stream", path
    what = kind_of(mode)
    hint = "give a file name, e.g. -o out.html" if stat.S_ISDIR(mode) else "give the path of a file"
    raise OutputError(f"cannot write {_shown(path)}: it is {what}", hint)


def _folder_ok(path: Path, folder: Path, probe: bool) -> None:
    if not folder.is_dir():
        raise OutputError(f"cannot write {_shown(path)}: the folder {_shown(folder)} does not exist",
                          "create the folder first")
    if probe:  # a temporary file made and removed: the only test that holds for root and for ACLs alike
        try:
            fd, name = _temporary(folder, path.name)
        except OSError as e:
            raise OutputError(f"cannot write {_shown(path)}: {e.strerror or e}",
                              "check that the folder exists and is writable") from None
        os.close(fd)
        os.unlink(name)


def _temporary(folder: Path, name: str) -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(prefix=f".{name[:100]}.", suffix=".tmp", dir=folder)


def _replace(path: Path, real: Path, write: Callable[[BinaryIO], None]) -> None:
    """A temporary file beside `real`, renamed over it when complete; removed on any failure."""
    try:
        fd, name = _temporary(real.parent, real.name)
    except OSError as e:
        raise _failed(path, e) from None
    try:
        try:
            old = os.stat(real)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes it private; a new output gets the usual mode
        else:
            os.fchmod(fd, stat.S_IMODE(old.st_mode))  # the file it replaces keeps its mode and owner
            try:
                os.fchown(fd, old.st_uid, old.st_gid)
            except OSError:
                pass
        with os.fdopen(fd, "wb") as f:
            fd = -1
            write(f)
            f.flush()
        os.replace(name, real)
    except OSError as e:
        raise _failed(path, e) from None
    finally:
        if fd != -1:
            os.close(fd)
        try:
            os.unlink(name)
        except FileNotFoundError:  # renamed: nothing left behind
            pass


def _stream(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Open a pipe or a device for writing, in place (no O_CREAT, no O_TRUNC), and write to it."""
    flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    deadline = time.monotonic() + PIPE_WAIT
    while True:
        try:
            fd = os.open(path, flags)
            break
        except OSError as e:
            if e.errno == errno.ENXIO and stat.S_ISFIFO(os.stat(path).st_mode) and time.monotonic() < deadline:
                time.sleep(0.05)  # a named pipe without a reader yet
                continue
            if e.errno == errno.ENXIO:
                raise OutputError(f"nobody reads {_shown(path)}",
                                  "start the program that reads the pipe first") from None
            raise _failed(path, e) from None
    try:
        kind = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(kind) or stat.S_ISCHR(kind)):  # it changed since it was looked at
            raise OutputError(f"cannot write {_shown(path)}: it is {kind_of(kind)}", "give the path of a file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb", closefd=False) as f:
            write(_Unseekable(f))  # /dev/null "seeks" and tells 0: a zip writer's offsets went negative
            f.flush()
    except BrokenPipeError:
        raise OutputError(f"the reader of {_shown(path)} went away before the end",
                          "keep the reader open until tfcli is done") from None
    except OSError as e:
        raise _failed(path, e) from None
    finally:
        os.close(fd)


class _Unseekable(io.RawIOBase):
    """A stream as a writer should see a pipe or a device: written in order, never sought or told."""

    def __init__(self, f):
        self._f = f

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        raise OSError(errno.ESPIPE, "a stream has no position")

    def seek(self, *args) -> int:
        raise OSError(errno.ESPIPE, "a stream has no position")

    def write(self, data) -> int:
        self._f.write(data)
        return len(data)

    def flush(self) -> None:
        self._f.flush()


def _failed(path: Path, e: OSError) -> OutputError:
    where = _shown(path)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"cannot write {where}: no space left on the device", "free some space, or write elsewhere")
    if e.errno == errno.EFBIG:
        return OutputError(f"cannot write {where}: the file would be larger than allowed (ulimit -f, or the file "
                           "system's largest file)", "write elsewhere, or raise the limit")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"cannot write {where}: {e.strerror or 'permission denied'}",
                           "check the permissions, or write elsewhere")
    return OutputError(f"cannot write {where}: {e.strerror or e}", "check the path and the disk")
