"""Open a model folder in the Hugging Face layout.

    config.json                      shapes and family (engine/config.py)
    model.safetensors                or model-0000x-of-0000y.safetensors + model.safetensors.index.json
    tokenizer.json                   a `tokenizers` tokenizer
    generation_config.json           optional sampling defaults

Weights are memory-mapped (engine/weightfile.py); the family's name table (engine/families/)
asks for each tensor by name and shape through `Tensors`, which checks both and remembers what was
used so that unexpected extra tensors can be reported.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import ModelConfig
from .errors import CheckpointError
from .files import CONFIG_BYTES, read_small_text
from .gguf_weights import INDEX_NAME as GGUF_INDEX
from .gguf_weights import GGUFTensors
from .weightfile import WeightFile

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


class Tensors:
    """All tensors of a checkpoint, by name, across one or several safetensors files."""

    def __init__(self, files: list[WeightFile]):
        self.files = files
        self._where: dict[str, WeightFile] = {}
        for wf in files:
            for name in wf.tensors:
                if name in self._where:
                    raise CheckpointError(
                        f"tensor {name!r} appears in both {self._where[name].path.name} and {wf.path.name}",
                        "the shards do not belong together; fetch the model again",
                    )
                self._where[name] = wf
        self.used: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._where

    @property
    def names(self) -> list[str]:
        return list(self._where)

    @property
    def paths(self) -> list[Path]:
        return [wf.path for wf in self.files]

    def shape(self, name: str) -> tuple[int, ...]:
        return self._where[name].tensors[name].shape

    def dtype(self, name: str) -> str:
        return self._where[name].tensors[name].dtype

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """The tensor `name` as float32, checked to have `shape` (what config.json implies)."""
        self._check(name, shape)
        self.used.add(name)
        wf = self._where[name]
        arr = wf.float32(name)
        if wf.tensors[name].dtype != "F32":
            wf.release(name)  # widened to a float32 copy: the half-precision pages are not needed
        return arr

    def _check(self, name: str, shape: tuple[int, ...]) -> None:
        if name not in self._where:
            raise CheckpointError(
                f"tensor {name!r} is missing from the checkpoint",
                "the weight file does not match this model family or config.json; re-save or re-convert it",
            )
        actual = self.shape(name)
        if actual != tuple(shape):
            raise CheckpointError(
                f"tensor {name!r} has shape {list(actual)} but config.json implies {list(shape)}",
                "config.json and the weights disagree; use the config.json saved with these weights",
            )

    def fused(self, names_rows: list[tuple[str, int]], n_in: int) -> np.ndarray:
        """Stack [out_i, in] weights row-wise, read from the file straight into their rows (no
        transpose, no page of the mapping touched), and view the result as [in, sum(out_i)]."""
        w = np.empty((sum(rows for _, rows in names_rows), n_in), dtype=np.float32)  # [sum out_i, in]
        start = 0
        for name, rows in names_rows:
            self._check(name, (rows, n_in))
            self.used.add(name)
            self._where[name].read_into(name, w[start : start + rows])
            start += rows
        return w.T  # [in, sum out_i] view

    def ignore(self, *names: str) -> None:
        """Tensors a family knows it does not read (a saved copy of a tied matrix, old buffers)."""
        self.used.update(name for name in names if name in self._where)

    def unused(self) -> list[str]:
        return [n for n in self._where if n not in self.used]


def open_tensors(folder: Path) -> Tensors | GGUFTensors:
    """Find the weights of a model folder and read their headers: safetensors file(s), or the GGUF
    file an index names (engine/gguf_weights.py: a GGUF run in place)."""
    if (folder / GGUF_INDEX).exists():
        return GGUFTensors(folder)
    index = folder / INDEX_NAME
    single = folder / SINGLE_NAME
    if single.exists():
        return Tensors([WeightFile(single)])
    if index.exists():
        text = read_small_text(index, CONFIG_BYTES)
        try:
            weight_map = json.loads(text)["weight_map"]
            shard_names = sorted(set(weight_map.values()))
            if not all(isinstance(s, str) for s in shard_names):
                raise TypeError
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, KeyError, TypeError, AttributeError):
            raise CheckpointError(
                f"{index} is malformed", "it must hold a 'weight_map' of tensor name to shard file"
            ) from None
        shards = []
        for shard in shard_names:
            if Path(shard).name != shard or shard in ("", ".", ".."):
                # A shard is a file beside the index, never a path that leads elsewhere.
                raise CheckpointError(
                    f"{INDEX_NAME} lists the shard {shard!r}, which is not a file name",
                    "shards must be files in the model folder",
                )
            if not (folder / shard).is_file():
                raise CheckpointError(
                    f"shard {shard!r} listed in {INDEX_NAME} is missing from {folder}",
                    "the download did not finish; fetch the model again",
                )
            shards.append(WeightFile(folder / shard))
        return Tensors(shards)
    others = sorted(p.name for p in folder.glob("*.safetensors"))
    if len(others) == 1:
        return Tensors([WeightFile(folder / others[0])])
    if others:
        raise CheckpointError(
            f"{folder} holds several .safetensors files ({', '.join(others[:3])}) but no {INDEX_NAME}",
            f"rename the one to use to {SINGLE_NAME}, or add the index that lists the shards",
        )
    hint = (
        "convert it with 'tfcli convert FILE.gguf DIR'"
        if any(folder.glob("*.gguf"))
        else "the folder needs model.safetensors"
    )
    raise CheckpointError(f"no model.safetensors in {folder}", hint)


@dataclass
class Checkpoint:
    """A model folder opened but not yet turned into a runnable model."""

    path: Path
    config: ModelConfig
    tensors: Tensors | GGUFTensors
    generation: dict[str, Any] = field(default_factory=dict)  # generation_config.json, if any


def open_checkpoint(folder: Path, config: ModelConfig) -> Checkpoint:
    """The weights and sampling defaults of a model folder whose config.json was read into `config`
    (by its family: tfcli.engine.loader.read_checkpoint does both)."""
    folder = Path(folder)
    tensors = open_tensors(folder)
    generation: dict[str, Any] = {}
    gen_path = folder / "generation_config.json"
    if os.path.lexists(gen_path):
        text = read_small_text(gen_path, CONFIG_BYTES)
        try:
            loaded = json.loads(text)
            generation = loaded if isinstance(loaded, dict) else {}
        except (ValueError, RecursionError):
            raise CheckpointError(f"{gen_path} is not valid JSON", "fix or delete generation_config.json") from None
    return Checkpoint(folder, config, tensors, generation)
