"""Reading a GGUF file, llama.cpp's model file: its metadata and its tensors, memory-mapped.

A GGUF file is, little-endian throughout (spec: ggml-org/ggml docs/gguf.md):

    magic b"GGUF" · version u32 (2 or 3) · tensor_count u64 · kv_count u64
    kv_count x     key: string · value_type u32 · value          metadata: architecture, shapes, tokenizer
    tensor_count x name: string · n_dims u32 · dims u64[n_dims] · type u32 · offset u64
    zero padding up to a multiple of `general.alignment` (default 32), then the tensor data;
    each tensor starts at data_start + offset.

A string is a u64 byte length and UTF-8 bytes; an array is an element type u32, a u64 count and the
elements. `dims` list the fastest-varying axis first (ggml's ne[0] is the row length), so a NumPy
array of shape [rows, cols] has dims [cols, rows]: reversing them gives Hugging Face's [out, in].

The file is treated as untrusted: every length and offset is checked, and every problem is a
one-line GGUFError.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import GGUFError, shown, shown_number

from .formats import BLOCK_TYPES, TYPE_NAMES, dequantize

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types (gguf.md `gguf_metadata_value_type`) -> struct format.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    type_id: int
    shape: tuple[int, ...]  # NumPy order: the reverse of the file's dims
    start: int  # absolute byte offset in the file
    nbytes: int  # 0 when the type is one tfcli does not know the block size of

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type_id, f"type {self.type_id}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class _Cursor:
    """Reads values from the mapped file; running past its end means the file is truncated."""

    def __init__(self, buf: mmap.mmap | bytes, name: str):
        self.buf, self.pos, self.name = buf, 0, name

    def take(self, n: int) -> int:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(
                f"{self.name} is truncated (it ends inside its header)",
                "the download or copy did not finish; fetch the file again",
            )
        start, self.pos = self.pos, self.pos + n
        return start

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack_from(fmt, self.buf, self.take(size))[0]

    def string(self) -> str:
        n = self.scalar("<Q")
        start = self.take(n)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(
                f"{self.name}: a string in the header is not UTF-8 (byte {start:,})", "the file is corrupt"
            ) from None

    def skip_array(self) -> None:
        """Move past an array value without building it (a vocabulary of 262,144 strings)."""
        etype, count = self.scalar("<I"), self.scalar("<Q")
        if etype in _SCALARS:
            self.take(count * struct.calcsize(_SCALARS[etype]))
        elif etype == _STRING:
            buf, pos, end = self.buf, self.pos, len(self.buf)
            for _ in range(count):  # each string: a u64 length, then its bytes
                if pos + 8 > end:
                    break
                pos += 8 + int.from_bytes(buf[pos : pos + 8], "little")
            self.pos = min(pos, end + 1)
            self.take(0)  # raises if the strings ran past the end of the file
        else:
            for _ in range(count):
                self.value(etype)

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.scalar("<I"), self.scalar("<Q")
            # Every element takes at least this many bytes: a count the rest of the file cannot hold
            # is refused before a list of that length is started.
            least = struct.calcsize(_SCALARS[etype]) if etype in _SCALARS else 8 if etype == _STRING else 12
            if count * least > len(self.buf) - self.pos:
                self.take(count * least)  # raises: the file ends first
            if etype in _SCALARS:
                # Numeric arrays (token types, scores) in one read rather than a Python loop.
                dtype = np.dtype(_SCALARS[etype].replace("?", "u1"))
                start = self.take(count * dtype.itemsize)
                return np.frombuffer(self.buf, dtype, count, start).tolist()
            return [self.value(etype) for _ in range(count)]
        raise GGUFError(
            f"{self.name}: unknown metadata value type {vtype} at byte {self.pos:,}",
            "the file is corrupt or from a newer GGUF version",
        )


# The fewest bytes a metadata entry (key length, type, a u8 value) and a tensor entry (name length,
# n_dims, type, offset) can take: counts in the header that the file cannot hold are refused at once.
_MIN_KV_BYTES, _MIN_TENSOR_BYTES = 8 + 4 + 1, 8 + 4 + 4 + 8
CORRUPT = "the file is corrupt"


# the read-only file mappings GGUFFile made: release() drops their pages alone
_MAPS: weakref.WeakSet = weakref.WeakSet()


# Linux maps cached file pages around each page a read of a mapping touches, and keeps them resident:
# 64 KB of them (mm/memory.c, fault_around_bytes), or the whole large folio the page lies in, up to
# 2 MB on x86-64 (measured on Linux 6.18: one 612-byte row read mapped 512 pages). A read of a tensor
# leaves pages of its neighbours behind, which release(view, FAULT_AROUND) drops too.
FAULT_AROUND = 1 << 21


def release(view: np.ndarray, around: int = 0) -> None:
    """Drop the pages under `view` (raw()'s bytes, or a view of them), and those within `around`
    bytes either side of it in the mapping, from this process's resident memory, once the kernels
    hold a copy of them (fast/run/interleave.py). The file's pages stay in the OS page cache; a
    later read of the view faults them back in, so this is always safe. Anything but a view of a
    GGUFFile's mapping is left alone (its memory would be lost, not dropped)."""
    root = view
    while isinstance(root, np.ndarray):
        root = root.base
    root = root.obj if isinstance(root, memoryview) else root
    if not isinstance(root, mmap.mmap) or root not in _MAPS or root.closed or view.nbytes == 0:
        return
    with memoryview(root) as whole:
        base = np.frombuffer(whole, np.uint8).ctypes.data
    start = max(view.ctypes.data - base - around, 0)
    end = min(view.ctypes.data - base + view.nbytes + around, len(root))
    first = start // mmap.PAGESIZE * mmap.PAGESIZE
    root.madvise(mmap.MADV_DONTNEED, first, end - first)


class GGUFFile:
    """A GGUF file's metadata and tensors; tensor data stays in the memory map until asked for."""

    def __init__(self, path: Path, arrays: bool = True):
        """`arrays=False`: metadata arrays (the vocabulary, merges, scores) are skipped, not read:
        what running the tensors in place needs of the header."""
        self.path = Path(path)
        name = self.path.name
        from .files import open_file

        try:
            # a named pipe or a device given as the file is refused at once (the open never waits)
            with open_file(self.path, GGUFError, missing=("does not exist", "check the path of the .gguf file")) as f:
                size = os.fstat(f.fileno()).st_size
                if size < 4:
                    raise GGUFError(
                        f"{name} is not a GGUF file (it is {size} bytes long)",
                        "the download did not finish; fetch the file again",
                    )
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                _MAPS.add(self._map)
        except FileNotFoundError:
            raise GGUFError(f"{self.path} does not exist", "check the path of the .gguf file") from None
        except IsADirectoryError:
            raise GGUFError(f"{self.path} is a folder, not a GGUF file", "give the .gguf file inside it") from None
        except PermissionError:
            raise GGUFError(f"{self.path} cannot be read (permission denied)", "check the file's permissions") from None
        self.size = size
        cur = _Cursor(self._map, name)
        if self._map[:4] != MAGIC:
            raise GGUFError(
                f"{name} is not a GGUF file (it starts with {bytes(self._map[:4])!r}, not b'GGUF')",
                "tfcli convert reads llama.cpp's .gguf files; a Hugging Face folder can be used as it is with -m",
            )
        cur.take(4)
        self.version = cur.scalar("<I")
        if self.version not in (2, 3):
            # Version 1 used 32-bit counts and lengths; nothing current writes it.
            raise GGUFError(
                f"{name}: GGUF version {self.version} is not supported (tfcli reads versions 2 and 3)",
                "convert the model again with a current llama.cpp",
            )
        n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
        if n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_BYTES > size - cur.pos:
            raise GGUFError(
                f"{name}: the header claims {n_kv:,} metadata entries and {n_tensors:,} tensors, more than a file of "
                f"{size:,} bytes can hold",
                "the file is truncated or corrupt; fetch it again",
            )

        self.metadata: dict[str, Any] = {}
        try:
            for _ in range(n_kv):
                key = cur.string()
                if key in self.metadata:
                    raise GGUFError(f"{name}: metadata key {shown(key)} appears twice", CORRUPT)
                vtype = cur.scalar("<I")
                if vtype == _ARRAY and not arrays:
                    cur.skip_array()
                    self.metadata[key] = None
                else:
                    self.metadata[key] = cur.value(vtype)
        except RecursionError:  # arrays of arrays of ... : only a corrupt file nests that deep
            raise GGUFError(f"{name}: metadata nested too deeply", CORRUPT) from None

        infos = []
        for _ in range(n_tensors):
            tname = cur.string()
            n_dims = cur.scalar("<I")
            if n_dims > _MAX_DIMS:
                raise GGUFError(
                    f"{name}: tensor {shown(tname)} claims {n_dims:,} dimensions (ggml allows {_MAX_DIMS})", CORRUPT
                )
            dims = [cur.scalar("<Q") for _ in range(n_dims)]
            infos.append((tname, dims, cur.scalar("<I"), cur.scalar("<Q")))

        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (
            not isinstance(alignment, int)
            or isinstance(alignment, bool)
            or alignment <= 0
            or alignment & (alignment - 1)
        ):
            raise GGUFError(f"{name}: general.alignment {shown(alignment)} is not a power of two", CORRUPT)
        self.data_start = -(-cur.pos // alignment) * alignment  # round up to the alignment
        self.tensors: dict[str, GGUFTensor] = {}
        for tname, dims, type_id, offset in infos:
            self.tensors[tname] = self._tensor(tname, dims, type_id, offset, alignment)
        if not arrays:  # the pages of the arrays stepped over (Gemma 3's vocabulary: 9 MB) are not needed
            release(np.frombuffer(self._map, np.uint8, min(self.data_start, size)), FAULT_AROUND)
        # No two tensors' bytes may overlap (a file that points two names at one block is corrupt).
        placed = sorted((t for t in self.tensors.values() if t.nbytes), key=lambda t: t.start)
        for before, after in zip(placed, placed[1:]):
            if after.start < before.start + before.nbytes:
                raise GGUFError(
                    f"{self.path.name}: tensors {shown(before.name)} and {shown(after.name)} overlap "
                    f"(bytes {before.start:,}..{before.start + before.nbytes:,} and {after.start:,}..)", CORRUPT,
                )  # fmt: skip

    def _tensor(self, tname: str, dims: list[int], type_id: int, offset: int, alignment: int) -> GGUFTensor:
        name = self.path.name
        if tname in self.tensors:
            raise GGUFError(f"{name}: tensor {shown(tname)} appears twice", CORRUPT)
        if offset % alignment:
            raise GGUFError(
                f"{name}: tensor {shown(tname)} is at offset {offset:,}, not a multiple of the alignment {alignment}",
                CORRUPT,
            )
        shape = tuple(reversed(dims))
        numel = math.prod(shape)
        bt = BLOCK_TYPES.get(type_id)
        nbytes = 0
        if bt is not None:
            if bt.weights > 1 and (not dims or dims[0] % bt.weights):
                row = dims[0] if dims else 1
                raise GGUFError(
                    f"{name}: tensor {shown(tname)} has rows of {row:,} weights, not a multiple of {bt.name}'s block "
                    f"of {bt.weights}",
                    CORRUPT,
                )
            nbytes = numel // bt.weights * bt.nbytes
        start = self.data_start + offset
        if start + nbytes > self.size:
            raise GGUFError(
                f"{name} is truncated: tensor {shown(tname)} needs bytes "
                f"{shown_number(start)}..{shown_number(start + nbytes)} but the file has {self.size:,}",
                "the download or copy did not finish; fetch the file again",
            )
        return GGUFTensor(tname, type_id, shape, start, nbytes)

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as stored (a read-only uint8 view into the map)."""
        t = self.tensors[name]
        return np.frombuffer(self._map, np.uint8, t.nbytes, t.start)

    def tensor(self, name: str) -> np.ndarray:
        """The tensor dequantized to float32, shape in NumPy order."""
        t = self.tensors[name]
        return dequantize(self.raw(name), t.type_id, t.shape)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # an F32 tensor handed out is a view into the map; it closes when that goes
            pass

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
