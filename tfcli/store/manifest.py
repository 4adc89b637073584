"""The checksums of a converted model folder: written with it, checked before a cached copy is used.

`tfcli convert` (and so `tfcli pull`) writes tfcli-manifest.json last, listing every file of the
folder with its size, sha256 and modification time. Hashing 540 MB on every run would cost a second
or two, so the check before use is a stat per file: a file whose size changed is damaged; a file
whose modification time changed is hashed, and if its content is still the recorded one its new time
is recorded (a folder copied without keeping times is hashed once, not on every run). The same idea
as git's index, which trusts a file whose size and mtime it has seen before.

No NumPy here: `tfcli models` and the name registry use this module.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tfcli.engine.errors import CheckpointError

MANIFEST_NAME = "tfcli-manifest.json"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_entry(path: Path, sha256: str) -> dict[str, Any]:
    """What the manifest records of one file just written."""
    st = path.stat()
    return {"bytes": st.st_size, "sha256": sha256, "mtime_ns": st.st_mtime_ns}


def _read(folder: Path) -> dict[str, Any] | None | str:
    """The manifest; None if there is none; a problem (str) if it cannot be read."""
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
        files = manifest["files"]
        if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
            raise TypeError
        return manifest
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError):
        return f"{MANIFEST_NAME} is unreadable"


def _size_problem(folder: Path, fname: str, want: dict[str, Any]) -> tuple[str | None, os.stat_result | None]:
    path = folder / fname
    if Path(fname).name != fname or not path.is_file():
        return f"{fname} is missing", None
    st = path.stat()
    if st.st_size != want.get("bytes"):
        want_bytes = want.get("bytes")
        shown = f"{want_bytes:,}" if isinstance(want_bytes, int) else repr(want_bytes)
        return f"{fname} has {st.st_size:,} bytes, not {shown}", st
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
    module docstring). No manifest: nothing was recorded, nothing to check, []."""
    folder = Path(folder)
    manifest = _read(folder)
    if manifest is None:
        return []
    if isinstance(manifest, str):
        return [manifest]
    problems, restamped = [], False
    for fname, want in manifest["files"].items():
        problem, st = _size_problem(folder, fname, want)
        if problem is None and st.st_mtime_ns != want.get("mtime_ns"):
            if sha256_file(folder / fname) != want.get("sha256"):
                problem = f"{fname} does not match its sha256 checksum"
            else:
                want["mtime_ns"], restamped = st.st_mtime_ns, True
        if problem:
            problems.append(problem)
    if restamped and not problems:
        _write_atomically(folder / MANIFEST_NAME, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return problems


def _write_atomically(path: Path, text: str) -> None:
    """Replace path by a rename, so that a reader sees the old manifest or the new one; a read-only
    cache simply keeps the old one (the files are hashed again next time)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
