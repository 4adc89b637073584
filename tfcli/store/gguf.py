"""GGUF, llama.cpp's model file: read it, dequantize it, and turn a Llama GGUF into a Hugging Face folder.

A GGUF file is, little-endian throughout (spec: ggml-org/ggml docs/gguf.md):

    magic b"GGUF" · version u32 (2 or 3) · tensor_count u64 · kv_count u64
    kv_count x     key: string · value_type u32 · value          metadata: architecture, shapes, tokenizer
    tensor_count x name: string · n_dims u32 · dims u64[n_dims] · type u32 · offset u64
    zero padding up to a multiple of `general.alignment` (default 32), then the tensor data;
    each tensor starts at data_start + offset.

A string is a u64 byte length and UTF-8 bytes; an array is an element type u32, a u64 count and the
elements. `dims` list the fastest-varying axis first (ggml's ne[0] is the row length), so a NumPy
array of shape [rows, cols] has dims [cols, rows]: reversing them gives Hugging Face's [out, in].

Quantized tensors are stored as blocks of 32 weights that share a float16 scale (and, for the `_1`
types, a float16 minimum), or, for the k-quants (`_K`), as blocks of 256 weights whose sub-blocks
of 16 or 32 carry small integer scales of their own. Each block layout below is that of llama.cpp's
ggml-common.h, and each dequantizer follows its `dequantize_row_*` in ggml-quants.c. The file is
memory-mapped and treated as untrusted: every length and offset is checked, and every problem is a
one-line GGUFError.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import secrets
import shutil
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tfcli.engine.families import config_from_hf
from tfcli.engine.errors import CheckpointError, ConfigError, GGUFError, ResourceError, shown, shown_number
from .manifest import MANIFEST_NAME, file_entry, sha256_file

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# progress(stage, done, total): called as work advances; total 0 means "unknown".
Progress = Callable[[str, int, int], None]


# ---------------------------------------------------------------------------------------------------
# Dequantization
# ---------------------------------------------------------------------------------------------------

# ggml type ids (ggml.h `enum ggml_type`), all of them, so that a refusal can name what it refuses.
TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
    11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS",
    18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8",
    25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0",
    39: "MXFP4",
}  # fmt: skip


def _f32(blocks: np.ndarray) -> np.ndarray:  # [N, 4] -> [N, 1]
    return blocks.view("<f4")


def _f16(blocks: np.ndarray) -> np.ndarray:  # [N, 2] -> [N, 1]
    return blocks.view("<f2").astype(np.float32)


def _bf16(blocks: np.ndarray) -> np.ndarray:  # [N, 2] -> [N, 1]
    # bfloat16 is the top half of a float32: shift the 16 stored bits into place.
    return (blocks.view("<u2").astype(np.uint32) << 16).view(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[N, 16] bytes -> [N, 32] 4-bit values: the low nibbles are weights 0..15, the high ones 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """[N, 4] bytes (one little-endian u32 per block) -> [N, 32] bits; bit j belongs to weight j."""
    return ((qh.view("<u4") >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)  # [N, 1] >> [32] -> [N, 32]


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    # block_q4_0: d f16 · qs u8[16]               w = (q - 8) * d,      q in 0..15
    d = _f16(blocks[:, 0:2])  # [N, 1]
    q = _nibbles(blocks[:, 2:18]).astype(np.int8) - 8  # [N, 32]
    return q.astype(np.float32) * d


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    # block_q4_1: d f16 · m f16 · qs u8[16]       w = q * d + m,        q in 0..15
    d, m = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # [N, 1] each
    q = _nibbles(blocks[:, 4:20])  # [N, 32]
    return q.astype(np.float32) * d + m


def _q5_0(blocks: np.ndarray) -> np.ndarray:
    # block_q5_0: d f16 · qh u32 · qs u8[16]      w = (q - 16) * d,     q = nibble | fifth bit << 4
    d = _f16(blocks[:, 0:2])  # [N, 1]
    q = _nibbles(blocks[:, 6:22]) | (_fifth_bits(blocks[:, 2:6]) << 4)  # [N, 32], 0..31
    return (q.astype(np.int8) - 16).astype(np.float32) * d


def _q5_1(blocks: np.ndarray) -> np.ndarray:
    # block_q5_1: d f16 · m f16 · qh u32 · qs u8[16]   w = q * d + m
    d, m = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # [N, 1] each
    q = _nibbles(blocks[:, 8:24]) | (_fifth_bits(blocks[:, 4:8]) << 4)  # [N, 32]
    return q.astype(np.float32) * d + m


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    # block_q8_0: d f16 · qs i8[32]               w = q * d
    d = _f16(blocks[:, 0:2])  # [N, 1]
    return blocks[:, 2:34].view(np.int8).astype(np.float32) * d  # [N, 32]


# The k-quants: super-blocks of 256 weights in sub-blocks of 16 or 32, each sub-block with its own
# scale (and minimum), themselves quantized against the block's float16 d (and dmin).
QK_K = 256


def _k_weights(d: np.ndarray, dmin: np.ndarray, scales: np.ndarray, mins: np.ndarray, q: np.ndarray) -> np.ndarray:
    """w = (d * scale_j) * q - (dmin * min_j) for sub-block j. d, dmin [N, 1]; scales, mins [N, S]; q [N, S, 256/S]."""
    step = (d * scales.astype(np.float32))[:, :, None]  # [N, S, 1]
    low = (dmin * mins.astype(np.float32))[:, :, None]  # [N, S, 1]
    return (step * q.astype(np.float32) - low).reshape(len(q), QK_K)


def _k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[N, 12] bytes -> the 6-bit scales and mins [N, 8] of a Q4_K/Q5_K block. Bytes 0-3 hold
    scales 0-3 and bytes 4-7 mins 0-3 in their low 6 bits; bytes 8-11 hold the low 4 bits of
    scales 4-7 (low nibble) and mins 4-7 (high nibble), whose top 2 bits are the top 2 bits of bytes 0-7."""
    a, b, c = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]  # [N, 4] each
    scales = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 6) << 4)], axis=1)  # [N, 8]
    mins = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 6) << 4)], axis=1)  # [N, 8]
    return scales, mins


def _pairs_of_nibbles(qs: np.ndarray) -> np.ndarray:
    """[N, 128] bytes -> [N, 8, 32] 4-bit values: each run of 32 bytes holds sub-block 2i in its
    low nibbles and sub-block 2i+1 in its high nibbles."""
    runs = qs.reshape(len(qs), 4, 1, 32)  # [N, 4, 1, 32]
    return np.concatenate([runs & 0x0F, runs >> 4], axis=2).reshape(len(qs), 8, 32)


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """[N, 64] bytes -> [N, 256] 2-bit values: for each half of the block, 32 bytes read four
    times, at bit 0, 2, 4 and 6 (Q2_K and Q3_K)."""
    halves = qs.reshape(len(qs), 2, 1, 32)  # [N, 2, 1, 32]
    return ((halves >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3).reshape(len(qs), QK_K)  # [N, 2, 4, 32] -> [N, 256]


def _q2_k(blocks: np.ndarray) -> np.ndarray:
    # block_q2_K: scales u8[16] · qs u8[64] · d f16 · dmin f16
    #   16 sub-blocks of 16: w = (d * scale_j) * q - (dmin * min_j), scale_j / min_j the low / high nibble of scales[j]
    scales = blocks[:, 0:16]  # [N, 16]
    d, dmin = _f16(blocks[:, 80:82]), _f16(blocks[:, 82:84])  # [N, 1] each
    return _k_weights(d, dmin, scales & 0x0F, scales >> 4, _crumbs(blocks[:, 16:80]).reshape(-1, 16, 16))


def _q3_k(blocks: np.ndarray) -> np.ndarray:
    # block_q3_K: hmask u8[32] · qs u8[64] · scales u8[12] · d f16
    #   16 sub-blocks of 16: w = (d * (scale_j - 32)) * (q - 4 * (1 - high bit)); q's 2 low bits as in Q2_K,
    #   its high bit for weight 32k + l (k = 0..7) is bit k of hmask[l]. The 6-bit scales: low 4 bits
    #   in the nibbles of bytes 0-7 (scales 0-7 low, 8-15 high), top 2 bits in bytes 8-11 (2 bits each, by fours).
    n = len(blocks)
    hmask, packed, d = blocks[:, 0:32], blocks[:, 96:108], _f16(blocks[:, 108:110])  # [N, 32], [N, 12], [N, 1]
    low4 = np.concatenate([packed[:, 0:8] & 0x0F, packed[:, 0:8] >> 4], axis=1)  # [N, 16]
    top2 = ((packed[:, None, 8:12] >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3).reshape(n, 16)  # [N, 4, 4] -> [N, 16]
    scales = (low4 | (top2 << 4)).astype(np.int8) - np.int8(32)  # [N, 16], -32..31
    high = (hmask[:, None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # [N, 8, 32]
    q = _crumbs(blocks[:, 32:96]).astype(np.int8) - np.int8(4) * (1 - high.reshape(n, QK_K)).astype(np.int8)  # [N, 256], -4..3
    return _k_weights(d, np.zeros_like(d), scales, np.zeros_like(scales), q.reshape(n, 16, 16))


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    # block_q4_K: d f16 · dmin f16 · scales u8[12] · qs u8[128]
    #   8 sub-blocks of 32: w = (d * scale_j) * q - (dmin * min_j), q in 0..15
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # [N, 1] each
    scales, mins = _k_scales(blocks[:, 4:16])  # [N, 8] each
    return _k_weights(d, dmin, scales, mins, _pairs_of_nibbles(blocks[:, 16:144]))


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    # block_q5_K: d f16 · dmin f16 · scales u8[12] · qh u8[32] · qs u8[128]
    #   as Q4_K with a fifth bit, q in 0..31: bit j of qh[l] is the top bit of weight l of sub-block j
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])  # [N, 1] each
    scales, mins = _k_scales(blocks[:, 4:16])  # [N, 8] each
    fifth = (blocks[:, None, 16:48] >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # [N, 8, 32]
    return _k_weights(d, dmin, scales, mins, _pairs_of_nibbles(blocks[:, 48:176]) | (fifth << 4))


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    # block_q6_K: ql u8[128] · qh u8[64] · scales i8[16] · d f16
    #   16 sub-blocks of 16: w = (d * scale_j) * (q - 32), q 6 bits. Each half of 128 weights uses 64
    #   bytes of ql and 32 of qh: weight 32g + l (g = 0..3) has the low (g = 0, 1) or high (g = 2, 3)
    #   nibble of ql[l + 32 (g % 2)] as its low 4 bits, and bits 2g, 2g+1 of qh[l] as its top 2.
    n = len(blocks)
    ql = blocks[:, 0:128].reshape(n, 2, 1, 64)  # [N, half, 1, 64]
    low4 = np.concatenate([ql & 0x0F, ql >> 4], axis=2).reshape(n, 2, 4, 32)  # [N, half, g, 32]
    top2 = (blocks[:, 128:192].reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3  # [N, half, g, 32]
    q = (low4 | (top2 << 4)).astype(np.int8) - np.int8(32)  # [N, 2, 4, 32], -32..31
    scales = blocks[:, 192:208].view(np.int8)  # [N, 16]
    d = _f16(blocks[:, 208:210])  # [N, 1]
    return _k_weights(d, np.zeros_like(d), scales, np.zeros_like(scales), q.reshape(n, 16, 16))


@dataclass(frozen=True)
class BlockType:
    name: str
    weights: int  # weights per block
    nbytes: int  # bytes per block
    dequantize: Callable[[np.ndarray], np.ndarray]  # [N, nbytes] uint8 -> [N, weights] float32


# The types tfcli dequantizes: the floats, llama.cpp's original block quantizations and its k-quants.
BLOCK_TYPES: dict[int, BlockType] = {
    0: BlockType("F32", 1, 4, _f32),
    1: BlockType("F16", 1, 2, _f16),
    30: BlockType("BF16", 1, 2, _bf16),
    2: BlockType("Q4_0", 32, 18, _q4_0),
    3: BlockType("Q4_1", 32, 20, _q4_1),
    6: BlockType("Q5_0", 32, 22, _q5_0),
    7: BlockType("Q5_1", 32, 24, _q5_1),
    8: BlockType("Q8_0", 32, 34, _q8_0),
    10: BlockType("Q2_K", QK_K, 84, _q2_k),
    11: BlockType("Q3_K", QK_K, 110, _q3_k),
    12: BlockType("Q4_K", QK_K, 144, _q4_k),
    13: BlockType("Q5_K", QK_K, 176, _q5_k),
    14: BlockType("Q6_K", QK_K, 210, _q6_k),
}
SUPPORTED_TYPES = ", ".join(b.name for b in BLOCK_TYPES.values())


def dequantize(data: np.ndarray, type_id: int, shape: tuple[int, ...]) -> np.ndarray:
    """Raw bytes of one tensor (uint8) -> float32 array of `shape` (NumPy order, last axis = a row)."""
    bt = BLOCK_TYPES.get(type_id)
    if bt is None:
        raise GGUFError(f"tensor type {TYPE_NAMES.get(type_id, type_id)} is not supported", f"tfcli dequantizes {SUPPORTED_TYPES}")
    blocks = np.asarray(data, dtype=np.uint8).reshape(-1, bt.nbytes)  # [N, nbytes]
    return bt.dequantize(blocks).reshape(shape)


# ---------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------

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
            raise GGUFError(f"{self.name} is truncated (it ends inside its header)", "the download or copy did not finish; fetch the file again")
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
            raise GGUFError(f"{self.name}: a string in the header is not UTF-8 (byte {start:,})", "the file is corrupt") from None

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
        raise GGUFError(f"{self.name}: unknown metadata value type {vtype} at byte {self.pos:,}", "the file is corrupt or from a newer GGUF version")


# The fewest bytes a metadata entry (key length, type, a u8 value) and a tensor entry (name length,
# n_dims, type, offset) can take: counts in the header that the file cannot hold are refused at once.
_MIN_KV_BYTES, _MIN_TENSOR_BYTES = 8 + 4 + 1, 8 + 4 + 4 + 8
CORRUPT = "the file is corrupt"


class GGUFFile:
    """A GGUF file's metadata and tensors; tensor data stays in the memory map until asked for."""

    def __init__(self, path: Path):
        self.path = Path(path)
        name = self.path.name
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < 4:
                    raise GGUFError(f"{name} is not a GGUF file (it is {size} bytes long)", "the download did not finish; fetch the file again")
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
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
                f"{name}: the header claims {n_kv:,} metadata entries and {n_tensors:,} tensors, more than a file of {size:,} bytes can hold",
                "the file is truncated or corrupt; fetch it again",
            )

        self.metadata: dict[str, Any] = {}
        try:
            for _ in range(n_kv):
                key = cur.string()
                if key in self.metadata:
                    raise GGUFError(f"{name}: metadata key {shown(key)} appears twice", CORRUPT)
                self.metadata[key] = cur.value(cur.scalar("<I"))
        except RecursionError:  # arrays of arrays of ... : only a corrupt file nests that deep
            raise GGUFError(f"{name}: metadata nested too deeply", CORRUPT) from None

        infos = []
        for _ in range(n_tensors):
            tname = cur.string()
            n_dims = cur.scalar("<I")
            if n_dims > _MAX_DIMS:
                raise GGUFError(f"{name}: tensor {shown(tname)} claims {n_dims:,} dimensions (ggml allows {_MAX_DIMS})", CORRUPT)
            dims = [cur.scalar("<Q") for _ in range(n_dims)]
            infos.append((tname, dims, cur.scalar("<I"), cur.scalar("<Q")))

        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
            raise GGUFError(f"{name}: general.alignment {shown(alignment)} is not a power of two", CORRUPT)
        self.data_start = -(-cur.pos // alignment) * alignment  # round up to the alignment
        self.tensors: dict[str, GGUFTensor] = {}
        for tname, dims, type_id, offset in infos:
            self.tensors[tname] = self._tensor(tname, dims, type_id, offset, alignment)

    def _tensor(self, tname: str, dims: list[int], type_id: int, offset: int, alignment: int) -> GGUFTensor:
        name = self.path.name
        if tname in self.tensors:
            raise GGUFError(f"{name}: tensor {shown(tname)} appears twice", CORRUPT)
        if offset % alignment:
            raise GGUFError(f"{name}: tensor {shown(tname)} is at offset {offset:,}, not a multiple of the alignment {alignment}", CORRUPT)
        shape = tuple(reversed(dims))
        numel = math.prod(shape)
        bt = BLOCK_TYPES.get(type_id)
        nbytes = 0
        if bt is not None:
            if bt.weights > 1 and (not dims or dims[0] % bt.weights):
                row = dims[0] if dims else 1
                raise GGUFError(f"{name}: tensor {shown(tname)} has rows of {row:,} weights, not a multiple of {bt.name}'s block of {bt.weights}", CORRUPT)
            nbytes = numel // bt.weights * bt.nbytes
        start = self.data_start + offset
        if start + nbytes > self.size:
            raise GGUFError(
                f"{name} is truncated: tensor {shown(tname)} needs bytes {shown_number(start)}..{shown_number(start + nbytes)} but the file has {self.size:,}",
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


# ---------------------------------------------------------------------------------------------------
# Llama: GGUF names and metadata -> Hugging Face names and config.json
# ---------------------------------------------------------------------------------------------------

ARCHITECTURES = ("llama",)  # GGUF's `general.architecture` values tfcli converts

# llama.cpp's tensor names (gguf-py/gguf/constants.py, MODEL_TENSOR) -> transformers' LlamaForCausalLM keys.
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face key of a GGUF tensor name, or None if a Llama has no such tensor."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)  # "blk", "7", "attn_q.weight"
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_NAMES:
        return f"model.layers.{int(parts[1])}.{_LAYER_NAMES[parts[2]]}"
    return None


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo the row order llama.cpp gives attn_q / attn_k, back to Hugging Face's.

    Hugging Face's RoPE rotates the two halves of each head (dims i and i + Dh/2 form a pair);
    llama.cpp's rotates neighbours (2i, 2i+1). Its converter (convert_hf_to_gguf.py, `permute`)
    therefore reorders each head's rows from [2, Dh/2] to [Dh/2, 2]. We swap them back.
    """
    rows, cols = w.shape  # [n_heads*Dh, D]
    head_dim = rows // n_heads
    w = w.reshape(n_heads, head_dim // 2, 2, cols)  # llama.cpp order: [heads, Dh/2, 2, D]
    return w.swapaxes(1, 2).reshape(rows, cols)  # HF order: [heads, 2, Dh/2, D] -> [n_heads*Dh, D]


def _round32(x: float) -> float:
    """A float32 from the file as the shortest decimal that round-trips (9.999999747e-06 -> 1e-05)."""
    return float(str(np.float32(x)))


def llama_config(g: GGUFFile) -> dict[str, Any]:
    """config.json for transformers' LlamaForCausalLM from a GGUF's metadata (keys: gguf.md, "LLM").

    Every value is checked for its type here, and the result by ModelConfig's own rules in
    check_convertible: a file from an unknown converter is as untrusted as its bytes.
    """
    name = g.path.name
    arch = g.get("general.architecture")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise GGUFError(f"{name}: architecture {shown(arch)} is not supported", f"tfcli converts: {', '.join(ARCHITECTURES)}")

    def key(suffix: str, default: Any = None) -> Any:
        value = g.get(f"{arch}.{suffix}", default)
        if value is None:
            raise GGUFError(f"{name} has no {arch}.{suffix}", "the file's metadata is incomplete")
        return value

    def count(suffix: str, default: Any = None) -> int:
        value = key(suffix, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_COUNT:
            raise GGUFError(f"{name}: {arch}.{suffix} must be a positive integer up to {_MAX_COUNT:,}, not {shown(value)}", CORRUPT)
        return value

    def number(suffix: str, default: Any = None) -> float:
        value = key(suffix, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise GGUFError(f"{name}: {arch}.{suffix} must be a positive number, not {shown(value)}", CORRUPT)
        return _round32(value)

    n_head = count("attention.head_count")
    d_model = count("embedding_length")
    head_dim = count("attention.key_length", d_model // n_head or None)
    if count("rope.dimension_count", head_dim) != head_dim:
        raise GGUFError(f"{name}: RoPE on part of each head (rope.dimension_count) is not supported", "tfcli converts plain Llamas")
    if g.get(f"{arch}.expert_count", 0):
        raise GGUFError(f"{name}: mixture-of-experts Llamas are not supported", "tfcli converts plain Llamas")
    scaling = g.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none" or "rope_freqs.weight" in g.tensors:
        # Llama 3.1+ ships its RoPE frequency scaling as a rope_freqs tensor; the engine has plain RoPE only.
        what = shown(scaling) if scaling != "none" else "a rope_freqs tensor"
        raise GGUFError(f"{name}: RoPE scaling ({what}) is not supported", "only plain RoPE is implemented")
    tokens, _types, _merges = vocabulary(g)
    bos, pad = g.get("tokenizer.ggml.bos_token_id"), g.get("tokenizer.ggml.padding_token_id")
    theta = number("rope.freq_base", 10000.0)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": count("vocab_size", len(tokens) or None),
        "hidden_size": d_model,
        "intermediate_size": count("feed_forward_length"),
        "num_hidden_layers": count("block_count"),
        "num_attention_heads": n_head,
        "num_key_value_heads": count("attention.head_count_kv", n_head),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": count("context_length"),
        "rms_norm_eps": number("attention.layer_norm_rms_epsilon"),
        # transformers 5 reads rope_parameters, earlier versions rope_theta; write both.
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "bos_token_id": bos,
        "eos_token_id": end_of_generation_ids(g),
        "pad_token_id": pad if isinstance(pad, int) and not isinstance(pad, bool) else None,
        "torch_dtype": "float32",
        "initializer_range": 0.02,
        "use_cache": True,
    }


# Sizes in the metadata beyond this are corrupt (config.py's bound on config.json says the same).
_MAX_COUNT = 1 << 24


def vocabulary(g: GGUFFile) -> tuple[list[str], list[int], list[str]]:
    """The file's tokens, their types and the BPE merges, checked to be lists of the right types
    (absent ones are empty; tokenizer_json says when that is a problem)."""
    name = g.path.name
    tokens = g.get("tokenizer.ggml.tokens", [])
    types = g.get("tokenizer.ggml.token_type", None)
    merges = g.get("tokenizer.ggml.merges", [])
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise GGUFError(f"{name}: tokenizer.ggml.tokens is not a list of strings", CORRUPT)
    if types is None:
        types = [_NORMAL] * len(tokens)
    if not isinstance(types, list) or not all(isinstance(t, int) for t in types):
        raise GGUFError(f"{name}: tokenizer.ggml.token_type is not a list of integers", CORRUPT)
    if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
        raise GGUFError(f"{name}: tokenizer.ggml.merges is not a list of strings", CORRUPT)
    return tokens, types, merges


# llama.cpp token types (llama.h `llama_token_type`).
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED = 1, 2, 3, 4

# Tokens llama.cpp ends generation at whatever the file's eos says (llama-vocab.cpp, special_eog_ids):
# a chat model ends a turn with one and a document with another (SmolLM2: <|im_end|> and <|endoftext|>).
_EOG_TEXTS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|end_of_text|>")


def end_of_generation_ids(g: GGUFFile) -> list[int]:
    """The file's eos id first, then its end-of-turn id and the other tokens llama.cpp stops at."""
    ids = [g.get(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")]
    tokens, types, _merges = vocabulary(g)
    ids += [i for i, (t, kind) in enumerate(zip(tokens, types)) if kind == _CONTROL and t in _EOG_TEXTS]
    return list(dict.fromkeys(i for i in ids if isinstance(i, int) and not isinstance(i, bool)))  # unique, first occurrence wins


# ---------------------------------------------------------------------------------------------------
# Tokenizer: GGUF vocabulary -> tokenizer.json
# ---------------------------------------------------------------------------------------------------

# How llama.cpp splits text before BPE, by `tokenizer.ggml.pre` (llama-vocab.cpp, `regex_exprs`), as a
# Hugging Face pre-tokenizer. GPT-2's regex is ByteLevel's own (use_regex); "smollm" and its siblings
# first isolate every digit ("\p{N}"), which is HF's Digits(individual_digits) - the same pipeline as
# SmolLM2's original tokenizer.json.
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_DIGITS_THEN_GPT2 = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL]}
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3 = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": _LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
        dict(_BYTE_LEVEL, use_regex=False),
    ],
}
PRE_TOKENIZERS: dict[str, dict] = {
    "default": _BYTE_LEVEL, "gpt2": _BYTE_LEVEL, "mpt": _BYTE_LEVEL, "olmo": _BYTE_LEVEL,
    "smollm": _DIGITS_THEN_GPT2, "starcoder": _DIGITS_THEN_GPT2, "refact": _DIGITS_THEN_GPT2, "codeshell": _DIGITS_THEN_GPT2,
    "llama-bpe": _LLAMA3, "llama3": _LLAMA3, "smaug-bpe": _LLAMA3, "falcon3": _LLAMA3,
}  # fmt: skip


def tokenizer_json(g: GGUFFile) -> dict[str, Any]:
    """A Hugging Face tokenizer.json for the file's vocabulary: byte-level BPE (`tokenizer.ggml.model`
    "gpt2": GPT-2, Llama 3, SmolLM2) or SentencePiece BPE ("llama": Llama 2, TinyLlama, Mistral)."""
    name = g.path.name
    model = g.get("tokenizer.ggml.model")
    if model not in ("gpt2", "llama"):
        hint = "tfcli converts byte-level BPE ('gpt2') and SentencePiece BPE ('llama') vocabularies"
        raise GGUFError(f"{name}: tokenizer model {shown(model)} is not supported", hint)
    tokens, types, merges = vocabulary(g)
    if not tokens or len(types) != len(tokens):
        raise GGUFError(f"{name}: the tokenizer vocabulary is missing or inconsistent", "the file is corrupt or has no tokenizer")
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        dup = next(t for t, n in Counter(tokens).items() if n > 1)
        raise GGUFError(f"{name}: token {shown(dup)} appears twice in the vocabulary", "a tokenizer.json vocabulary needs unique tokens")
    special = (_CONTROL, _UNKNOWN) if model == "llama" else (_CONTROL,)
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": kind in special}
        for i, (t, kind) in enumerate(zip(tokens, types))
        if kind in special or kind == _USER_DEFINED
    ]
    if model == "gpt2":
        pre = g.get("tokenizer.ggml.pre", "default")
        if not isinstance(pre, str) or pre not in PRE_TOKENIZERS:
            raise GGUFError(f"{name}: pre-tokenizer {shown(pre)} is not supported", f"tfcli knows: {', '.join(sorted(PRE_TOKENIZERS))}")
        for m in merges:
            # A merge is "left right", two tokens of the vocabulary whose concatenation is one too
            # (the tokenizers library refuses anything else when it loads the file).
            left, _, right = m.partition(" ")
            if " " in right or left not in vocab or right not in vocab or left + right not in vocab:
                raise GGUFError(f"{name}: the merge {shown(m)} does not join two tokens of the vocabulary", CORRUPT)
        normalizer, pre_tokenizer = None, PRE_TOKENIZERS[pre]
        decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        bpe = {"unk_token": None, "fuse_unk": False, "byte_fallback": False, "merges": merges}  # byte-level pieces never contain a space
    else:
        # SentencePiece: spaces become "▁", and the text gets one in front even when it starts with
        # a space (SentencePiece's add_dummy_prefix, and llama.cpp, which also puts one after each
        # special token: the normalizer runs on each piece of text between them). A character
        # outside the vocabulary falls back to its UTF-8 bytes, the <0xNN> tokens. Decoding undoes all three.
        prefix = g.get("tokenizer.ggml.add_space_prefix", True) is not False
        spaces = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
        normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, spaces]} if prefix else spaces
        pre_tokenizer = None
        steps = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]
        decoder = {"type": "Sequence", "decoders": steps + ([{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if prefix else [])}
        unk = g.get("tokenizer.ggml.unknown_token_id")
        bpe = {
            "unk_token": tokens[unk] if isinstance(unk, int) and 0 <= unk < len(tokens) else None,
            "fuse_unk": True,
            "byte_fallback": True,
            "merges": sentencepiece_merges(tokens, _scores(g, len(tokens))),
        }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": _post_processor(g, tokens),  # the BOS (and EOS) llama.cpp adds to a prompt
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "continuing_subword_prefix": None, "end_of_word_suffix": None, "ignore_merges": False, "vocab": vocab, **bpe},
    }


def _scores(g: GGUFFile, n: int) -> list[float]:
    scores = g.get("tokenizer.ggml.scores")
    if not isinstance(scores, list) or len(scores) != n or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in scores):
        raise GGUFError(f"{g.path.name}: tokenizer.ggml.scores is missing or is not one number per token", "a SentencePiece vocabulary needs its scores")
    return scores


def sentencepiece_merges(tokens: list[str], scores: list[float]) -> list[list[str]]:
    """The BPE merges a SentencePiece vocabulary implies. SentencePiece (and llama.cpp) join, again
    and again, the two neighbours whose union is the piece with the highest score; as BPE merges,
    every way of cutting a piece into two pieces of the vocabulary is a merge, ranked by the score
    of the piece (ties: the longer left part, then the longer right part; then by ids), the order
    transformers derives for the same file."""
    vocab = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for i, piece in enumerate(tokens):
        cuts = sorted((vocab[piece[:c]], vocab[piece[c:]]) for c in range(1, len(piece)) if piece[:c] in vocab and piece[c:] in vocab)
        ranked += [(scores[i], tokens[left], tokens[right]) for left, right in cuts]
    ranked.sort(key=lambda m: (m[0], len(m[1]), len(m[2])), reverse=True)  # stable: equal keys keep their order
    return [[left, right] for _, left, right in ranked]


def _adds(g: GGUFFile, flag: str) -> bool:
    """Whether llama.cpp puts the BOS ("add_bos_token") or EOS ("add_eos_token") around a prompt: as
    the file says, and when it does not, a BOS for a SentencePiece vocabulary (older files have no flag)."""
    default = flag == "add_bos_token" and g.get("tokenizer.ggml.model") == "llama"
    return g.get(f"tokenizer.ggml.{flag}", default) is True


def _post_processor(g: GGUFFile, tokens: list[str]) -> dict[str, Any] | None:
    """The special tokens to put around a prompt, as llama.cpp does when the file says
    tokenizer.ggml.add_bos_token / add_eos_token (Llama 3: a BOS; SmolLM2: nothing)."""
    before, after, special = [], [], {}
    for flag, key, where in (("add_bos_token", "bos_token_id", before), ("add_eos_token", "eos_token_id", after)):
        i = g.get(f"tokenizer.ggml.{key}")
        if _adds(g, flag) and isinstance(i, int) and 0 <= i < len(tokens):
            where.append(tokens[i])
            special[tokens[i]] = {"id": tokens[i], "ids": [i], "tokens": [tokens[i]]}
    if not special:
        return None

    def template(sequence: str, type_id: int) -> list[dict[str, Any]]:
        def mark(t: str) -> dict[str, Any]:
            return {"SpecialToken": {"id": t, "type_id": type_id}}

        return [mark(t) for t in before] + [{"Sequence": {"id": sequence, "type_id": type_id}}] + [mark(t) for t in after]

    return {"type": "TemplateProcessing", "single": template("A", 0), "pair": template("A", 0) + template("B", 1), "special_tokens": special}


def tokenizer_config(g: GGUFFile, config: dict[str, Any]) -> dict[str, Any]:
    """tokenizer_config.json: special tokens, whether to add BOS, and the chat template."""
    tokens, _types, _merges = vocabulary(g)

    def piece(key: str) -> str | None:
        i = g.get(f"tokenizer.ggml.{key}")
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else None

    out = {
        # The generic class: it loads tokenizer.json as written (a model-specific class may rebuild it).
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": piece("bos_token_id"),
        "eos_token": piece("eos_token_id"),
        "unk_token": piece("unknown_token_id"),
        "pad_token": piece("padding_token_id"),
        "add_bos_token": _adds(g, "add_bos_token"),
        "add_eos_token": _adds(g, "add_eos_token"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
    }
    template = g.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise GGUFError(f"{g.path.name}: tokenizer.chat_template is not a string", CORRUPT)
    if template:
        out["chat_template"] = template
    return out


# ---------------------------------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvertResult:
    path: Path
    n_params: int
    nbytes: int  # bytes written, all files
    types: dict[str, int]  # GGUF tensor types and how many tensors had each


def check_convertible(g: GGUFFile) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Refuse, before any work, what the conversion cannot do; returns config.json, tokenizer.json
    and tokenizer_config.json (built here, where a problem with them is found, and written as they are)."""
    config = llama_config(g)
    try:
        config_from_hf(config)  # the rules every config.json is held to (head counts that divide...)
    except ConfigError as e:
        raise GGUFError(f"{g.path.name}: its metadata describes an impossible model: {e.message.removeprefix('config.json: ')}", CORRUPT) from None
    for t in g.tensors.values():
        if t.type_id not in BLOCK_TYPES:
            raise GGUFError(f"{g.path.name}: tensor {shown(t.name)} is {t.type_name}, which tfcli cannot dequantize", f"supported types: {SUPPORTED_TYPES}")
        if hf_name(t.name) is None:
            raise GGUFError(f"{g.path.name}: tensor {shown(t.name)} has no counterpart in a Hugging Face Llama", "the file is not a plain Llama")
    tokenizer = tokenizer_json(g)  # raises on an unsupported tokenizer
    tok_cfg = tokenizer_config(g, config)  # raises on a chat template that is not text
    return config, tokenizer, tok_cfg


def convert(src: Path, out_dir: Path, *, replace: bool = False, progress: Progress | None = None) -> ConvertResult:
    """Write a Hugging Face Llama folder (float32 safetensors, config, tokenizer, chat template,
    manifest of checksums) for a GGUF file.

    Everything is written into a hidden folder next to out_dir and renamed into place at the end,
    so that an error or Ctrl-C never leaves a half-written model behind.
    """
    src, out_dir = Path(src), Path(out_dir)
    with GGUFFile(src) as g:
        config, tokenizer, tok_cfg = check_convertible(g)
        _check_target(out_dir, replace)
        order = _tensor_order(g, config)
        try:
            out_dir.parent.mkdir(parents=True, exist_ok=True)
            need, free = sum(4 * g.tensors[n].numel for n, _ in order), shutil.disk_usage(out_dir.parent).free
            if free < need + 50_000_000:
                raise ResourceError(
                    f"converting {src.name} needs about {need / 1e6:,.0f} MB of disk space; {out_dir.parent} has {free / 1e6:,.0f} MB free",
                    "free some space or choose another OUT_DIR",
                )
            _remove_stale_partials(out_dir)
            tmp = out_dir.parent / f".{out_dir.name}.partial-{os.getpid()}-{secrets.token_hex(3)}"
            tmp.mkdir()
        except OSError as e:  # a read-only or missing parent folder: the user's to fix
            raise CheckpointError(f"cannot write into {out_dir.parent}: {e.strerror or e}", "choose a writable OUT_DIR") from None
        try:
            manifest = _write_folder(g, config, tokenizer, tok_cfg, order, tmp, progress)
            _move_into_place(tmp, out_dir, replace)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError) and e.errno is not None:  # disk full, quota, I/O error
                raise CheckpointError(f"writing {out_dir} failed: {e.strerror}; nothing was left behind", "free some space, or choose another OUT_DIR") from None
            raise
    nbytes = sum(f["bytes"] for f in manifest["files"].values())
    return ConvertResult(out_dir, manifest["n_params"], nbytes, manifest["source"]["tensor_types"])


def _write_folder(g: GGUFFile, config: dict[str, Any], tokenizer: dict[str, Any], tok_cfg: dict[str, Any], order: list[tuple[str, str]], folder: Path, progress: Progress | None) -> dict[str, Any]:
    """Every file of the model folder, the manifest of their sizes, times and checksums last (see
    store/manifest.py: a cached model is checked against it before use); returns the manifest."""
    files = {"model.safetensors": _write_safetensors(g, order, config, folder / "model.safetensors", progress)}
    texts = {
        "config.json": _json(config),
        "generation_config.json": _json(_generation_config(config)),
        "tokenizer.json": json.dumps(tokenizer, ensure_ascii=False),
        "tokenizer_config.json": _json(tok_cfg),
    }
    if "chat_template" in tok_cfg:
        texts["chat_template.jinja"] = tok_cfg["chat_template"]  # where transformers >= 4.43 looks first
    for fname, text in texts.items():
        data = text.encode("utf-8")
        (folder / fname).write_bytes(data)
        files[fname] = file_entry(folder / fname, hashlib.sha256(data).hexdigest())
    source = {
        "file": g.path.name, "bytes": g.size, "sha256": sha256_file(g.path), "name": g.get("general.name"),
        "tensor_types": dict(Counter(t.type_name for t in g.tensors.values())),
    }  # fmt: skip
    manifest = {
        "format": 1,
        "written_by": "tfcli convert",
        "source": source,
        "n_params": sum(g.tensors[n].numel for n, _ in order),
        "files": files,
    }
    (folder / MANIFEST_NAME).write_text(_json(manifest), encoding="utf-8")
    return manifest


def _remove_stale_partials(out_dir: Path) -> None:
    """Hidden folders that killed conversions into out_dir left behind (.NAME.partial-PID-xxxxxx),
    once their process is gone: a live conversion's folder is left alone."""
    prefix = f".{out_dir.name}.partial-"
    for path in out_dir.parent.glob(prefix + "*"):
        pid = path.name[len(prefix) :].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    if os.name == "nt":
        return True  # no cheap check there: keep the folder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def _check_target(out_dir: Path, replace: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise CheckpointError(f"{out_dir} is a file", "give a folder to write the model into")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not replace:
        raise CheckpointError(f"{out_dir} already exists and is not empty", "choose another folder, or pass --force to replace it")


def _move_into_place(tmp: Path, out_dir: Path, replace: bool) -> None:
    """Rename the finished folder to out_dir; an old out_dir (with replace) goes only once the new one is in."""
    old = None
    if out_dir.is_dir():
        if any(out_dir.iterdir()):
            if not replace:
                raise CheckpointError(f"{out_dir} appeared while converting", "choose another folder, or pass --force to replace it")
            old = out_dir.parent / f".{out_dir.name}.old-{secrets.token_hex(3)}"
            out_dir.rename(old)
        else:
            out_dir.rmdir()
    try:
        tmp.rename(out_dir)
    except BaseException:
        if old is not None:
            old.rename(out_dir)  # put the previous folder back rather than lose both
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _tensor_order(g: GGUFFile, config: dict[str, Any]) -> list[tuple[str, str]]:
    """(GGUF name, HF name) for every tensor, in model order; checks nothing a Llama needs is missing."""
    n_layer = config["num_hidden_layers"]
    if n_layer * len(_LAYER_NAMES) > len(g.tensors):
        # Checked before the list of names is built: block_count may claim millions of layers.
        raise GGUFError(
            f"{g.path.name}: the metadata says {n_layer:,} layers but the file has only {len(g.tensors):,} tensors",
            "the file is not a complete Llama",
        )
    wanted = ["token_embd.weight"]
    for i in range(n_layer):
        wanted += [f"blk.{i}.{n}" for n in _LAYER_NAMES]
    wanted += ["output_norm.weight"] + ([] if config["tie_word_embeddings"] else ["output.weight"])
    missing = [n for n in wanted if n not in g.tensors]
    if missing:
        raise GGUFError(f"{g.path.name}: tensor {shown(missing[0])} is missing ({len(missing)} missing in all)", "the file is not a complete Llama")
    extra = sorted(set(g.tensors) - set(wanted))
    if extra:
        raise GGUFError(f"{g.path.name}: tensor {shown(extra[0])} does not belong to a {n_layer}-layer Llama", "the file is not a plain Llama")
    return [(n, hf_name(n)) for n in wanted]


def _expected_shape(hf: str, c: dict[str, Any]) -> tuple[int, ...]:
    D, F, V, Dh = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * Dh, c["num_key_value_heads"] * Dh
    tail = hf.rsplit(".", 2)[-2]  # "q_proj", "input_layernorm", "embed_tokens", ...
    return {
        "embed_tokens": (V, D), "lm_head": (V, D), "norm": (D,), "input_layernorm": (D,), "post_attention_layernorm": (D,),
        "q_proj": (q, D), "k_proj": (kv, D), "v_proj": (kv, D), "o_proj": (D, q),
        "gate_proj": (F, D), "up_proj": (F, D), "down_proj": (D, F),
    }[tail]  # fmt: skip


def _write_safetensors(g: GGUFFile, order, config, path: Path, progress: Progress | None) -> dict[str, Any]:
    """Stream the dequantized tensors into one safetensors file; returns its size and sha256.

    The header is fully known from the shapes, so it is written first and each tensor follows as
    soon as it is dequantized: memory holds one float32 tensor at a time, not the whole model.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}  # transformers insists on a format
    offset = 0
    for gname, hname in order:
        shape = g.tensors[gname].shape
        if shape != _expected_shape(hname, config):
            want = list(_expected_shape(hname, config))
            raise GGUFError(f"{g.path.name}: tensor {gname!r} has shape {list(shape)} but the metadata implies {want}")
        size = 4 * g.tensors[gname].numel
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
        for gname, hname in order:
            w = g.tensor(gname)  # [rows, cols] float32
            if hname.endswith(("q_proj.weight", "k_proj.weight")):
                heads = config["num_attention_heads"] if "q_proj" in hname else config["num_key_value_heads"]
                w = unpermute_rope_rows(w, heads)
            data = np.ascontiguousarray(w, dtype="<f4").tobytes()
            f.write(data)
            digest.update(data)
            done += len(data)
            if progress:
                progress("convert", done, offset)
    return file_entry(path, digest.hexdigest())


def _generation_config(config: dict[str, Any]) -> dict[str, Any]:
    out = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}
    if config.get("pad_token_id") is not None:
        out["pad_token_id"] = config["pad_token_id"]
    return out




def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
