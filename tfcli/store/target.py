"""Where a converted model folder goes, and what may be replaced there: never what tfcli did not write.

A conversion writes into a hidden folder next to OUT_DIR (`.NAME.partial-PID-xxxxxx`) and renames it
to OUT_DIR at the end. OUT_DIR may already exist when it is empty, or, with --force, when it holds a
model tfcli wrote and nothing else (its manifest lists every file). Anything else there (the GGUF
being converted, someone's notes, a folder of their own) is refused before any work, and again just
before the rename. The model cache is tfcli's own: a pull may replace its entry whatever it holds.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from pathlib import Path

from tfcli.engine.errors import CheckpointError

from .manifest import foreign_entries

FORCE = "choose another folder, or pass --force to replace it"


def check_target(src: Path, out_dir: Path, *, replace: bool, owned: bool = False) -> None:
    """Refuse an OUT_DIR that cannot or may not become the new model folder (see the module docstring).
    `owned`: out_dir is an entry of the model cache, replaced whatever it holds."""
    if out_dir.is_symlink() and not owned:
        raise CheckpointError(f"{out_dir} is a symbolic link", "give the folder itself, or a new folder to create")
    if out_dir.exists() and not out_dir.is_dir():
        raise CheckpointError(f"{out_dir} is a file", "give a folder to write the model into")
    where, cwd = _real(out_dir), _real(Path.cwd())
    if where == cwd or where in cwd.parents:
        what = "the current folder" if where == cwd else "a folder that holds the current folder"
        raise CheckpointError(f"{out_dir} is {what}, which tfcli will not replace",
                              f"name a new folder for the model, e.g. ./{_stem(src)}")
    if where in _real(src).parents:
        raise CheckpointError(f"{out_dir} holds the GGUF file being converted ({src.name})",
                              f"write the model into a new folder, e.g. {out_dir / _stem(src)}")
    if out_dir.is_dir() and not out_dir.is_symlink():
        check_replaceable(out_dir, replace=replace, owned=owned)


def check_replaceable(out_dir: Path, *, replace: bool, owned: bool, appeared: bool = False) -> None:
    """Refuse replacing a non-empty out_dir without --force, or one with files tfcli did not write."""
    try:
        if not any(out_dir.iterdir()):
            return
        foreign = [] if owned else foreign_entries(out_dir)
    except OSError as e:
        raise CheckpointError(f"cannot read {out_dir}: {e.strerror or e}", "choose another OUT_DIR") from None
    state = "appeared while converting" if appeared else "already exists and is not empty"
    if not replace:
        raise CheckpointError(f"{out_dir} {state}", FORCE)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise CheckpointError(
            f"{out_dir} holds files tfcli did not write ({foreign[0]!r}{more}); "
            "--force replaces only a model folder tfcli converted",
            "choose another OUT_DIR, or move those files away",
        )


def move_into_place(tmp: Path, out_dir: Path, *, replace: bool, owned: bool = False) -> None:
    """Rename the finished folder to out_dir; an old out_dir (with replace) goes only once the new one
    is in, and only if it is still one that may be replaced."""
    old = None
    if out_dir.is_symlink():  # an entry of the cache (owned): the link goes, never what it points at
        old = out_dir.parent / f".{out_dir.name}.old-{secrets.token_hex(3)}"
        out_dir.rename(old)
    elif out_dir.is_dir():
        check_replaceable(out_dir, replace=replace, owned=owned, appeared=True)
        if any(out_dir.iterdir()):
            old = out_dir.parent / f".{out_dir.name}.old-{secrets.token_hex(3)}"
            out_dir.rename(old)
        else:
            out_dir.rmdir()
    try:
        tmp.rename(out_dir)
    except BaseException:
        if old is not None:
            old.rename(out_dir)  # put the previous folder back rather than lose both
        raise
    if old is not None:
        if old.is_symlink():
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)


def os_error(e: OSError, out_dir: Path) -> CheckpointError:
    """An OSError met while writing out_dir, worded for what it is (a full disk, a read-only place...)."""
    code, reason = e.errno, e.strerror or str(e)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return CheckpointError(f"writing {out_dir} failed: {reason}; nothing was left behind",
                               "free some space, or choose another OUT_DIR")
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return CheckpointError(f"cannot write {out_dir}: {reason}; nothing was left behind",
                               "choose a writable OUT_DIR")
    if code == errno.EBUSY:
        return CheckpointError(f"{out_dir} is in use (a mount point, or another process's current folder) "
                               "and cannot be replaced", "choose another OUT_DIR")
    if code == errno.ENAMETOOLONG:
        return CheckpointError(f"the name {out_dir} is too long for the file system", "choose a shorter OUT_DIR")
    return CheckpointError(f"writing {out_dir} failed: {reason}; nothing was left behind",
                           "check OUT_DIR and the disk, then try again")


def _real(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return Path(os.path.abspath(path))


def _stem(src: Path) -> str:
    return Path(src).stem or "model"
