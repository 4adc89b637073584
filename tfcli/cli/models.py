"""tfcli models: the models tfcli knows, where they live and how big they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from . import options
from .console import note, out


def models(
    as_json: options.Json = False,
    verify: Annotated[bool, typer.Option("--verify", help="Check pulled models against the sha256 checksums recorded when they were converted.")] = False,
) -> None:
    """List the shipped models (weights/), the pulled ones (the cache) and the ones 'tfcli pull' can fetch.

    Parameter counts are the tensors actually stored in each folder's safetensors files.

    Examples:

      tfcli models

      tfcli models --verify
    """
    from tfcli.store import registry
    from tfcli.store.pull import RECIPES

    rows = [_folder_row(name, "shipped", registry.shipped_dir() / name, False) for name in registry.shipped_models()]
    cached = registry.cached_models()
    rows += [_folder_row(name, "pulled", registry.cache_dir() / name, verify) for name in cached]
    for name, description in sorted(registry.PULLABLE.items()):
        if name not in cached:
            recipe = RECIPES[name]
            rows.append(
                {
                    "name": name, "kind": "pullable", "params": recipe.n_params, "bytes": None, "download_bytes": recipe.download_bytes,
                    "shape": description, "path": None, "source": recipe.source, "problems": [],
                }
            )  # fmt: skip
    if as_json:
        print(json.dumps({"cache": str(registry.cache_dir()), "models": rows}, ensure_ascii=False, indent=2))
        return
    _render(rows, registry.cache_dir())


def _folder_row(name: str, kind: str, folder: Path, verify: bool) -> dict[str, Any]:
    """What a model folder holds, read from its headers only; a broken folder is listed with its problem."""
    from tfcli.engine.checkpoint import open_tensors
    from tfcli.engine.families import load_config
    from tfcli.engine.errors import TfcliError
    from tfcli.store.manifest import MANIFEST_NAME, quick_check, verify_manifest

    row: dict[str, Any] = {"name": name, "kind": kind, "params": None, "bytes": _folder_bytes(folder), "shape": "", "path": str(folder), "problems": []}
    try:
        cfg = load_config(folder / "config.json")
        row["shape"] = f"{cfg.family} · {cfg.n_layer} layers · d {cfg.d_model} · {cfg.n_head}/{cfg.n_kv_head} heads · ctx {cfg.n_ctx:,}"
        tensors = open_tensors(folder)
        row["params"] = sum(_numel(tensors.shape(n)) for n in tensors.names)
    except TfcliError as e:
        row["problems"].append(e.message)
    if verify and (folder / MANIFEST_NAME).exists():
        row["problems"] += verify_manifest(folder)
        row["verified"] = not row["problems"]
    elif kind == "pulled":
        row["problems"] += quick_check(folder)  # sizes and times (store/manifest.py): what a run would refuse
    return row


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


def _render(rows: list[dict[str, Any]], cache: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    if not rows:
        note("no models: weights/ is empty and nothing is pullable")
        return
    table = Table(title_justify="left")
    table.add_column("model", style="bold cyan", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("params", justify="right", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("where · what", overflow="fold")
    for r in rows:
        if r["kind"] == "pullable":
            size, where = f"{_human(r['download_bytes'], 'B')} ↓", f"tfcli pull {r['name']}"
        else:
            size, where = _human(r["bytes"], "B"), r["path"]
        status = {"shipped": "shipped", "pulled": "[green]pulled[/]", "pullable": "[yellow]pullable[/]"}[r["kind"]]
        if r.get("verified"):
            status += " [green]✓[/]"
        about = f"{escape(where)}\n[dim]{escape(r['shape'])}[/]" + "".join(f"\n[red]{escape(p)}[/]" for p in r["problems"])
        table.add_row(escape(r["name"]), status, _human(r["params"]), size, about)
    out.print(table)
    note(f"cache: {cache} (set TFCLI_HOME to move it)")
