"""Where models come from: names, the cache, pulls from PyPI, GGUF conversion.

The store sits above the engine: it may import tfcli.engine, never the other way round. `load`
is the convenience most callers want: a model name or folder -> a runnable model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def load(model: str | Path | None = None, *, pull: Callable[[str], Path] | None = None,
         gguf: Callable[[Path], Path] | None = None):
    """Load a model by name (shipped or cached; `pull(name)` fetches a pullable one not cached yet),
    by folder path, or a GGUF file by its path (run in place; `gguf(path)` makes its cache entry,
    by default silently). Returns a tfcli.engine.LoadedModel."""
    from tfcli.engine.loader import load_folder

    from .registry import resolve

    if gguf is None:
        from .gguf.cached import converted

        gguf = lambda path: converted(path)[0]  # noqa: E731

    path = Path(model) if isinstance(model, Path) else resolve(model, pull=pull, gguf=gguf)
    name = path.name if isinstance(model, Path) or model is None or "/" in str(model) else str(model)
    return load_folder(path, name=name)
