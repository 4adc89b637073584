"""Removing a model from the cache, all or nothing.

Only folders under the cache ($TFCLI_HOME/models) are ever removed, and only by name: the shipped
models are part of tfcli, and a folder given by path is the user's. The folder is first renamed to
a hidden sibling (one rename: the model is gone for every later run at once, never half there),
then deleted; a deletion cut short leaves only a hidden `.NAME.removing-*` folder, which
`cached_models` never lists and the next removal clears away.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tfcli.engine.errors import ModelNotFoundError, TfcliError

from . import registry

_LEFTOVER = ".removing-"


class RemoveError(TfcliError):
    """A model that cannot be removed (shipped, not in the cache, or given as a path)."""


def removable(name: str) -> Path:
    """The cache folder of model `name`, or a RemoveError/ModelNotFoundError saying why not."""
    if not name.strip():
        from tfcli.engine.errors import UsageError

        raise UsageError("the model name is empty",
                         "give the name of a model in the cache, as 'tfcli models' lists them")
    if registry.looks_like_path(name):
        raise RemoveError(f"{name} is a path; tfcli rm removes models from its cache by name",
                          "delete a folder of your own yourself")
    folder = registry.cache_dir() / name
    in_cache = registry._NAME.fullmatch(name) is not None and (folder.is_dir() or folder.is_symlink())
    if not in_cache and name in registry.shipped_models():
        raise RemoveError(
            f"{name} is shipped with tfcli ({registry.shipped_dir() / name}), not pulled; "
            "it is part of the installation",
            "only pulled or converted models in the cache can be removed",
        )
    if not in_cache:
        if name in registry.PULLABLE:
            raise RemoveError(f"{name} is not in the cache (it has not been pulled), so there is nothing to remove")
        known = registry.cached_models()
        import difflib

        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else f"models in the cache: {', '.join(known) or 'none'}"
        raise ModelNotFoundError(f"no model {name!r} in the cache ({registry.cache_dir()})", hint)
    return folder


def folder_bytes(folder: Path) -> int:
    """The bytes removing `folder` frees: none for a link (what it points to is not removed)."""
    if folder.is_symlink():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def remove(name: str) -> Path:
    """Remove the cached model `name`; returns the folder it was. The name is gone after one rename."""
    folder = removable(name)
    clear_leftovers()
    if folder.is_symlink():  # an entry that is a link: the link goes, what it points to is not ours
        try:
            os.unlink(folder)
        except OSError as e:
            raise TfcliError(f"cannot remove {folder}: {e.strerror or e}",
                             "check the permissions of the cache folder") from None
        return folder
    hidden = folder.with_name(f".{folder.name}{_LEFTOVER}{os.getpid()}")
    try:
        os.replace(folder, hidden)
    except OSError as e:
        raise TfcliError(f"cannot remove {folder}: {e.strerror or e}",
                         "check the permissions of the cache folder") from None
    shutil.rmtree(hidden, ignore_errors=True)  # what a failure leaves is hidden, and cleared next time
    return folder


def clear_leftovers() -> None:
    """Delete what earlier removals cut short left behind (hidden `.NAME.removing-PID` folders)."""
    root = registry.cache_dir()
    if not root.is_dir():
        return
    for p in root.iterdir():
        if p.name.startswith(".") and _LEFTOVER in p.name:
            if p.is_symlink():  # left by an older tfcli that renamed a link entry: the link only
                p.unlink(missing_ok=True)
            elif p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
