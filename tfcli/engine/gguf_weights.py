"""A GGUF file's tensors under their Hugging Face names, read in place: a model run from the file.

`-m FILE.gguf` and `tfcli pull` keep the GGUF as it is and write, beside config.json and the
tokenizer, a small index (gguf.json) naming the file and, for each Hugging Face key, the GGUF
tensor that holds it and what llama.cpp's converter did to it:

    {"file": "model.gguf" (beside the index) or an absolute path, "bytes": size of the file,
     "tensors": {"model.layers.0.self_attn.q_proj.weight": {"name": "blk.0.attn_q.weight", "heads": 9},
                 "model.norm.weight": {"name": "output_norm.weight", "shift": 1.0}, ...}}

"heads": the rows are in llama.cpp's RoPE order for that many heads (store/gguf/family.py,
unpermute_rope_rows); "shift": the converter added this to a norm weight. The store writes the
index (it knows each family's GGUF names); this module only follows it. `GGUFTensors` answers a
family's name table as `checkpoint.Tensors` does: matrices as `Quantized` (no float32 copy),
vectors (norms, biases) as float32.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CheckpointError, shown
from .files import CONFIG_BYTES, read_small_text
from .formats import GGMLType
from .gguffile import FAULT_AROUND, GGUFFile, release
from .quantized import Part, Quantized, stack

INDEX_NAME = "gguf.json"
STALE = "run the GGUF file again with -m FILE.gguf, or pull the model again"


def rope_order(rows: int, heads: int) -> np.ndarray:
    """The stored row of each Hugging Face row [rows] when llama.cpp reordered each head's rows
    from [2, Dh/2] to [Dh/2, 2] (the inverse of its converter's permute)."""
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(rows)  # [rows]


@dataclass(frozen=True)
class MappedPart(Part):
    """Rows read in place from the mapped file, whose lookups (an embedding's tokens) read the file
    instead (os.pread, from the OS page cache): a read through the mapping makes the kernel map up
    to 2 MB of pages around each row (gguffile.FAULT_AROUND), and the rows a 512-token prompt looked
    up held most of the matrix resident (25 of SmolLM2's 30 MB, 39 MB of Gemma 3's), beside the
    kernels' copy of the same matrix that a tied output head reads (fast/run/interleave.py).
    `file`: the file, open for reading; `at`: the offset of data's first byte in it."""

    file: object = None
    at: int = 0

    def dequantize(self, stored: np.ndarray | slice, cols: int) -> np.ndarray:
        if not (isinstance(stored, np.ndarray) and self.order is None and self.file is not None):
            return super().dequantize(stored, cols)  # tiles of rows in order: read in place
        row_bytes = self.data.strides[0]
        ids = np.asarray(stored, np.int64)  # [n]
        rows = np.empty((len(ids), row_bytes), np.uint8)  # [n, row bytes]
        fd = self.file.fileno()
        # one read for each run of consecutive rows (the whole table: one run, where a read a row took 262,144)
        starts = [0, *(np.flatnonzero(np.diff(ids) != 1) + 1).tolist(), len(ids)]
        for a, b in zip(starts, starts[1:]):
            if a == b:
                continue
            into = memoryview(rows[a:b].reshape(-1))
            done = 0
            while done < len(into):  # a read stops short past 2 GB, or where the file shrank under us
                got = os.preadv(fd, [into[done:]], self.at + int(ids[a]) * row_bytes + done)
                if got <= 0:
                    return super().dequantize(stored, cols)  # the file shrank under us: the mapping says how
                done += got
        return Part(self.type_id, rows.view(self.data.dtype)).dequantize(slice(None), cols)  # [n, K]


def read_index(folder: Path) -> dict:
    path = Path(folder) / INDEX_NAME
    try:
        index = json.loads(read_small_text(path, CONFIG_BYTES))
        if not (
            isinstance(index, dict) and isinstance(index.get("file"), str) and isinstance(index.get("tensors"), dict)
        ):
            raise TypeError
        return index
    except (ValueError, TypeError, RecursionError):
        raise CheckpointError(f"{path} is malformed", STALE) from None


class GGUFTensors:
    """The tensors of the GGUF file an index names, by Hugging Face key (checkpoint.Tensors' interface)."""

    def __init__(self, folder: Path):
        index = read_index(folder)
        path = Path(index["file"])
        self.file = path if path.is_absolute() else Path(folder) / path
        self.g = GGUFFile(self.file, arrays=False)  # the tokenizer's arrays are not needed: tokenizer.json has them
        if self.g.size != index.get("bytes"):
            self.g.close()
            raise CheckpointError(
                f"{self.file} has changed since it was read ({self.g.size:,} bytes, not {shown(index.get('bytes'))})",
                STALE,
            )
        self.entries: dict[str, dict] = index["tensors"]
        for hf, e in self.entries.items():
            if not (isinstance(e, dict) and e.get("name") in self.g.tensors):
                raise CheckpointError(f"{INDEX_NAME}: {shown(hf)} names no tensor of {self.file.name}", STALE)
        self.used: set[str] = set()

    def _file(self):
        """The file open for reading, for MappedPart's lookups (one per model, closed with it)."""
        if getattr(self, "_opened", None) is None:
            self._opened = open(self.file, "rb", buffering=0)  # noqa: SIM115 (lives as long as the parts)
        return self._opened

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    @property
    def names(self) -> list[str]:
        return list(self.entries)

    @property
    def paths(self) -> list[Path]:
        return [self.file]

    def _info(self, name: str):
        return self.g.tensors[self.entries[name]["name"]]

    def shape(self, name: str) -> tuple[int, ...]:
        return self._info(name).shape

    def dtype(self, name: str) -> str:
        return self._info(name).type_name

    def nbytes(self, name: str) -> int:
        return self._info(name).nbytes

    def get(self, name: str, shape: tuple[int, ...]):
        """A matrix as `Quantized` rows read in place (F32 ones as a float32 view of the file); a
        vector as float32 with the converter's changes undone."""
        self._check(name, shape)
        self.used.add(name)
        e, info = self.entries[name], self._info(name)
        heads = e.get("heads")
        if len(info.shape) == 2:
            data = self.g.raw(info.name).reshape(info.shape[0], -1)  # [N, row_bytes]
            if info.type_id == GGMLType.F32:
                data = data.view("<f4")  # [N, K]
            order = rope_order(info.shape[0], heads) if heads else None
            return Quantized((MappedPart(info.type_id, data, order, self._file(), info.start),), info.shape[1])
        # [n] float32, a copy: a norm read in place each step would keep the file's pages around it resident
        w = np.array(self.g.tensor(info.name))
        release(self.g.raw(info.name), FAULT_AROUND)
        if heads:
            w = w[rope_order(len(w), heads)]
        if e.get("shift"):
            w = w - np.float32(e["shift"])
        return w

    def fused(self, names_rows: list[tuple[str, int]], n_in: int):
        """The matrices `names_rows` ([out_i, in] each) stacked row-wise, as [in, sum out_i]: one
        product instead of several, each part read in place in the mapped file (the fast path
        multiplies parts of one block layout in one call, x quantized once)."""
        return stack([self.get(name, (rows, n_in)) for name, rows in names_rows]).T

    def _check(self, name: str, shape: tuple[int, ...]) -> None:
        if name not in self.entries:
            raise CheckpointError(f"tensor {name!r} is missing from {self.file.name}", STALE)
        if self.shape(name) != tuple(shape):
            raise CheckpointError(
                f"tensor {name!r} has shape {list(self.shape(name))} but config.json implies {list(shape)}", STALE
            )

    def ignore(self, *names: str) -> None:
        self.used.update(name for name in names if name in self.entries)

    def unused(self) -> list[str]:
        return [n for n in self.entries if n not in self.used]
