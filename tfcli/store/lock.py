"""Lock files, and clearing what killed pulls and conversions leave behind.

A pull holds `.NAME.lock` in the cache while it downloads and converts; its work lives in hidden
folders next to the model, `.NAME.download-*` (the wheel), `.NAME.partial-PID-*` (the folder being
written; convert uses the same name anywhere) and `.NAME.old-*` (a replaced copy on its way out).
A process killed with SIGKILL (or a power cut) leaves them: they are removed on a later run once
nothing can be using them, that is when their lock is free or, for a partial folder, when the
process whose id it carries is gone.
"""

from __future__ import annotations

import glob
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

if os.name == "nt":
    import msvcrt

    def try_lock(f) -> bool:
        try:
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def unlock(f) -> None:
        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def try_lock(f) -> bool:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def unlock(f) -> None:
        fcntl.flock(f, fcntl.LOCK_UN)


def _open_lock(path: Path):
    """The lock file, created if needed, opened without following a link and without blocking (a
    named pipe put there never waits); a link, or anything but a regular file, raises OSError."""
    import stat

    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, "a+b")


@contextmanager
def locked(path: Path, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if needed) for the duration of the block; `waiting()`
    is called once if another process holds it.

    The lock belongs to the open file, so the operating system releases it if the process dies;
    the file itself stays (deleting a lock file others may be waiting on would let a third in).
    """
    try:
        f = _open_lock(path)
    except OSError as e:
        from tfcli.engine.errors import PullError

        raise PullError(f"cannot use the lock file {path}: {e.strerror or e}",
                        "remove it: it must be a plain file tfcli creates") from None
    with f:
        if not try_lock(f):
            if waiting:
                waiting()
            while not try_lock(f):
                time.sleep(0.2)
        try:
            yield
        finally:
            unlock(f)


def partial_name(out: Path) -> str:
    """The prefix of the hidden folder (a conversion into a folder) or file (a GGUF written by
    convert --quantize) a write of `out` makes, then renames to `out`."""
    return f".{out.name}.partial-"


def remove_dead_partials(out: Path) -> None:
    """Hidden folders or files that killed writes of `out` left behind (.NAME.partial-PID-xxxxxx),
    once their process is gone: a live write's is left alone."""
    prefix = partial_name(out)
    for path in out.parent.glob(glob.escape(prefix) + "*"):
        pid = path.name[len(prefix) :].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def remove_leftovers(root: Path, name: str) -> None:
    """Everything a pull of `name` writes besides the model folder; call it holding the lock."""
    for kind in ("download", "partial", "old"):
        for path in root.glob(glob.escape(f".{name}.{kind}-") + "*"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)


def clear_stale(root: Path) -> None:
    """What killed pulls and conversions left in the cache `root`: the leftovers of every model whose
    lock is free, and partial folders whose process is gone. Never waits; a read-only cache is left as it is."""
    try:
        entries = list(root.glob(".*"))
    except OSError:
        return
    for path in entries:
        name = path.name
        if name.endswith(".lock"):
            try:
                with _open_lock(path) as f:  # a link or a pipe named like a lock: OSError, left alone
                    if try_lock(f):
                        try:
                            remove_leftovers(root, name[1 : -len(".lock")])
                        finally:
                            unlock(f)
            except OSError:
                pass
        elif ".partial-" in name:
            remove_dead_partials(root / name[1 : name.index(".partial-")])


def _alive(pid: int) -> bool:
    if os.name == "nt":
        return True  # no cheap check there: keep the folder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True
