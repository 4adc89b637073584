"""The key/value cache: every layer's keys and values for the positions seen so far.

Written by slice into preallocated arrays: no list of arrays, no concatenate per token (growing a
cache by concatenation copies it every step). `capacity` is the most positions a run may reach,
and memory for all of it is checked up front; the arrays themselves start small and double when a
write needs more room (each position is copied O(1) times on average).
Keys and values are both kept position by position, [L, Hkv, S, Dh]: a decode step writes its key
as Dh floats side by side (4 cache lines a head for Dh = 64), where keys kept transposed,
[L, Hkv, Dh, S], took a float in each of Dh lines (64), and a short context's keys are read as
S lines of Dh floats rather than Dh lines of 16 positions: a SmolLM2 decode step's attention a
third less, 1 row or 4 (benchmarks/README.md). Attention reads the keys as views [Hkv, Dh, S]
(held(), store()), the transposed view of the same floats, so that the scores of a head's queries
are q [G*T, Dh] @ k [Dh, S] wherever they are computed.

The numbers are float32, float16 or Q8_0 blocks (KV_TYPES, `--kv-type`): float16 halves the cache
and what a decode step reads of it, as llama.cpp's default cache does; a key is rounded once, when
written (to the nearest float16, as ggml's fp32_to_fp16), and read back exactly, so a pass sees the
same keys whether they were written by it or by an earlier one. q8_0 keeps each row of Dh numbers as
ggml's Q8_0 blocks (formats.py: 32 int8 and their float16 scale, 34 bytes), as llama.cpp's
`--cache-type-k q8_0`: 34/64 of float16's bytes; a row is quantized once, when written, and the
textbook reads it through formats.py's dequantizer (the compiled attention reads the int8 in place).
float16 is the default of quantized (GGUF) models, float32 of float ones (default_kv_type).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .config import ModelConfig
from .errors import PromptError, ResourceError, UsageError
from .formats import GGMLType, dequantize, quantize
from .memory import check_allocation


FIRST_ROOM = 256  # positions allocated before the first write asks for more
# positions a sliding layer keeps beyond its window: a rollback within them (lookup, a shorter prompt
# reuse) needs no recomputation
SLACK = 256

@dataclass(frozen=True)
class KVType:
    """How a cache keeps a row of Dh numbers: Dh / block blocks of `nbytes` bytes, in arrays of `dtype`."""

    dtype: type
    block: int  # numbers a block holds (1: plain floats)
    nbytes: int  # its bytes

    def width(self, head_dim: int) -> int:
        """Elements of `dtype` a row of head_dim numbers takes: Dh for floats, Dh/32 x 34 bytes for Q8_0."""
        return head_dim // self.block * self.nbytes // np.dtype(self.dtype).itemsize


# --kv-type: the cache's numbers. q8_0: ggml's block_q8_0 (formats.py), as llama.cpp's --cache-type-k q8_0
KV_TYPES = {"f32": KVType(np.float32, 1, 4), "f16": KVType(np.float16, 1, 2), "q8_0": KVType(np.uint8, 32, 34)}


def default_kv_type(quantized: bool) -> str:
    """float16 for a quantized model (GGUF's weights are rounded far more than float16 rounds a key;
    llama.cpp's default), float32 for float weights: the textbook's numbers."""
    return "f16" if quantized else "f32"


def kv_kind(kv_type: str) -> KVType:
    """The KVType of a --kv-type name; UsageError naming the choices otherwise."""
    if kv_type not in KV_TYPES:
        raise UsageError(f"unknown KV cache type {kv_type!r}", f"use one of {', '.join(KV_TYPES)}")
    return KV_TYPES[kv_type]


def kv_dtype(kv_type: str) -> type:
    """The NumPy type of a --kv-type name's arrays (q8_0: uint8, the blocks' bytes); UsageError otherwise."""
    return kv_kind(kv_type).dtype


def check_kv_type(config: ModelConfig, kv_type: str) -> None:
    """UsageError unless `kv_type` is a type a cache of this model can keep: a block type needs a head
    size that is a multiple of its block (llama.cpp refuses a q8_0 cache on such a model too)."""
    kind = kv_kind(kv_type)
    if config.head_dim % kind.block:
        others = ", ".join(t for t, k in KV_TYPES.items() if config.head_dim % k.block == 0)
        raise UsageError(
            f"--kv-type {kv_type} needs a head size that is a multiple of {kind.block}; this model's is "
            f"{config.head_dim}", f"use one of {others}",
        )


def kv_bytes(config: ModelConfig, n_positions: int, kv_type: str = "f32") -> int:
    """Bytes of a cache of `n_positions` positions holding `kv_type` numbers (ModelConfig.kv_cache_bytes)."""
    kind = kv_kind(kv_type)
    return config.kv_cache_bytes(n_positions, kind.nbytes, kind.block)


def stored(x: np.ndarray, dtype: type) -> np.ndarray:
    """Float32 rows x [..., Dh] as a cache whose arrays are of `dtype` keeps them: float32 or float16
    as they are (the assignment rounds: to nearest, ties to even), uint8 as their Q8_0 blocks
    [..., Dh/32 x 34] (formats.quantize: ggml's quantize_row_q8_0_ref)."""
    if dtype != np.uint8:
        return x
    head_dim = x.shape[-1]
    _, blocks = quantize(x.reshape(-1, head_dim), "q8_0")  # [N, Dh/32 x 34]
    return blocks.reshape(*x.shape[:-1], blocks.shape[-1])


def numbers(kept: np.ndarray) -> np.ndarray:
    """What a cache keeps [..., width] as the numbers they stand for [..., Dh]: float32 and float16 as
    they are (a view), Q8_0 blocks dequantized to float32 (formats.py's textbook: w = d * q)."""
    if kept.dtype != np.uint8:
        return kept
    q8 = KV_TYPES["q8_0"]
    head_dim = kept.shape[-1] // q8.nbytes * q8.block
    return dequantize(kept, GGMLType.Q8_0, (*kept.shape[:-1], head_dim))  # [..., Dh] float32


class Cache(Protocol):
    """What a forward pass (engine/model.py) asks of the cache it runs through. The rows of a pass
    are its new tokens [T]; where they stand and what each one attends to is the cache's business:

    - KVCache (below): one sequence, T new tokens at its next positions (a prompt pass, a decode step);
    - BatchCache (below): B sequences at one position, a new token each (generate --samples);
    - Slots (engine/slots.py): B sequences each at its own position, a new token each (serve);
    - Sequences (below): B whole sequences of T tokens in one pass, nothing kept (experiments, score);
    - PartCache (fast/parts.py): one part of a prompt pass split between threads.
    """

    @property
    def length(self) -> int:
        """Positions held before the pass (the longest row's): the pass sizes its temporaries by it."""
        ...

    def positions(self, rows: int) -> np.ndarray:
        """The position of each of a pass's `rows` new tokens [T]; PromptError if they do not fit."""
        ...

    def attend(
        self, layer: int, start: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, attention, weights: bool, **mask
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Keep block `layer`'s new keys and values k, v [T, Hkv, Dh] and let the queries q [T, H, Dh]
        attend over what each row may see -> (context vectors z [T, H, Dh], attention weights
        [H, T, S] if `weights` and the cache keeps them, else None). `start`: the first row's position;
        `attention`: the executor's (engine/executor.py); `mask`: a window and a softcap, if any."""
        ...

    def advance(self, positions: np.ndarray) -> None:
        """The pass over `positions` [T] is complete: they count as held."""
        ...


class BatchRows(Cache, Protocol):
    """The cache of a batch of sequences that decode together, one row each (BatchCache, Slots):
    a row leaves it when its sequence ends (engine/batch.py, Batch)."""

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (ascending), which become rows 0..len(rows)-1."""
        ...


def grouped_attention(
    q: np.ndarray, keys: np.ndarray, values: np.ndarray, n_seq: int, start: int, attention, weights: bool, **mask
):
    """The queries q [B*T, H, Dh] of B sequences of T rows each (sequence 0's first) over their keys
    [B*Hkv, Dh, S] (the transposed view of what the caches keep) and values [B*Hkv, S, Dh], each sequence's
    heads over its own: query head h reads key/value head h // G (the grouping of transformers'
    repeat_kv), so B sequences are one `attention` call over B*Hkv heads of G queries.
    -> (z [B*T, H, Dh], weights [B*Hkv, G, T, S] or None)."""
    rows, n_head, head_dim = q.shape
    t_len, n_kv = rows // n_seq, keys.shape[0] // n_seq
    g = n_head // n_kv
    qg = (
        q.reshape(n_seq, t_len, n_kv, g, head_dim).transpose(0, 2, 3, 1, 4).reshape(n_seq * n_kv, g, t_len, head_dim)
    )  # [B*Hkv, G, T, Dh]
    out, w = attention(qg, keys, values, start, weights, **mask)  # [B*Hkv, G, T, Dh], [B*Hkv, G, T, S]
    z = (
        out.reshape(n_seq, n_kv, g, t_len, head_dim).transpose(0, 3, 1, 2, 4).reshape(rows, n_head, head_dim)
    )  # [B*T, H, Dh]
    return z, w


class KVCache:
    """Keys and values of one sequence. Layers that attend to every position (most) keep every
    position in k and v [Lg, Hkv, room, Dh]. Layers with a sliding window (Gemma 3's sliding layers,
    Phi-3) keep only what their queries can still see: ks and vs, whose row c (of a head) holds
    position `off + c`; when they run out of room, the positions older than the
    window (and SLACK) are dropped and the rest move to the front, so they hold at most about the
    window plus one pass, whatever the length: a 32,768-token Gemma-3-270M cache is the 3 global
    layers' 32,768 positions and the 15 sliding layers' ~1,300, not 18 x 32,768. Attention reads
    a sliding layer's keys from `off` on, with positions counted from there."""

    def __init__(self, config: ModelConfig, capacity: int, kv_type: str = "f32"):
        self.config = config
        check_kv_type(config, kv_type)
        self.dtype = kv_dtype(kv_type)  # the numbers kept: float32, float16 or Q8_0 blocks (uint8)
        self.kv_type = kv_type
        check_allocation(self.nbytes(capacity), f"a KV cache of {capacity:,} positions")
        self.capacity = capacity
        self.length = 0  # positions filled so far, the same for every layer once a forward pass ends
        windows = config.windows or (None,) * config.n_layer
        self.window = max((w for w in windows if w), default=0)  # the sliding layers' window; 0: none
        counts = [0, 0]  # global layers, sliding layers so far
        self.slot = []  # per layer: (sliding?, its index in k/v or in ks/vs)
        for w in windows:
            self.slot.append((bool(w), counts[bool(w)]))
            counts[bool(w)] += 1
        self.n_sliding = counts[True]
        self.off = 0  # the position the sliding layers' first column holds
        self._allocate(min(capacity, FIRST_ROOM))
        self.ks, self.vs = self._arrays(self.n_sliding, min(capacity, FIRST_ROOM))

    @property
    def room(self) -> int:
        """Positions allocated now in the global layers (<= capacity)."""
        return self.v.shape[2]

    def nbytes(self, room: int) -> int:
        """Bytes of this cache's keys and values once it holds `room` positions."""
        return kv_bytes(self.config, room, self.kv_type)

    def _arrays(self, layers: int, room: int) -> tuple[np.ndarray, np.ndarray]:
        shape = (layers, self.config.n_kv_head, room, kv_kind(self.kv_type).width(self.config.head_dim))
        # keys, values [layers, Hkv, room, Dh] (Q8_0: [layers, Hkv, room, Dh/32 x 34] bytes)
        return np.zeros(shape, self.dtype), np.zeros(shape, self.dtype)

    def _allocate(self, room: int) -> None:
        k, v = self._arrays(self.config.n_layer - self.n_sliding, room)  # [Lg, Hkv, room, Dh] each
        if hasattr(self, "k"):
            kept = self.room
            k[:, :, :kept] = self.k  # [Lg, Hkv, kept, Dh]
            v[:, :, :kept] = self.v
        self.k, self.v = k, v

    def reserve(self, end: int, start: int | None = None) -> None:
        """Room for positions 0..end-1 (the sliding layers: for those their queries can see), for
        a pass that writes from `start` (default: the cache's length) on: double (or more, up to
        capacity), checking memory first. The first store of a pass makes room for all layers."""
        if end > self.capacity:
            raise ResourceError(f"the KV cache holds {self.capacity} positions; position {end - 1} does not fit")
        if end > self.room:
            room = min(self.capacity, max(end, 2 * self.room))
            check_allocation(self.nbytes(room), f"a KV cache of {room:,} positions")
            self._allocate(room)
        if self.n_sliding and end - self.off > self.ks.shape[2]:
            self._slide(self.length if start is None else start, end)

    def _slide(self, start: int, end: int) -> None:
        """Room in the sliding layers for a pass writing positions start..end-1: drop the positions
        no query from `start` on can see (older than the window, beyond SLACK), move the others to
        the front, and grow the arrays if that is not enough."""
        keep = max(self.off, start - self.window + 1 - SLACK)  # the oldest position still wanted
        kept = start - keep  # positions keep..start-1 stay; start.. are about to be written
        need, room = end - keep, self.ks.shape[2]
        if need > room:
            room = min(self.capacity, max(need, min(2 * room, self.window + 2 * SLACK)))
            ks, vs = self._arrays(self.n_sliding, room)
        else:
            ks, vs = self.ks, self.vs  # in place: NumPy copies overlapping slices correctly
        ks[:, :, :kept] = self.ks[:, :, keep - self.off : start - self.off]  # [Ls, Hkv, kept, Dh]
        vs[:, :, :kept] = self.vs[:, :, keep - self.off : start - self.off]
        self.ks, self.vs, self.off = ks, vs, keep

    def positions(self, t_len: int) -> np.ndarray:
        """The positions of the next T tokens [T]; PromptError if they do not fit."""
        start, fits = self.length, min(self.config.n_ctx, self.capacity)
        if start + t_len > fits:
            raise PromptError(
                f"{start + t_len} tokens do not fit in the model's context of {fits}",
                "use a shorter prompt or fewer {max_new_tokens}",
            )
        return np.arange(start, start + t_len)

    def advance(self, positions: np.ndarray) -> None:
        """The pass over `positions` is complete: they count as cached."""
        self.length = int(positions[-1]) + 1

    def first(self, layer: int) -> int:
        """The oldest position a layer still holds (0, except on a sliding layer that has slid)."""
        return self.off if self.slot[layer][0] else 0

    def kept(self, layer: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """The keys and values of positions first(layer)..end-1 as the cache keeps them [Hkv, S', width]
        (views: Dh floats a row, or Q8_0 blocks)."""
        sliding, i = self.slot[layer]
        if sliding:
            return self.ks[i, :, : end - self.off], self.vs[i, :, : end - self.off]
        return self.k[i, :, :end], self.v[i, :, :end]

    def held(self, layer: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """The keys [Hkv, Dh, S'] (the transposed view of the stored [Hkv, S', Dh]) and values [Hkv, S', Dh]
        of positions first(layer)..end-1 (views; a Q8_0 cache's dequantized to float32 copies)."""
        keys, values = self.kept(layer, end)  # [Hkv, S', width] each
        return numbers(keys).transpose(0, 2, 1), numbers(values)

    def _write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        end = start + k.shape[0]
        sliding, i = self.slot[layer]
        keys, values, at = (self.ks, self.vs, start - self.off) if sliding else (self.k, self.v, start)
        # [T, Hkv, Dh] -> [Hkv, T, Dh], rounded to the cache's type (float16: to nearest, ties to even; Q8_0: blocks)
        keys[i, :, at : at + end - start] = stored(k.transpose(1, 0, 2), keys.dtype)
        values[i, :, at : at + end - start] = stored(v.transpose(1, 0, 2), values.dtype)

    def store(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write k, v [T, Hkv, Dh] at positions start..start+T-1; return the keys [Hkv, Dh, S'] and
        values [Hkv, S', Dh] of positions first(layer)..start+T-1 (views, no copy)."""
        end = start + k.shape[0]
        self.reserve(end, start)
        self._write(layer, start, k, v)
        return self.held(layer, end)

    def attend(
        self, layer: int, start: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, attention, weights: bool, **mask
    ):
        """Cache.attend over every cached position: q [T, H, Dh], k, v [T, Hkv, Dh] -> (z [T, H, Dh],
        weights [H, T, S] or None). A sliding layer's keys start at first(layer): positions are
        counted from there, and the positions it dropped get weight 0."""
        t_len, n_head, _ = q.shape
        k_all, v_all = self.store(layer, start, k, v)  # [Hkv, Dh, S'] (keys as a transposed view), [Hkv, S', Dh]
        first = self.first(layer)
        z, w = grouped_attention(
            q, k_all, v_all, 1, start - first, attention, weights, **mask
        )  # [T, H, Dh], [Hkv, G, T, S']
        if w is not None and first:  # the dropped positions get no weight: they are beyond the window
            w = np.concatenate([np.zeros((*w.shape[:-1], first), dtype=w.dtype), w], axis=-1)  # [Hkv, G, T, S]
        return z, (None if w is None else w.reshape(n_head, t_len, -1))

    def resumable(self, length: int) -> int:
        """`length` if the cache can go on from there (reset(length)), else 0: a sliding layer
        that has dropped positions a query at `length` would see must start again."""
        return length if length == 0 or length - self.window + 1 >= self.off else 0

    def reset(self, length: int = 0) -> None:
        """Forget positions from `length` on (they are overwritten by the next forward pass)."""
        if self.resumable(length) != length:
            raise ValueError(f"the sliding layers no longer hold the positions before {length}; start again from 0")
        if length == 0:
            self.off = 0
        self.length = length

    def copy(self, capacity: int | None = None) -> KVCache:
        """A new cache holding the same positions (the shared prompt of n choices)."""
        new = KVCache(self.config, capacity or self.capacity, self.kv_type)
        n = self.length
        new.ks, new.vs, new.off = self.ks.copy(), self.vs.copy(), self.off  # [Ls, ...]: what the sliding layers hold
        new.reserve(max(n, 1), 0)  # the global layers' room; the sliding layers' is already enough
        new.k[:, :, :n] = self.k[:, :, :n]  # [Lg, Hkv, n, Dh]
        new.v[:, :, :n] = self.v[:, :, :n]
        new.length = n
        return new


BATCH_HINT = "use fewer {samples} or fewer {max_new_tokens}"


class BatchCache:
    """Keys and values of B sequences that all hold the same number of positions.

    Per layer, the B sequences sit side by side: keys and values [L, B, Hkv, S, Dh] (as KVCache
    keeps them). A layer's keys of the first `rows` sequences are then one [rows*Hkv, Dh, S] view
    (transposed), and B sequences' attention is one call over B*Hkv heads.
    """

    def __init__(self, config: ModelConfig, rows: int, capacity: int, kv_type: str | None = None):
        """`kv_type`: the numbers kept (KV_TYPES); None: those of the cache fill() copies (float32 before)."""
        check_kv_type(config, kv_type or "f32")
        check_allocation(rows * kv_bytes(config, capacity, kv_type or "f32"), f"a KV cache for {rows:,} samples of "
                                                                              f"{capacity:,} positions", BATCH_HINT)
        self.config = config
        self.capacity = capacity  # sized to prompt + new tokens by the caller
        self.rows = rows  # sequences still in the batch: rows 0..rows-1
        self.length = 0
        self.typed = kv_type is not None
        self._allocate(kv_type or "f32")

    def _allocate(self, kv_type: str) -> None:
        self.kv_type = kv_type
        width = kv_kind(kv_type).width(self.config.head_dim)  # Dh (Q8_0: Dh/32 x 34 bytes)
        shape = (self.config.n_layer, self.rows, self.config.n_kv_head, self.capacity, width)
        self.k = np.zeros(shape, kv_dtype(kv_type))  # [L, B, Hkv, capacity, width]
        self.v = np.zeros(shape, kv_dtype(kv_type))  # [L, B, Hkv, capacity, width]

    def fill(self, prefix: KVCache) -> None:
        """Give every row the positions a single-sequence cache holds (the shared prompt)."""
        n = prefix.length
        if n > self.capacity:
            raise ResourceError(f"the batch cache holds {self.capacity} positions; the prompt has {n}")
        if not self.typed and prefix.kv_type != self.kv_type:  # its numbers: the prompt's (nothing written yet)
            self._allocate(prefix.kv_type)
        for layer in range(self.config.n_layer):
            first = prefix.first(layer)  # a sliding layer's older positions are beyond every window: left zero
            keys, values = prefix.kept(layer, n)  # [Hkv, n - first, width] each, as the prompt's cache keeps them
            if keys.dtype != self.k.dtype:  # another type asked for: its numbers, kept as this cache keeps them
                keys, values = stored(numbers(keys), self.k.dtype), stored(numbers(values), self.k.dtype)
            self.k[layer, : self.rows, :, first:n] = keys  # -> every row
            self.v[layer, : self.rows, :, first:n] = values
        self.length = n

    def positions(self, rows: int) -> np.ndarray:
        """The position of each row's next token [B]: the same for every sequence of the batch."""
        if rows != self.rows:
            raise ValueError(f"{rows} new rows for a batch of {self.rows}")
        if self.length + 1 > self.capacity:
            raise PromptError(
                f"{self.length + 1} tokens do not fit in the batch's cache of {self.capacity}",
                "use fewer {max_new_tokens}",
            )
        return np.full(rows, self.length)

    def advance(self, positions: np.ndarray) -> None:
        self.length = int(positions[0]) + 1

    def attend(
        self, layer: int, start: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, attention, weights: bool, **mask
    ):
        """q [B, H, Dh], k, v [B, Hkv, Dh]: one new position for each of B sequences -> z [B, H, Dh].
        B sequences of Hkv heads are one attention call over B*Hkv heads, each over its own keys.
        (No attention weights: nothing records inside a batch step.)"""
        k_all, v_all = self.store(layer, start, k, v)  # [B*Hkv, Dh, S], [B*Hkv, S, Dh]
        z, _ = grouped_attention(q, k_all, v_all, len(q), start, attention, False, **mask)  # [B, H, Dh]
        return z, None

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (ascending), moved to the front in that order."""
        n = self.length
        for dst, src in enumerate(rows):
            if dst != src:  # dst < src: a row is never overwritten before it is moved
                self.k[:, dst, :, :n] = self.k[:, src, :, :n]
                self.v[:, dst, :, :n] = self.v[:, src, :, :n]
        self.rows = len(rows)

    def store(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write each row's new k, v [B, Hkv, Dh] at position `start`; return the keys
        [B*Hkv, Dh, S] and values [B*Hkv, S, Dh] of positions 0..start (views, no copy)."""
        b_len, n_kv, _ = k.shape
        end = start + 1
        if b_len != self.rows:
            raise ValueError(f"{b_len} new rows for a batch of {self.rows}")
        if end > self.capacity:
            raise ResourceError(f"the batch cache holds {self.capacity} positions; position {start} does not fit")
        self.k[layer, :b_len, :, start] = stored(k, self.k.dtype)  # [B, Hkv, Dh] (Q8_0: [B, Hkv, width])
        self.v[layer, :b_len, :, start] = stored(v, self.v.dtype)
        width = self.k.shape[-1]
        keys = numbers(self.k[layer, :b_len, :, :end].reshape(b_len * n_kv, end, width))  # [B*Hkv, S, Dh]
        values = numbers(self.v[layer, :b_len, :, :end].reshape(b_len * n_kv, end, width))  # [B*Hkv, S, Dh]
        return keys.transpose(0, 2, 1), values  # [B*Hkv, Dh, S] (a view), [B*Hkv, S, Dh]


class Sequences:
    """B whole sequences of T tokens in one pass, each from position 0 and attending only within
    itself: the rows of a pass are sequence 0's T tokens, then sequence 1's, ... ([B*T, D]).

    For experiments that run many variants of one text (patching each position, ablating each
    head): B variants go through every matrix product as one [B*T, D] matrix, which reads each
    weight once for all of them. Nothing is kept after the pass."""

    def __init__(self, n_seq: int, t_len: int):
        self.n_seq, self.t_len = n_seq, t_len
        self.length = 0

    def positions(self, rows: int) -> np.ndarray:
        if rows != self.n_seq * self.t_len:
            raise ValueError(f"{rows} rows for {self.n_seq} sequences of {self.t_len} tokens")
        return np.tile(np.arange(self.t_len), self.n_seq)  # [B*T]

    def advance(self, positions: np.ndarray) -> None:
        pass

    def attend(
        self, layer: int, start: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, attention, weights: bool, **mask
    ):
        """q [B*T, H, Dh], k, v [B*T, Hkv, Dh] -> z [B*T, H, Dh]: causal attention in each sequence,
        all B sequences' heads in one call (B*Hkv heads)."""
        b, t = self.n_seq, self.t_len
        _, n_kv, head_dim = k.shape
        kt = k.reshape(b, t, n_kv, head_dim).transpose(0, 2, 3, 1).reshape(b * n_kv, head_dim, t)  # [B*Hkv, Dh, T]
        vs = v.reshape(b, t, n_kv, head_dim).transpose(0, 2, 1, 3).reshape(b * n_kv, t, head_dim)  # [B*Hkv, T, Dh]
        z, _ = grouped_attention(q, kt, vs, b, 0, attention, False, **mask)  # [B*T, H, Dh]
        return z, None
