"""`-m FILE.gguf`: a GGUF file run directly, in place, as llama.cpp and ollama users expect. Its
config, tokenizer and an index of its tensors (engine/gguf_weights.py) are written once into the
model cache, under a name made of the file's name and the start of its sha256, and loaded from
there like any folder afterwards (listed by `tfcli models`, removed by `tfcli rm`); the weights
stay in the file. An entry an older tfcli wrote (the weights widened to float32) is replaced.

A file is known by its content, not by its name or folder: the entry for its sha256 is used
whatever the file is called now or wherever it lies (moved, copied, renamed). The entry's index
names the file it was made from; while that file still holds the same bytes the index is used as
it is, and when it is gone or changed, the entry is made again for the file given (an index of
the header: no weight is copied). A changed file has another hash, so it gets an entry of its
own; the old one stays until removed.

Hashing a 4 GB file takes seconds, so the hash of each file is remembered beside the cache
(`.gguf-hashes.json`: the file's resolved path, size and modification time in nanoseconds) and
read again only when one of those changes, as make and rsync decide that a file changed. A path
is any byte string POSIX allows: it is kept in JSON as Python decodes it (undecodable bytes as
lone surrogates, written as \\udcXX escapes), which reads back to the same bytes.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from tfcli.engine.errors import TfcliError
from tfcli.engine.gguf_weights import INDEX_NAME as GGUF_INDEX
from tfcli.engine.gguf_weights import read_index

from ..manifest import sha256_file
from ..registry import cache_dir
from .writer import Progress, convert


def cache_name(path: Path, sha256: str) -> str:
    """The cache entry of a GGUF file: 'SmolLM2-135M-Instruct.Q4_1-1a2b3c4d5e6f' (a valid model name)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._")[:48] or "gguf"
    return f"{stem}-{sha256[:12]}"


HASHES = ".gguf-hashes.json"
HASHES_BYTES = 64_000_000  # a path, a size, a time and a hash per file: far below this


def converted(path: Path, progress: Progress | None = None) -> tuple[Path, bool]:
    """The cache folder holding the index of the GGUF file `path`, and whether it was made now
    (False: an earlier run made it). Reads the whole file to hash it, unless it is unchanged since
    a run that did."""
    index, key = _hashes(), str(path.resolve())
    seen = _seen(path, index.get(key))
    entry = _entry_of(path, seen[2])
    now = not (entry.is_dir() or entry.is_symlink())  # else: checked like every cache entry by whoever resolves it
    stale = not now and _stale(entry, path, seen, index)
    if now or stale:
        convert(path, entry, replace=stale, owned=True, progress=progress, keep="link", sha256=seen[2])
    if index.get(key) != list(seen):
        index[key] = list(seen)
        _save(index)  # after the conversion, which makes the cache folder on a first run
    return entry, now or stale


def _entry_of(path: Path, sha256: str) -> Path:
    """The cache entry of these bytes: the one named after this file, else one named after another
    file of the same content (moved or renamed), else the name for this file (to be made)."""
    mine = cache_dir() / cache_name(path, sha256)
    if mine.is_dir() or mine.is_symlink():
        return mine
    try:
        others = sorted(p for p in cache_dir().iterdir()
                        if p.name.endswith(f"-{sha256[:12]}") and p.is_dir() and not p.is_symlink())
    except OSError:
        return mine
    for other in others:
        try:
            if read_index(other).get("sha256") == sha256:
                return other
        except TfcliError:
            continue  # damaged, or not an index of a GGUF: not this file's
    return mine


def _stale(entry: Path, path: Path, seen: tuple[int, int, str], hashes: dict) -> bool:
    """Whether the entry must be made again for `path`: a float32 copy an older tfcli made, or an
    index of these bytes whose file is gone or no longer holds them (moved, or changed since). An
    index whose file is another copy of the same bytes is used as it is."""
    if entry.is_symlink() or not entry.is_dir():
        return False
    if (entry / "model.safetensors").is_file() and not (entry / GGUF_INDEX).exists():
        return True
    try:
        gguf = read_index(entry)
    except TfcliError:
        return False  # a damaged entry: refused as such by whoever resolves it
    if gguf.get("sha256") != seen[2]:
        return True  # another file's index under this name (the same first 12 hex digits)
    recorded = gguf["file"]
    if recorded == str(path.resolve()):
        return False
    try:
        st = os.stat(recorded)
    except (OSError, ValueError):
        return True  # moved away or deleted
    return not (stat.S_ISREG(st.st_mode) and hashes.get(recorded) == [st.st_size, st.st_mtime_ns, seen[2]])


def _seen(path: Path, known) -> tuple[int, int, str]:
    """(size, mtime_ns, sha256) of the file: the remembered hash `known` if size and time are unchanged."""
    st = path.stat()
    if (isinstance(known, list) and len(known) == 3 and known[:2] == [st.st_size, st.st_mtime_ns]
            and isinstance(known[2], str) and re.fullmatch(r"[0-9a-f]{64}", known[2])):
        return st.st_size, st.st_mtime_ns, known[2]
    return st.st_size, st.st_mtime_ns, sha256_file(path)


def _hashes() -> dict:
    """The remembered hashes; {} when there are none yet or the file is damaged (hashed again). A
    named pipe, a folder or a link in its place is refused (a named pipe would block the read)."""
    from tfcli.engine.files import read_small

    path = cache_dir() / HASHES
    if not os.path.lexists(path):
        return {}
    try:
        index = json.loads(read_small(path, HASHES_BYTES, follow=False,
                                      missing=("is missing", "run the command again")))
    except TfcliError as e:
        raise TfcliError(e.message, "remove it: tfcli remembers the hashes of GGUF files there") from None
    except (ValueError, RecursionError):  # damaged: hash again
        return {}
    return index if isinstance(index, dict) else {}


def _save(index: dict) -> None:
    """Record the hashes (the new index replaces the old one at once; failing to write costs only time)."""
    target = cache_dir() / HASHES
    tmp = target.with_name(f"{HASHES}.{os.getpid()}.tmp")
    try:
        if os.path.lexists(target) and not os.path.isfile(target) or os.path.islink(target):
            return  # not tfcli's file (read_small refused it already): left alone
        tmp.write_text(json.dumps(index), encoding="ascii")  # paths' undecodable bytes as \udcXX escapes
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
