"""A model's identity: a short hash that tells one model's weights from another's, for the files
made on a model (steering vectors, sparse autoencoders) that mean nothing on any other.

Hashing a 540 MB weight file on every run would cost a second or two, so the identity is the sha256
of config.json's bytes and, for each weight file of the folder, its name, its size and 64 blocks of
4 KiB read at evenly spaced offsets. Two models of one shape (a fine-tune of the other) differ in
every block of weights, so a sample tells them apart; the same folder copied elsewhere keeps its
identity. What it cannot see: a change confined to bytes between the sampled blocks.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .files import CONFIG_BYTES, open_file, read_small

SAMPLES, BLOCK = 64, 4096
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin")


def model_identity(folder: Path) -> str:
    """16 hex digits naming the model in `folder` (config.json and its weight files)."""
    folder = Path(folder)
    digest = hashlib.sha256()
    config = folder / "config.json"
    if config.is_file():
        digest.update(read_small(config, CONFIG_BYTES))
    for path in sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode("utf-8", "surrogateescape"))
        with open_file(path) as f:
            for i in range(SAMPLES):
                f.seek(max(0, size - BLOCK) * i // (SAMPLES - 1))
                digest.update(f.read(BLOCK))
    return digest.hexdigest()[:16]


def identity_of(lm) -> str:
    """The identity of a loaded model (a tfcli.engine.LoadedModel), computed once per object."""
    found = getattr(lm, "_identity", None)
    if found is None:
        found = model_identity(lm.path)
        try:
            lm._identity = found
        except AttributeError:
            pass
    return found

