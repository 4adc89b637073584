"""Where models live, and how a -m/--model value becomes a folder.

Names are names, never paths: a name (letters, digits, '.', '_', '-') only ever resolves to a folder
under the shipped `weights/` or under the cache ($TFCLI_HOME/models). Anything that looks like a
path (it has a slash, or starts with '.' or '~') is used as the path the user typed, and only then.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from pathlib import Path

from tfcli.engine.errors import CheckpointError, ModelNotFoundError

from .lock import clear_stale
from .manifest import MANIFEST_NAME, quick_check, read_manifest, verify_manifest

DEFAULT_MODEL = "shakespeare"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

# Models that `tfcli pull NAME` can fetch (how: store/pull.py, RECIPES), with a one-line description.
PULLABLE: dict[str, str] = {
    "smollm2": "SmolLM2-135M-Instruct, a small Llama chat model by Hugging Face",
    "gemma3": "Gemma 3 270M by Google, a base model (it continues text; no chat)",
}

def shipped_dir() -> Path:
    """weights/ inside an installed wheel, or at the root of a source checkout."""
    here = Path(__file__).resolve().parent.parent  # the tfcli package
    for candidate in (here / "weights", here.parent / "weights"):
        if candidate.is_dir():
            return candidate
    return here / "weights"


def home_dir() -> Path:
    """$TFCLI_HOME, else $XDG_CACHE_HOME/tfcli, else ~/.cache/tfcli."""
    if os.environ.get("TFCLI_HOME"):
        try:
            return Path(os.environ["TFCLI_HOME"]).expanduser()
        except RuntimeError:  # ~someone with no such user: the folder is taken as written
            return Path(os.environ["TFCLI_HOME"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tfcli"


def cache_dir() -> Path:
    return home_dir() / "models"


def _is_model_folder(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").exists()


def shipped_models() -> list[str]:
    root = shipped_dir()
    return sorted(p.name for p in root.iterdir() if _is_model_folder(p)) if root.is_dir() else []


def cached_models() -> list[str]:
    """Every entry of the cache, intact or not (a link, a folder without config.json): each is
    listed, and refused when used, rather than silently skipped. Hidden names are a pull's work."""
    root = cache_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if _NAME.fullmatch(p.name) and (p.is_dir() or p.is_symlink()))


def looks_like_path(value: str) -> bool:
    return "/" in value or os.sep in value or value.startswith((".", "~"))


def as_model_arg(folder: Path | str) -> str:
    """How to give a folder to -m so that it is read as that folder: a bare name is a model name."""
    value = str(folder)
    return value if looks_like_path(value) else f"./{value}"


def resolve(value: str | None, *, pull: Callable[[str], Path] | None = None,
            gguf: Callable[[Path], Path] | None = None) -> Path:
    """The folder of a model name or path; ModelNotFoundError with the closest name otherwise.

    A pullable name not yet in the cache is fetched by `pull(name) -> folder` when one is given
    (the CLI passes one that shows progress); without it, the error says to run tfcli pull.
    A .gguf file is converted into the cache once by `gguf(path) -> folder` (store/gguf/cached.py)
    when one is given; without it, the error says to convert it.
    """
    value = DEFAULT_MODEL if value is None else value
    if not value.strip():
        from tfcli.engine.errors import UsageError

        raise UsageError("the model name is empty",
                         "give a name (see 'tfcli models') or a folder, e.g. -m ./my-model; omit -m for the default")
    if looks_like_path(value):
        try:
            path = Path(value).expanduser()
        except RuntimeError:  # ~someone, and there is no such user
            raise ModelNotFoundError(f"no such folder: {value} (no home folder for {value.split('/')[0]})",
                                     "check the path") from None
        if not path.exists():
            raise ModelNotFoundError(f"no such folder: {value}",
                                     "check the path, or give a model name (see 'tfcli models')")
        # a named pipe too: refused when opened
        if not path.is_dir() and path.suffix.lower() == ".gguf" and gguf is not None:
            folder = gguf(path)
            ensure_intact(folder)
            return folder
        if path.is_file():
            hint = (f"convert it first: tfcli convert {value} OUT_DIR" if path.suffix == ".gguf"
                    else "give the folder that holds config.json")
            raise ModelNotFoundError(f"{value} is a file, not a model folder", hint)
        ensure_intact(path)  # a cached model named by its path is checked as by its name
        return path
    if _NAME.fullmatch(value):
        if (shipped_dir() / value).is_dir():
            return shipped_dir() / value
        entry = cache_dir() / value
        if entry.is_dir() or entry.is_symlink():
            clear_stale(cache_dir())  # what killed pulls and conversions left, now that it is safe to remove
            ensure_intact(entry)  # a damaged pull is reported, never used
            return entry
    # a pulled model is cached and pullable: named once
    known = list(dict.fromkeys(shipped_models() + cached_models() + sorted(PULLABLE)))
    if value in PULLABLE:
        if pull is not None:
            return pull(value)
        raise ModelNotFoundError(f"model {value!r} has not been pulled yet", f"run: tfcli pull {value}")
    close = difflib.get_close_matches(value, known, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}?" if close else f"known models: {', '.join(known) or 'none'}"
    if Path(value).is_dir() and Path(value) != Path("."):
        hint += f"; to use the folder {value}, write -m {as_model_arg(value)}"
    raise ModelNotFoundError(f"unknown model {value!r}", hint)


def cache_entry(folder: Path) -> Path | None:
    """The entry of the model cache a folder is (a link in the cache is an entry, checked as one) or
    leads to (a path or a link elsewhere that resolves to an entry is checked as that entry); None
    for a folder outside the cache."""
    folder = Path(folder)
    try:
        root = cache_dir().resolve()
        if folder.absolute().parent.resolve() == root:
            return folder.absolute()
        if folder.resolve().parent == root:
            return folder.resolve()
    except (OSError, RuntimeError):
        pass
    return None


def cache_problems(folder: Path, *, full: bool = False) -> list[str]:
    """What is wrong with a cached model folder, by the one rule every use of the cache follows.

    An entry is a real folder (not a link to one elsewhere, whose files nobody checked) whose files
    are the ones its manifest records (sizes, times and, for a changed time or with full, sha256:
    store/manifest.py). A pulled model must have its manifest (every pull writes one, last: without
    it nothing says the files are whole); a folder copied into the cache by hand has none, and is
    used as it is, like a folder given by path. [] means intact.
    """
    folder = Path(folder)
    if folder.is_symlink():
        try:
            target = str(folder.resolve())
        except (OSError, RuntimeError):
            target = "a path that does not resolve"
        return [f"{folder.name} is a symbolic link (to {target}), not a folder tfcli wrote"]
    if not folder.is_dir():
        return [f"{folder.name} is not a folder"]
    if read_manifest(folder) is None:
        return [f"{MANIFEST_NAME} is missing"] if folder.name in PULLABLE else []
    return verify_manifest(folder) if full else quick_check(folder)


def ensure_intact(folder: Path) -> None:
    """Refuse a cached model folder whose files are not the ones written when it was pulled or converted.

    Only entries of the model cache are checked: a folder the user gives by path is theirs to edit
    (a hand-edited config.json is an experiment, not damage).
    """
    entry = cache_entry(Path(folder))
    if entry is None:
        return
    problems = cache_problems(entry)
    if problems:
        raise damaged(entry.name, entry, problems)


def damaged(name: str, folder: Path, problems: list[str]) -> CheckpointError:
    """The one-line refusal of a damaged cached model, with what fixes it."""
    more = f" and {len(problems) - 1} more problem(s)" if len(problems) > 1 else ""
    fix = (f"run: tfcli pull {name} --force" if name in PULLABLE
           else f"delete {folder} and convert or copy the model again")
    return CheckpointError(f"the cached model {name} is damaged: {problems[0]}{more}; it was not used", fix)
