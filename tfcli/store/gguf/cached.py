"""`-m FILE.gguf`: a GGUF file run directly, as llama.cpp and ollama users expect. It is converted
once into the model cache, under a name made of the file's name and the start of its sha256, and
loaded from there like any folder afterwards (listed by `tfcli models`, removed by `tfcli rm`).
A changed file has another hash, so it is converted again; the old entry stays until removed.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..manifest import sha256_file
from ..registry import cache_dir
from .writer import Progress, convert


def cache_name(path: Path, sha256: str) -> str:
    """The cache entry of a GGUF file: 'SmolLM2-135M-Instruct.Q4_1-1a2b3c4d5e6f' (a valid model name)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._")[:48] or "gguf"
    return f"{stem}-{sha256[:12]}"


def converted(path: Path, progress: Progress | None = None) -> tuple[Path, bool]:
    """The cache folder holding the conversion of the GGUF file `path`, and whether it was converted
    now (False: an earlier run did). Reads the whole file once to hash it."""
    entry = cache_dir() / cache_name(path, sha256_file(path))
    if entry.is_dir() or entry.is_symlink():
        return entry, False  # checked like every cache entry by whoever resolves it
    convert(path, entry, owned=True, progress=progress)
    return entry, True
