"""Converting a GGUF file into a Hugging Face folder: float32 safetensors, config, tokenizer, manifest.

What the folder holds is decided by the file's family (family.py reads its GGUF table); this module
checks everything before any work, writes into a hidden folder and renames it into place at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tfcli.engine.errors import ConfigError, GGUFError, ResourceError, shown
from tfcli.engine.families import config_from_hf

from ..lock import partial_name, remove_dead_partials
from ..manifest import MANIFEST_NAME, file_entry, sha256_file
from ..target import check_target, move_into_place, os_error
from tfcli.engine.gguf_weights import INDEX_NAME as GGUF_INDEX

from .family import config_json, expected_shape, family_of, hf_name, restore, tensor_names, transform
from tfcli.engine.formats import BLOCK_TYPES, SUPPORTED_TYPES
from tfcli.engine.gguffile import CORRUPT, GGUFFile
from .tokenizer import tokenizer_config, tokenizer_json, vocabulary

# progress(stage, done, total): called as work advances; total 0 means "unknown".
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ConvertResult:
    path: Path
    n_params: int
    nbytes: int  # bytes written, all files
    types: dict[str, int]  # GGUF tensor types and how many tensors had each


@dataclass(frozen=True)
class Plan:
    """What a conversion will write, all of it built and checked before anything is written."""

    family: ModuleType  # the tfcli.engine.families module whose GGUF table the file follows
    config: dict[str, Any]  # config.json
    tokenizer: dict[str, Any]  # tokenizer.json
    tokenizer_config: dict[str, Any]  # tokenizer_config.json
    order: list[tuple[str, str]]  # (GGUF name, HF name) of every tensor, in model order


def check_convertible(g: GGUFFile) -> Plan:
    """Refuse, before any work, what the conversion cannot do; returns what it will write (the
    tokenizer files are built here, where a problem with them is found, and written as they are)."""
    fam = family_of(g)
    config = config_json(g, fam)
    try:
        config_from_hf(config)  # the rules every config.json is held to (head counts that divide...)
    except ConfigError as e:
        raise GGUFError(f"{g.path.name}: its metadata describes an impossible model: "
                        f"{e.message.removeprefix('config.json: ')}", CORRUPT) from None
    for t in g.tensors.values():
        if t.type_id not in BLOCK_TYPES:
            raise GGUFError(f"{g.path.name}: tensor {shown(t.name)} is {t.type_name}, which tfcli cannot dequantize",
                            f"supported types: {SUPPORTED_TYPES}")
        if hf_name(fam, t.name) is None and t.name not in fam.GGUF.settings_tensors:
            hf_class = fam.GGUF.config["architectures"][0]
            hint = f"the file is not a plain {fam.NAME} model"
            raise GGUFError(f"{g.path.name}: tensor {shown(t.name)} has no counterpart in a Hugging Face {hf_class}",
                            hint)
    n_tokens = len(vocabulary(g)[0])
    if n_tokens > config["vocab_size"]:  # the tokenizer would produce ids the model has no embedding for
        raise GGUFError(f"{g.path.name}: the vocabulary has {n_tokens:,} tokens but the model embeds only "
                        f"{config['vocab_size']:,}", CORRUPT)
    tokenizer = tokenizer_json(g)  # raises on an unsupported tokenizer
    tok_cfg = tokenizer_config(g, config)  # raises on a chat template that is not text
    return Plan(fam, config, tokenizer, tok_cfg, tensor_names(g, fam, config))


def convert(
    src: Path, out_dir: Path, *, replace: bool = False, owned: bool = False, progress: Progress | None = None,
    keep: str | None = None, extra: list[Path] = (),
    sha256: str | None = None,
) -> ConvertResult:
    """Write a Hugging Face folder (float32 safetensors, config, tokenizer, chat template, manifest of
    checksums) for a GGUF file of a family tfcli converts (CONVERTIBLE: Llama, Qwen2, Qwen3, Gemma 3, Phi-3).

    `keep`: run the GGUF in place instead of widening it to float32: the folder holds an index of
    its tensors (engine/gguf_weights.py) naming the file where it is ("link", for -m FILE.gguf) or
    the file itself, moved into the folder ("move", for a pull). `extra`: files moved into the folder
    beside it (a pulled model's licence terms). `sha256`: the file's, when the caller has just
    computed or checked it (it is not read again).

    Everything is written into a hidden folder next to out_dir and renamed into place at the end,
    so that an error, Ctrl-C or SIGTERM never leaves a half-written model behind. An existing out_dir
    is replaced only with `replace`, and only if it is empty or a model tfcli wrote (store/target.py);
    `owned` (a pull into the cache) replaces a cache entry whatever it holds.
    """
    src, out_dir = Path(src), Path(out_dir)
    with GGUFFile(src) as g:
        plan = check_convertible(g)
        check_target(src, out_dir, replace=replace, owned=owned)
        parent = Path(os.path.abspath(out_dir)).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            need = 0 if keep else sum(4 * g.tensors[n].numel for n, _ in plan.order)
            free = shutil.disk_usage(parent).free
            if free < need + 50_000_000:
                raise ResourceError(
                    f"converting {src.name} needs about {need / 1e6:,.0f} MB of disk space; {parent} has "
                    f"{free / 1e6:,.0f} MB free",
                    "free some space or choose another OUT_DIR",
                )
            remove_dead_partials(out_dir)
            tmp = parent / f"{partial_name(out_dir)}{os.getpid()}-{secrets.token_hex(3)}"
            tmp.mkdir()
        except OSError as e:  # a read-only or missing parent folder: the user's to fix
            raise os_error(e, out_dir) from None
        try:
            for path in extra:
                os.replace(path, tmp / Path(path).name)
            manifest = _write_folder(g, plan, tmp, progress, keep, sha256)
            move_into_place(tmp, out_dir, replace=replace, owned=owned)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError) and e.errno is not None:  # disk full, quota, read-only, I/O error
                raise os_error(e, out_dir) from None
            raise
    nbytes = sum(f["bytes"] for f in manifest["files"].values())
    return ConvertResult(out_dir, manifest["n_params"], nbytes, manifest["source"]["tensor_types"])


def _write_folder(g: GGUFFile, plan: Plan, folder: Path, progress: Progress | None, keep: str | None = None,
                  sha256: str | None = None) -> dict[str, Any]:
    """Every file of the model folder, the manifest of their sizes, times and checksums last (see
    store/manifest.py: a cached model is checked against it before use); returns the manifest."""
    _check_shapes(g, plan)
    digest = sha256 or sha256_file(g.path)
    if keep is None:
        files = {"model.safetensors": _write_safetensors(g, plan, folder / "model.safetensors", progress)}
    else:
        files = {}
        if keep == "move":
            os.replace(g.path, folder / "model.gguf")
            files["model.gguf"] = file_entry(folder / "model.gguf", digest)
        ref = "model.gguf" if keep == "move" else str(g.path.resolve())
        tensors = {hname: {"name": gname, **transform(plan.family, hname, plan.config)} for gname, hname in plan.order}
        texts_index = json.dumps({"format": 1, "file": ref, "bytes": g.size, "sha256": digest,
                                  "tensors": tensors}, indent=1)
        (folder / GGUF_INDEX).write_text(texts_index, encoding="utf-8")
        files[GGUF_INDEX] = file_entry(folder / GGUF_INDEX, hashlib.sha256(texts_index.encode("utf-8")).hexdigest())
    for path in sorted(folder.iterdir()):  # files moved in beside the model (licence terms)
        if path.is_file() and path.name not in files:
            files[path.name] = file_entry(path, sha256_file(path))
    texts = {
        "config.json": _json(plan.config),
        "generation_config.json": _json(_generation_config(plan.config)),
        "tokenizer.json": json.dumps(plan.tokenizer, ensure_ascii=False),
        "tokenizer_config.json": _json(plan.tokenizer_config),
    }
    if "chat_template" in plan.tokenizer_config:
        texts["chat_template.jinja"] = plan.tokenizer_config["chat_template"]  # where transformers >= 4.43 looks first
    for fname, text in texts.items():
        data = text.encode("utf-8")
        (folder / fname).write_bytes(data)
        files[fname] = file_entry(folder / fname, hashlib.sha256(data).hexdigest())
    source = {
        "file": g.path.name, "bytes": g.size, "sha256": digest, "name": g.get("general.name"),
        "tensor_types": dict(Counter(t.type_name for t in g.tensors.values())),
    }  # fmt: skip
    manifest = {
        "format": 1,
        "written_by": "tfcli convert",
        "source": source,
        "n_params": sum(g.tensors[n].numel for n, _ in plan.order),
        "files": files,
    }
    (folder / MANIFEST_NAME).write_text(_json(manifest), encoding="utf-8")
    return manifest


def _write_safetensors(g: GGUFFile, plan: Plan, path: Path, progress: Progress | None) -> dict[str, Any]:
    """Stream the dequantized tensors into one safetensors file; returns its size and sha256.

    The header is fully known from the shapes, so it is written first and each tensor follows as
    soon as it is dequantized: memory holds one float32 tensor at a time, not the whole model.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}  # transformers insists on a format
    offset = 0
    for gname, hname in plan.order:
        size = 4 * g.tensors[gname].numel
        shape = g.tensors[gname].shape
        header[hname] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-(8 + len(head)) % 8)  # pad so that the data starts 8-byte aligned, as safetensors does
    digest = hashlib.sha256()
    done = 0
    with open(path, "wb") as f:
        for chunk in (len(head).to_bytes(8, "little"), head):
            f.write(chunk)
            digest.update(chunk)
        for gname, hname in plan.order:
            w = restore(plan.family, hname, g.tensor(gname), plan.config)  # [rows, cols] (or [rows]) float32
            data = np.ascontiguousarray(w, dtype="<f4").tobytes()
            f.write(data)
            digest.update(data)
            done += len(data)
            if progress:
                progress("convert", done, offset)
    return file_entry(path, digest.hexdigest())


def _check_shapes(g: GGUFFile, plan: Plan) -> None:
    for gname, hname in plan.order:
        shape, want = g.tensors[gname].shape, expected_shape(hname, plan.config)
        if shape != want:
            raise GGUFError(f"{g.path.name}: tensor {shown(gname)} has shape {list(shape)} "
                            f"but the metadata implies {list(want)}", CORRUPT)


def _generation_config(config: dict[str, Any]) -> dict[str, Any]:
    out = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}
    if config.get("pad_token_id") is not None:
        out["pad_token_id"] = config["pad_token_id"]
    return out


def _json(obj: Any) -> str:
    from tfcli.engine.files import json_text

    return json_text(obj) + "\n"  # a source file's name may hold bytes that are not UTF-8
