"""Memory-mapped safetensors reading, treating every file as untrusted.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping tensor names
to {dtype, shape, data_offsets}, then the raw bytes (format: huggingface/safetensors README). We
parse the header ourselves so that tensors become NumPy views of one read-only mmap (no copy, pages
load on first touch) and so that every inconsistency becomes a one-line CheckpointError before any
byte of tensor data is read: lengths past the end of the file, overlapping or out-of-range offsets,
sizes that disagree with shapes, unknown dtypes.
"""

from __future__ import annotations

import json
import math
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CheckpointError, shown, shown_number
from .files import open_regular, read_at

# safetensors dtype name -> (NumPy dtype of the stored bytes, item size). BF16 has no NumPy dtype:
# it is kept as raw uint16 and widened to float32 by `to_float32`.
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
FLOAT_DTYPES = ("F32", "F16", "BF16")

# The reference implementation refuses headers over 100 MB; so do we, before reading them.
MAX_HEADER_BYTES = 100_000_000
CORRUPT = "the file is corrupt; fetch or save it again"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # safetensors dtype name, e.g. "F32"
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class WeightFile:
    """One safetensors file: its validated header and lazily created mmap'd views of its tensors."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.metadata, self.tensors = read_header(self.path)
        self._map: mmap.mmap | None = None

    def _buffer(self) -> mmap.mmap:
        if self._map is None:
            from .files import open_file

            with open_file(self.path) as f:  # the file read_header checked may have been swapped since
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._map

    def raw(self, name: str) -> np.ndarray:
        """The tensor as stored (read-only view into the mmap, no copy)."""
        info = self.tensors[name]
        dtype = DTYPES[info.dtype]
        arr = np.frombuffer(self._buffer(), dtype=dtype, count=info.numel, offset=info.start)
        return arr.reshape(info.shape)

    def release(self, name: str) -> None:
        """Drop this tensor's pages from our mapping, after copying it (fused, or widened to float32).

        The file's pages stay in the OS page cache; they just stop counting in this process's
        resident memory, so that a copy does not cost twice its size. A later read of the view
        faults the pages back in, so this is always safe.
        """
        info = self.tensors[name]
        if self._map is None or info.end <= info.start:
            return
        page = mmap.PAGESIZE
        start = info.start // page * page
        self._map.madvise(mmap.MADV_DONTNEED, start, info.end - start)

    def read_into(self, name: str, out: np.ndarray) -> None:
        """Fill `out` (C-contiguous float32, the tensor's size) with the tensor, for a copy the model
        keeps (a fused matrix). F32 bytes are read straight from the file, without going through
        the mapping, so they never count twice in resident memory."""
        info = self.tensors[name]
        if info.dtype != "F32":
            out[...] = self.float32(name).reshape(out.shape)
            self.release(name)
            return
        read_at(self.path, info.start, out)

    def float32(self, name: str) -> np.ndarray:
        """The tensor as float32: a view for F32, a converted copy for F16/BF16."""
        info = self.tensors[name]
        if info.dtype not in FLOAT_DTYPES:
            raise CheckpointError(
                f"{self.path.name}: tensor {name!r} has dtype {info.dtype}; weights must be F32, F16 or BF16",
                "re-save the checkpoint in a floating-point dtype",
            )
        return to_float32(self.raw(name), info.dtype)


def to_float32(arr: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "F32":
        return arr
    if dtype == "F16":
        return arr.astype(np.float32)
    # bfloat16 is the top half of a float32: shift the 16 stored bits into place.
    return (arr.astype(np.uint32) << 16).view(np.float32)


def read_header(path: Path) -> tuple[dict[str, str], dict[str, TensorInfo]]:
    """Parse and validate a safetensors header without reading any tensor data."""
    name = path.name
    if not os.path.lexists(path):
        raise CheckpointError(f"{path} is missing", "a model folder needs its model.safetensors")
    if path.is_dir():
        raise CheckpointError(
            f"{path} is a directory, not a safetensors file", "remove it, and put the weight file there"
        )
    fd = open_regular(path)  # a named pipe or a device is refused here, before any read could block
    try:
        size = os.fstat(fd).st_size
        prefix = os.pread(fd, 8, 0)
        if size == 0:
            raise CheckpointError(f"{name} is empty", "the download or save did not finish; fetch or save it again")
        if len(prefix) < 8:
            raise CheckpointError(f"{name} is truncated ({size} bytes)", "fetch or save the file again")
        n = int.from_bytes(prefix, "little")
        if n > size - 8:
            raise CheckpointError(
                f"{name}: header length {n:,} is larger than the file ({size:,} bytes); the file is truncated or not "
                "safetensors",
                "fetch or save the file again",
            )
        if n > MAX_HEADER_BYTES:
            raise CheckpointError(
                f"{name}: header of {n:,} bytes is larger than the 100 MB safetensors allows", CORRUPT
            )
        header_bytes = _pread_all(fd, n, 8)
        if len(header_bytes) < n:
            raise CheckpointError(f"{name} ended inside its header", "the file is truncated; fetch or save it again")
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}", "check that it is a readable file") from None
    finally:
        os.close(fd)
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_unique_keys)
    except DuplicateKey as e:
        raise CheckpointError(
            f"{name}: the header names {shown(e.key)} twice", f"a tensor or field appears once; {CORRUPT}"
        ) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # ValueError: also an int of > 4300 digits
        raise CheckpointError(f"{name}: the header is not valid JSON ({type(e).__name__})", CORRUPT) from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{name}: the header is not a JSON object", CORRUPT)

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{name}: __metadata__ must be an object of strings", CORRUPT)
    data_start = 8 + n
    data_size = size - data_start
    tensors: dict[str, TensorInfo] = {}
    for tname, entry in header.items():
        tensors[tname] = _tensor_info(name, tname, entry, data_start, data_size)

    # Byte ranges must not overlap: each byte of data belongs to at most one tensor.
    spans = sorted((t.start, t.end, t.name) for t in tensors.values() if t.end > t.start)
    for (s0, e0, n0), (s1, _e1, n1) in zip(spans, spans[1:]):
        if s1 < e0:
            raise CheckpointError(f"{name}: tensors {shown(n0)} and {shown(n1)} overlap in the file", CORRUPT)
    return {str(k): str(v) for k, v in metadata.items()}, tensors


class DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object, refused when it names a key twice: json.loads would keep the last one silently,
    and a header with two entries for one tensor contradicts itself (other readers keep the first)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return out


def _pread_all(fd: int, n: int, offset: int) -> bytes:
    chunks, done = [], 0
    while done < n:
        chunk = os.pread(fd, min(n - done, 1 << 24), offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def _tensor_info(fname: str, tname: str, entry: object, data_start: int, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{fname}: header entry {shown(tname)} is not an object", CORRUPT)
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise CheckpointError(
            f"{fname}: tensor {shown(tname)} has unknown dtype {shown(dtype)}",
            f"supported dtypes: {', '.join(DTYPES)}",
        )
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise CheckpointError(f"{fname}: tensor {shown(tname)} has an invalid shape {shown(shape)}", CORRUPT)
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise CheckpointError(f"{fname}: tensor {shown(tname)} has invalid data_offsets {shown(offsets)}", CORRUPT)
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise CheckpointError(
            f"{fname}: tensor {shown(tname)} lies outside the file (bytes {shown_number(begin)}..{shown_number(end)} "
            f"of {data_size:,})",
            "the file is truncated or corrupt; fetch or save it again",
        )
    nbytes = _nbytes(shape, DTYPES[dtype].itemsize, data_size)
    if nbytes != end - begin:
        need = f"{nbytes:,} bytes" if nbytes is not None else f"more than the {data_size:,} bytes of data in the file"
        raise CheckpointError(
            f"{fname}: tensor {shown(tname)} of shape {shown(tuple(shape))} and dtype {dtype} needs {need} but has "
            f"{end - begin:,}",
            CORRUPT,
        )
    return TensorInfo(tname, dtype, tuple(shape), data_start + begin, data_start + end)


def _nbytes(shape: list[int], itemsize: int, limit: int) -> int | None:
    """Bytes of a tensor of `shape`, or None once that passes `limit`: a header may claim dimensions
    whose product has millions of digits, which we do not compute."""
    if 0 in shape:
        return 0
    n = itemsize
    for d in shape:
        n *= d
        if n > limit:
            return None
    return n
