"""The checksums of a converted model folder: written with it, checked before a cached copy is used.

`tfcli convert` (and so `tfcli pull`) writes tfcli-manifest.json last, listing every file of the
folder with its size, sha256, modification time and status-change time. Hashing 540 MB on every run
would cost a second or two, so the check before use is a stat per file: a file whose size changed is
damaged; a file whose mtime or ctime changed is hashed, and if its content is still the recorded one
its new times are recorded (a folder copied, restored or touched is hashed once, not on every run).
The same idea as git's index, which trusts a file whose stat data it has seen before.

Why the ctime: an edit that keeps the size and puts the old mtime back (`touch -d`, os.utime) is
invisible to size and mtime, but setting the times is itself a change of the inode, which the kernel
stamps with the current ctime; no system call sets ctime. What the quick check cannot see: a change
made below the file system (the raw disk, or with the system clock set back to the recorded ctime),
which takes root. `tfcli models --verify` hashes every file.

No NumPy here: `tfcli models` and the name registry use this module.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


MANIFEST_NAME = "tfcli-manifest.json"


MANIFEST_BYTES = 16_000_000  # a manifest lists a few files: far below this


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """The sha256 of a regular file, opened without following a link and without blocking (a named
    pipe put where a file was is refused, never waited on)."""
    from tfcli.engine.files import open_regular

    digest = hashlib.sha256()
    with os.fdopen(open_regular(Path(path), follow=False), "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_entry(path: Path, sha256: str) -> dict[str, Any]:
    """What the manifest records of one file just written."""
    st = path.stat()
    return {"bytes": st.st_size, "sha256": sha256, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def read_manifest(folder: Path) -> dict[str, Any] | None | str:
    """The manifest of a folder; None if there is none; a problem (str) if it cannot be read."""
    return _read(Path(folder))


def written_by_tfcli(folder: Path) -> bool:
    """Whether the folder holds a manifest tfcli wrote (a model `tfcli convert` or `tfcli pull` made)."""
    manifest = _read(Path(folder))
    return isinstance(manifest, dict) and str(manifest.get("written_by", "")).startswith("tfcli")


def foreign_entries(folder: Path) -> list[str]:
    """The names in a folder that its tfcli manifest does not list (all of them without one): what
    replacing the folder would delete that tfcli did not write."""
    folder = Path(folder)
    names = sorted(p.name for p in folder.iterdir())
    manifest = _read(folder)
    if not written_by_tfcli(folder) or not isinstance(manifest, dict):
        return names
    ours = set(manifest["files"]) | {MANIFEST_NAME}
    return [n for n in names if n not in ours or not (folder / n).is_file() or (folder / n).is_symlink()]


def _read(folder: Path) -> dict[str, Any] | None | str:
    """The manifest; None if there is none; a problem (str) if it cannot be read."""
    from tfcli.engine.errors import TfcliError
    from tfcli.engine.files import read_small

    path = folder / MANIFEST_NAME
    if not os.path.lexists(path):
        return None
    try:
        # Regular files only, no link followed, nothing that blocks (a named pipe), bounded in size.
        manifest = json.loads(read_small(path, MANIFEST_BYTES, follow=False).decode("utf-8"))
        files = manifest["files"]
        if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
            raise TypeError
        return manifest
    except TfcliError as e:
        return f"{MANIFEST_NAME} is unreadable: {e.message}"
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError):
        return f"{MANIFEST_NAME} is unreadable"


def _size_problem(folder: Path, fname: str, want: dict[str, Any]) -> tuple[str | None, os.stat_result | None]:
    path = folder / fname
    if Path(fname).name != fname or not path.is_file():
        return f"{fname} is missing", None
    if path.is_symlink():  # its content would live outside the folder, changeable by whoever owns that
        return f"{fname} is a symbolic link, not the file that was written", None
    st = path.stat()
    if st.st_size != want.get("bytes"):
        from tfcli.engine.errors import shown, shown_number

        want_bytes = want.get("bytes")
        recorded = shown_number(want_bytes) if isinstance(want_bytes, int) else shown(want_bytes, 24)
        return f"{fname} has {st.st_size:,} bytes, not {recorded}", st
    return None, st


def verify_manifest(folder: Path, *, full: bool = True) -> list[str]:
    """Problems with a converted folder against its manifest: missing files, wrong sizes, and (full)
    wrong sha256 checksums. An empty list means the folder is as it was written."""
    folder = Path(folder)
    manifest = _read(folder)
    if manifest is None:
        return [f"{MANIFEST_NAME} is missing"]
    if isinstance(manifest, str):
        return [manifest]
    problems = []
    for fname, want in manifest["files"].items():
        problem, _ = _size_problem(folder, fname, want)
        if problem is None and full and sha256_file(folder / fname) != want.get("sha256"):
            problem = f"{fname} does not match its sha256 checksum"
        if problem:
            problems.append(problem)
    return problems


def quick_check(folder: Path) -> list[str]:
    """Problems with a folder that has a manifest, at the cost of a stat per unchanged file (see the
    module docstring). No manifest: nothing was recorded, nothing to check, [] (a cached model
    without one is refused by the registry, store/registry.py cache_problems)."""
    folder = Path(folder)
    manifest = _read(folder)
    if manifest is None:
        return []
    if isinstance(manifest, str):
        return [manifest]
    problems, restamped = [], False
    for fname, want in manifest["files"].items():
        problem, st = _size_problem(folder, fname, want)
        if problem is None and (st.st_mtime_ns, st.st_ctime_ns) != (want.get("mtime_ns"), want.get("ctime_ns")):
            if sha256_file(folder / fname) != want.get("sha256"):
                problem = f"{fname} does not match its sha256 checksum"
            else:
                want["mtime_ns"], want["ctime_ns"], restamped = st.st_mtime_ns, st.st_ctime_ns, True
        if problem:
            problems.append(problem)
    if restamped and not problems:
        from tfcli.engine.files import json_text

        _write_atomically(folder / MANIFEST_NAME, json_text(manifest) + "\n")
    return problems


def _write_atomically(path: Path, text: str) -> None:
    """Replace path by a rename, so that a reader sees the old manifest or the new one; a read-only
    cache simply keeps the old one (the files are hashed again next time)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # read-only (a mount, a copy without write permission): reading never needs to write
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
