"""tfcli show: one model in full: its shape, parameters, files, source and licence, chat template and checksums."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from . import options
from .console import note, out


def show(
    name: Annotated[str, typer.Argument(
        help="A model name (see 'tfcli models') or a model folder.", show_default=False)],
    verify: Annotated[bool, typer.Option(
        "--verify", help="Check every file against the sha256 recorded when the model was converted (slower: "
                         "reads every byte).")] = False,
    template: Annotated[bool, typer.Option("--template", help="Print the chat template itself.")] = False,
    kv_type: options.KvTypeOption = None,
    as_json: options.Json = False,
) -> None:
    """Show one model: its shape, parameters, files and sizes, source and licence, chat template, checksums.

    Reads the folder's headers only; nothing is loaded or pulled.

    Examples:

      tfcli show tang

      tfcli show smollm2 --verify --template
    """
    from .json import emit

    report = describe(name, verify=verify, kv_type=kv_type.value if kv_type else None)
    if as_json:
        emit(report, indent=2)
        return
    _render(report, template)


def describe(name: str, *, verify: bool = False, kv_type: str | None = None) -> dict[str, Any]:
    """Everything `show` says about a model, as the JSON document it prints (its KV cache: of `kv_type`, or
    of the type a run keeps by default)."""
    from tfcli.engine.errors import CheckpointError, ModelNotFoundError
    from tfcli.store import registry

    from .pull import gguf_once

    try:
        folder = registry.resolve(name, gguf=gguf_once)  # a GGUF file: shown as it runs, in place
    except ModelNotFoundError:
        if name in registry.PULLABLE:
            return _pullable(name)
        raise
    except CheckpointError:  # a damaged cache entry: the other commands refuse it, show says what is wrong
        folder = registry.cache_dir() / name
        if registry.looks_like_path(name) or not folder.is_dir():
            raise
    if folder.parent == registry.shipped_dir() and not registry.looks_like_path(name):
        kind = "shipped"
    elif folder.resolve().parent == registry.cache_dir().resolve():
        kind = "pulled"
    else:
        kind = "folder"
    # a GGUF: its cache entry's name
    shown_name = folder.name if kind == "folder" or name.lower().endswith(".gguf") else name
    return _folder(shown_name, kind, folder, verify, kv_type)


def _pullable(name: str) -> dict[str, Any]:
    from tfcli.store.pull import RECIPES
    from tfcli.store.registry import PULLABLE

    recipe = RECIPES[name]
    return {
        "model": name, "kind": "pullable", "path": None, "about": PULLABLE[name], "family": None, "shape": None,
        "params": recipe.n_params, "bytes": recipe.folder_bytes, "download_bytes": recipe.download_bytes, "files": [],
        "source": recipe.source, "licence": recipe.licence or _licence(recipe.source), "chat_template": None,
        "checksums": {"state": "not pulled", "problems": []}, "generation": {},
    }  # fmt: skip


def _folder(name: str, kind: str, folder: Path, verify: bool, kv_type: str | None = None) -> dict[str, Any]:
    from tfcli.engine.chat import load_chat_template
    from tfcli.engine.checkpoint import open_tensors
    from tfcli.engine.families import load_config, read_config_json
    from tfcli.store import registry
    from tfcli.store.manifest import MANIFEST_NAME, _read, quick_check, verify_manifest

    from tfcli.json_shapes import model_shape
    from .models import gguf_file

    cfg = load_config(folder / "config.json")
    tensors = open_tensors(folder)
    n_params = 0
    for t in tensors.names:
        n = 1
        for d in tensors.shape(t):
            n *= d
        n_params += n
    files = [{"name": p.name, "bytes": p.stat().st_size} for p in sorted(folder.iterdir()) if p.is_file()]
    manifest = _read(folder)
    if manifest is None:
        state = "no manifest" if kind != "shipped" else "shipped with tfcli (no manifest)"
        checksums = {"state": state, "problems": []}
    elif verify:
        problems = verify_manifest(folder)
        checksums = {"state": "damaged" if problems else "verified (sha256)", "problems": problems}
    else:
        problems = quick_check(folder)
        checksums = {"state": "damaged" if problems else "sizes and times as recorded (--verify reads every byte)",
                     "problems": problems}
    chat = load_chat_template(folder)
    chat_json = None
    if chat is not None:
        where = "chat_template.jinja" if (folder / "chat_template.jinja").exists() else "tokenizer_config.json"
        chat_json = {"file": where, "eos_token": chat.eos_token or None, "bos_token": chat.bos_token or None,
                     "source": chat.source}
    source, licence = _provenance(name, kind, folder, manifest if isinstance(manifest, dict) else None)
    generation = {}
    if (folder / "generation_config.json").exists():
        try:
            raw = read_config_json(folder / "generation_config.json")
            knobs = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "do_sample")
            generation = {k: v for k, v in raw.items() if k in knobs}
        except Exception:  # noqa: BLE001 - a broken generation_config.json is reported by generate, not here
            generation = {}
    return {
        "model": name, "kind": kind, "path": str(folder), "family": cfg.family, "shape": model_shape(cfg),
        "params": n_params, "bytes": sum(f["bytes"] for f in files), "files": files,
        "source": source, "licence": licence, "chat_template": chat_json, "checksums": checksums,
        "generation": generation,
        "dtype": sorted({tensors.dtype(t) for t in tensors.names}) if hasattr(tensors, "dtype") else None,
        "weights": (weights := _weights(tensors)),
        "kv_cache": _kv_cache(cfg, weights["in_place"] is not None, kv_type),
        "in_cache": kind == "pulled", "manifest": MANIFEST_NAME if manifest is not None else None,
        "removable": kind == "pulled" and not (registry.shipped_dir() / name).is_dir(),
        # made by -m FILE.gguf: the file it runs in place (as models --json)
        "gguf_file": gguf_file(folder) if kind == "pulled" else None,
    }  # fmt: skip


# What a tensor is, by a word of its name (Hugging Face's names; GPT-2's wte, wpe and ln_ too).
KINDS = (("embed", "embedding"), ("wte", "embedding"), ("wpe", "positions"), ("lm_head", "unembedding"),
         ("norm", "norms"), ("ln_", "norms"), ("mlp", "MLP"), ("attn", "attention"))


def _weights(tensors) -> dict[str, Any]:
    """The weights as a run holds them: per format, which kinds of tensor and how many bytes; the
    GGUF file a model runs in place (its blocks are what memory holds) or the float32 a folder is
    widened to."""
    from tfcli.engine.gguf_weights import GGUFTensors

    in_place = isinstance(tensors, GGUFTensors)
    groups: dict[str, dict[str, Any]] = {}
    held = 0
    for t in tensors.names:
        fmt, n = tensors.dtype(t), 1
        for d in tensors.shape(t):
            n *= d
        nbytes = tensors.nbytes(t) if in_place else n * {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}.get(fmt, 4)
        held += nbytes if in_place else 4 * n  # a folder's F16/BF16 are widened to float32 at load
        g = groups.setdefault(fmt, {"format": fmt, "kinds": [], "tensors": 0, "bytes": 0})
        kind = next((k for key, k in KINDS if key in t), "other")
        if kind not in g["kinds"]:
            g["kinds"].append(kind)
        g["tensors"] += 1
        g["bytes"] += nbytes
    file = tensors.paths[0] if in_place else None
    return {"in_place": str(file) if file else None, "file_bytes": file.stat().st_size if file else None,
            "held_bytes": held,
            "formats": sorted(groups.values(), key=lambda g: -g["bytes"])}  # fmt: skip


def _kv_cache(cfg, quantized: bool, kv_type: str | None = None) -> dict[str, Any]:
    """The KV cache of `kv_type` or the one a run keeps by default (engine/kvcache.py: float16 for a GGUF,
    float32 else; --kv-type): its type, bytes a token and for the whole context."""
    from tfcli.engine.kvcache import check_kv_type, default_kv_type, kv_bytes

    kind = kv_type or default_kv_type(quantized)
    check_kv_type(cfg, kind)  # q8_0 on a head size it cannot cut: one line
    return {"type": kind, "bytes_per_token": kv_bytes(cfg, 1, kind), "context_bytes": kv_bytes(cfg, cfg.n_ctx, kind)}


def _provenance(name: str, kind: str, folder: Path, manifest: dict | None) -> tuple[str, str | None]:
    """Where the model comes from and under what licence: the pull recipe, the manifest, the model card."""
    from tfcli.store.pull import RECIPES

    card = _card_facts(folder / "README.md")
    if kind == "pulled" and name in RECIPES:
        source = RECIPES[name].source
        return source, card.get("license") or RECIPES[name].licence or _licence(source)
    if manifest is not None:
        src = manifest.get("source") if isinstance(manifest.get("source"), dict) else {}
        how = "runs in place" if (folder / "gguf.json").exists() else "converted from"
        source = f"{how} {src.get('file', 'a GGUF file')}" + (f" ({src['name']})" if src.get("name") else "")
        return source, card.get("license")
    if kind == "shipped":
        corpus = card.get("corpus")
        source = "trained for tfcli by tools/train.py" + (f" on {corpus}" if corpus else "")
        return source, card.get("license") or "the weights: Apache-2.0, as tfcli; the corpus: as its source says"
    return card.get("corpus") or "a folder of your own", card.get("license")


def _card_facts(path: Path) -> dict[str, str]:
    """A model card's licence (its YAML front matter, as on the Hugging Face hub) and the first line
    of its Corpus section."""
    facts: dict[str, str] = {}
    from tfcli.engine.errors import TfcliError
    from tfcli.engine.files import CONFIG_BYTES, read_small

    try:
        text = read_small(path, CONFIG_BYTES).decode("utf-8")  # a named pipe as README.md: not read, never waited on
    except (TfcliError, UnicodeDecodeError):
        return facts
    if text.startswith("---\n"):
        front = text[4:].partition("\n---")[0]
        m = re.search(r"^license:\s*(\S.*)$", front, re.M)
        if m:
            facts["license"] = m.group(1).strip()
    m = re.search(r"^## Corpus\s*\n+(.+)$", text, re.M)
    if m:
        facts["corpus"] = m.group(1).strip()
    return facts


def _licence(text: str) -> str | None:
    m = re.search(r"\b(Apache-2\.0|MIT|BSD-[23]-Clause|CC-BY(?:-[A-Z]+)*-\d\.\d|GPL-\d\.\d"
                  r"|Llama ?\d(?:\.\d)? Community)\b", text)
    return m.group(1) if m else None


def _render(r: dict[str, Any], template: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .models import _human

    table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    s = r["shape"]
    # as models labels it
    table.add_row("model", f"[bold cyan]{escape(r['model'])}[/] ({'gguf' if r.get('gguf_file') else r['kind']})")
    if r["path"]:
        table.add_row("path", escape(r["path"]))
    else:
        table.add_row("about", escape(r["about"]))
    if s:
        gqa = f" ({s['heads'] // s['kv_heads']} query heads per key/value head)" if s["kv_heads"] != s["heads"] else ""
        table.add_row("shape", f"{r['family']} · {s['layers']} blocks · d_model {s['d_model']:,} · "
                               f"{s['heads']} heads of {s['head_dim']}, {s['kv_heads']} key/value{gqa}")
        table.add_row("", f"MLP {s['mlp']} of {s['d_ff']:,} · {s['norm']} · {s['positions']} positions · vocabulary "
                          f"{s['vocab']:,} · context {s['context']:,}"
                      + (" · tied embeddings" if s["tied"] else ""))  # fmt: skip
    table.add_row("parameters", f"{r['params']:,} ({_human(r['params'])})"
                  + (f" · {', '.join(r['dtype'])}" if r.get("dtype") else ""))
    _file_rows(table, r)
    table.add_row("source", escape(r["source"]))
    table.add_row("licence", escape(r["licence"] or "not stated"))
    chat = r["chat_template"]
    if chat:
        table.add_row("chat template", f"yes ({escape(chat['file'])}"
                      + (f", ends a turn with {escape(chat['eos_token'])}" if chat["eos_token"] else "")
                      + "): tfcli chat works")
    elif r["kind"] != "pullable":
        table.add_row("chat template", "none: a text model (tfcli generate continues text)")
    if r["generation"]:
        knobs = ", ".join(f"{k} {str(v).lower() if isinstance(v, bool) else v}" for k, v in r["generation"].items())
        table.add_row("sampling", escape(knobs) + " [dim](generation_config.json)[/]")
    c = r["checksums"]
    state = f"[red]{escape(c['state'])}[/]" if c["problems"] else escape(c["state"])
    table.add_row("checksums", state + "".join(f"\n[red]{escape(p)}[/]" for p in c["problems"]))
    out.print(table)
    if template:
        if chat:
            out.print()
            out.print(chat["source"], markup=False, highlight=False)
        else:
            note("no chat template to print")


def _file_rows(table, r: dict[str, Any]) -> None:
    """The files, their size and how the weights are held (or, not pulled yet, the download)."""
    from rich.markup import escape

    from .models import _size

    if r["files"]:
        for i, f in enumerate(r["files"]):
            table.add_row("files" if i == 0 else "", f"{escape(f['name'])}  [dim]{_size(f['bytes'])}[/]")
        table.add_row("size", _size(r["bytes"]))
        w = r["weights"]
        held = f"{_size(w['held_bytes'])} in memory when loaded"
        table.add_row("weights", f"run in place from {escape(w['in_place'])} ({_size(w['file_bytes'])}): {held}"
                      if w["in_place"] else held + " (float32)")
        for g in w["formats"]:
            table.add_row("", f"{g['format']}  {', '.join(g['kinds'])}  [dim]{g['tensors']:,} "
                              f"tensor{'s' if g['tensors'] != 1 else ''}, {_size(g['bytes'])}[/]")
        kv = r["kv_cache"]
        table.add_row("KV cache", f"{kv['type']}: {_size(kv['bytes_per_token'])} a token, {_size(kv['context_bytes'])} "
                                  f"for the whole context [dim](--kv-type)[/]")
    else:
        table.add_row("size", f"{_size(r['download_bytes'])} download, {_size(r['bytes'])} on disk: tfcli pull "
                              f"{escape(r['model'])}")
