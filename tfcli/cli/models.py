"""tfcli models: the models tfcli knows, where they live and how big they are."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from . import options
from .console import note, out


def models(
    as_json: options.Json = False,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Hash every file of the pulled models against the sha256 recorded when they "
                                      "were converted; exit 1 if one is damaged."),
    ] = False,
) -> None:
    """List the shipped models (weights/), the pulled ones (the cache) and the ones 'tfcli pull' can fetch.

    Parameter counts are the tensors actually stored in each folder's model files. A cache entry
    made by '-m FILE.gguf' is listed as 'gguf', with the file it runs in place (--json: kind
    "pulled", as every cache entry, and "gguf_file" that file's path). A cached model is checked
    as every command checks it before use (sizes and times of its files against its manifest);
    --verify also hashes every file, and exits with code 1 when a model is damaged.

    Examples:

      tfcli models

      tfcli models --verify
    """
    from tfcli.engine.errors import CheckpointError
    from tfcli.store import registry
    from tfcli.store.lock import clear_stale
    from tfcli.store.pull import RECIPES

    clear_stale(registry.cache_dir())  # what killed pulls left behind, once nothing uses it
    rows = [_folder_row(name, "shipped", registry.shipped_dir() / name, False) for name in registry.shipped_models()]
    cached = registry.cached_models()
    rows += [_folder_row(name, "pulled", registry.cache_dir() / name, verify) for name in cached]
    for name, description in sorted(registry.PULLABLE.items()):
        if name not in cached:
            recipe = RECIPES[name]
            rows.append(
                {
                    "name": name, "kind": "pullable", "params": recipe.n_params, "bytes": None,
                    "download_bytes": recipe.download_bytes,
                    "family": None, "shape": None, "about": description, "path": None, "gguf_file": None,
                    "source": recipe.source, "problems": [],
                }
            )  # fmt: skip
    if as_json:
        from .json import emit

        emit({"cache": str(registry.cache_dir()), "models": rows}, indent=2)
    else:
        _render(rows, registry.cache_dir(), quiet=verify and any(r["problems"] for r in rows))
    bad = [r for r in rows if r["problems"]]
    if verify and bad:
        first = bad[0]
        fix = (f"run: tfcli pull {first['name']} --force" if first["name"] in registry.PULLABLE
               else f"delete {first['path']} and convert or copy it again")
        if len(bad) == 1:
            raise CheckpointError(f"the model {first['name']} is damaged: {first['problems'][0]}", fix)
        names = ", ".join(r["name"] for r in bad)
        raise CheckpointError(f"{len(bad)} models are damaged: {names} ({first['name']}: {first['problems'][0]})", fix)


def _folder_row(name: str, kind: str, folder: Path, verify: bool) -> dict[str, Any]:
    """What a model folder holds, read from its headers only; a broken folder is listed with its
    problem. A cached one is checked by the rule every use follows (registry.cache_problems)."""
    from tfcli.engine.checkpoint import open_tensors
    from tfcli.engine.errors import TfcliError
    from tfcli.engine.families import load_config
    from tfcli.store.manifest import MANIFEST_NAME
    from tfcli.store.registry import cache_problems

    from tfcli.json_shapes import model_shape

    row: dict[str, Any] = {"name": name, "kind": kind, "params": None, "bytes": None, "family": None, "shape": None,
                           "about": "", "path": str(folder), "gguf_file": None, "problems": []}
    if kind == "pulled":
        row["gguf_file"] = gguf_file(folder)
        row["problems"] = cache_problems(folder, full=verify)
        if verify:
            row["verified"] = not row["problems"] and (folder / MANIFEST_NAME).is_file()
        if folder.is_symlink():  # refused: nothing behind it is looked at
            return row
    row["bytes"] = _folder_bytes(folder)
    if row["problems"]:  # refused before use, so not read either (a file that is not the one written may be a FIFO)
        return row
    try:
        cfg = load_config(folder / "config.json")
        row["family"], row["shape"] = cfg.family, model_shape(cfg)
        row["about"] = (f"{cfg.family} · {cfg.n_layer} blocks · d {cfg.d_model} · "
                        f"{cfg.n_head}/{cfg.n_kv_head} heads · ctx {cfg.n_ctx:,}")
        tensors = open_tensors(folder)
        row["params"] = sum(_numel(tensors.shape(n)) for n in tensors.names)
    except TfcliError as e:
        row["problems"].append(e.message)
    return row


def gguf_file(folder: Path) -> str | None:
    """The GGUF file a cache entry runs in place when `-m FILE.gguf` made it (its index names a
    file outside the folder); None for a pulled model, whose file is inside, or no index at all."""
    from tfcli.engine.errors import TfcliError
    from tfcli.engine.gguf_weights import INDEX_NAME, read_index

    if folder.is_symlink() or not (folder / INDEX_NAME).is_file():
        return None
    try:
        file = Path(read_index(folder)["file"])
    except TfcliError:  # a malformed index is the check's to report (cache_problems), not this label's
        return None
    if not file.is_absolute() or folder.resolve() in file.resolve().parents:
        return None
    return str(file)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _human(n: float | None, unit: str = "") -> str:
    if n is None:
        return "?"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}{unit}"
    return f"{n:.0f}{unit}"


def _size(n: int | None) -> str:
    """A size as everywhere in tfcli (numbers.size: "6.5 MB", "540 MB"), "?" when unknown."""
    from tfcli import numbers

    return "?" if n is None else numbers.size(int(n))


def _status(r: dict[str, Any]) -> tuple[str, str]:
    """A row's status, with markup and as plain text (for its width)."""
    if r["kind"] == "pullable":
        return "[yellow]pullable[/]", "pullable"
    if r["problems"]:
        return "[red]damaged[/]", "damaged"
    if r["kind"] == "shipped":
        return "shipped", "shipped"
    kind = "gguf" if r.get("gguf_file") else "pulled"  # made by -m FILE.gguf: nothing was pulled
    if r.get("verified"):
        return f"[green]{kind} ✓ verified[/]", f"{kind} ✓ verified"
    return f"[green]{kind}[/]", kind


def _render(rows: list[dict[str, Any]], cache: Path, quiet: bool = False) -> None:
    """One block per model: a line of short columns (name, status, params, size), then its folder
    and its shape on lines of their own. A path is never cut by the table: a terminal narrower than
    it wraps it as it wraps any long line, and a copy of it pastes whole. `quiet`: an error follows
    on stderr, which is then the only line there."""
    import textwrap

    from rich.markup import escape
    from rich.text import Text

    if not rows:
        note("no models: weights/ is empty and nothing is pullable")
        return
    from rich.cells import cell_len

    statuses = [_status(r) for r in rows]
    status_width = max(len(plain) for _, plain in statuses)
    sizes = [f"{_size(r['download_bytes'])} download" if r["kind"] == "pullable" else _size(r["bytes"]) for r in rows]
    rest = max(status_width + 2 + 6 + len(" params  ") + len(size) for size in sizes)  # the columns after the name
    # The layout rule (cli/layout.py): the name column is as wide as the names that fit beside the
    # other columns; a longer name (a cache entry named after a long GGUF file) has a line of its
    # own, whole, and its columns go on under the others'.
    fits = [cell_len(r["name"]) for r in rows if cell_len(r["name"]) + 2 + rest <= out.width]
    width = max(fits, default=2)
    for r, (status, plain), size in zip(rows, statuses, sizes):
        where = f"tfcli pull {r['name']}" if r["kind"] == "pullable" else r["path"]
        name, pad_status = f"[bold cyan]{escape(r['name'])}[/]", " " * (status_width - len(plain))
        columns = f"{status}{pad_status}  {_human(r['params']):>6} params  {size}"
        if cell_len(r["name"]) <= width:
            out.print(f"{name}{' ' * (width - cell_len(r['name']))}  {columns}", soft_wrap=True, emoji=False)
        else:
            out.print(name, soft_wrap=True, emoji=False)
            out.print(f"{' ' * width}  {columns}", soft_wrap=True, emoji=False)
        runs = [(f"runs {r['gguf_file']} in place", "dim")] if r.get("gguf_file") else []
        for line, style in [(where, ""), *runs, (r["about"], "dim")] + [(p, "red") for p in r["problems"]]:
            # Wrapped between words under its indent; a path longer than a line stays whole (cli/layout.py).
            for piece in textwrap.wrap(line, max(20, out.width - 4), break_long_words=False, break_on_hyphens=False):
                out.print(Text("    " + piece, style=style), soft_wrap=True, emoji=False)
    if not quiet:
        note(f"cache: {cache} (set TFCLI_HOME to move it)")
