"""A weight matrix kept as the file stores it: rows of quantized blocks, read in place.

A GGUF file stores a matrix as N rows of K weights, each row a run of blocks (engine/formats.py
draws each block type). `Quantized` holds those rows as they lie in the memory-mapped file, with
no float32 copy, and stands in for the float32 matrix wherever a family keeps a weight:

- `w.T` flips it, as for an array: a family's [in, out] weight is the transpose of the stored
  [out, in] rows, exactly as a float32 weight is a view of its stored rows (engine/families/);
- `w[...]` indexes it as the float32 matrix would be indexed, dequantizing only the stored rows
  the index needs (an embedding lookup reads T rows of V; a logit for one token reads one row);
- `np.asarray(w)` dequantizes all of it (the few analyses that read a whole matrix);
- the products themselves go through the executor (engine/executor.py): the textbook one
  dequantizes a tile of rows and multiplies (`tiles`), the fast one runs a compiled kernel on the
  blocks (engine/fast/run/kernel_products.py).

A matrix may be stacked from parts of different block types (Llama's fused Q, K and V projections
of a Q4_K_M file are Q4_K, Q4_K and Q6_K), each part with an optional order of its rows (llama.cpp
stores Llama's Q and K rows permuted for its RoPE layout: the product is computed in the stored
order and its columns taken in the model's order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .formats import BLOCK_TYPES, GGMLType

TILE_BYTES = 1 << 21  # float32 bytes of one dequantized tile: small enough to stay in cache for the product


@dataclass(frozen=True)
class Part:
    """Rows of one block type: `data` [n, row_bytes] uint8 (F32: float32 [n, K]), a view of the file.
    `order` [n]: the stored row of each of the model's rows, or None when they are the same."""

    type_id: int
    data: np.ndarray
    order: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return self.data.shape[0]

    @property
    def format(self) -> str:
        return BLOCK_TYPES[self.type_id].name

    def dequantize(self, stored: np.ndarray | slice, cols: int) -> np.ndarray:
        """The stored rows `stored` as float32 [n, K] (formats.dequantize of their blocks)."""
        data = self.data[stored]  # [n, row_bytes]
        if self.type_id == GGMLType.F32:
            return np.array(data, dtype=np.float32)
        bt = BLOCK_TYPES[self.type_id]
        return bt.dequantize(data.reshape(-1, bt.nbytes)).reshape(len(data), cols)  # [n, K]


class Quantized:
    """The matrix [N, K] whose rows are `parts` stacked (as stored), or its transpose [K, N]."""

    ndim = 2
    dtype = np.dtype(np.float32)  # what it stands for; its bytes are the blocks'

    def __init__(self, parts: tuple[Part, ...], cols: int, transposed: bool = False):
        self.parts, self.cols, self.transposed = parts, cols, transposed
        self.n_rows = sum(p.rows for p in parts)
        self.types = frozenset(p.type_id for p in parts)  # the block types of its parts

    @property
    def shape(self) -> tuple[int, int]:
        return (self.cols, self.n_rows) if self.transposed else (self.n_rows, self.cols)

    @property
    def T(self) -> Quantized:
        return Quantized(self.parts, self.cols, not self.transposed)

    @property
    def nbytes(self) -> int:
        """Bytes held: the blocks, not the float32 matrix they stand for."""
        return sum(p.data.nbytes for p in self.parts)

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.format for p in self.parts))

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Quantized({'/'.join(self.formats)}, shape={list(self.shape)})"

    def rows(self, key) -> np.ndarray:
        """Stored rows selected by `key` (an int, a slice or an array of ints) as float32: [K] for
        an int, else [n, K]. Only the blocks of those rows are dequantized."""
        if isinstance(key, (int, np.integer)):
            return self.rows(np.array([key]))[0]  # [K]
        index = np.arange(self.n_rows)[key]  # [n], checked against the size as NumPy checks it
        out = np.empty((len(index), self.cols), dtype=np.float32)  # [n, K]
        first = 0
        for p in self.parts:
            mine = (index >= first) & (index < first + p.rows)  # [n]
            if mine.any():
                stored = index[mine] - first
                out[mine] = p.dequantize(stored if p.order is None else p.order[stored], self.cols)
            first += p.rows
        return out

    def __getitem__(self, key) -> np.ndarray:
        """What indexing the float32 matrix would give, dequantizing only the stored rows needed."""
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > 2 or any(k is Ellipsis or k is None for k in key):
            return np.asarray(self)[key]
        if not self.transposed:
            first = self.rows(key[0])  # [n, K] or [K]
            return (
                first[(slice(None), key[1])]
                if len(key) == 2 and first.ndim == 2
                else first[key[1]]
                if len(key) == 2
                else first
            )
        stored = self.rows(key[1] if len(key) == 2 else slice(None))  # [n, K] or [K]: the columns asked for
        return stored.T[key[0]]  # [K, n] (or [K]) indexed by the rows asked for

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self.rows(slice(None))  # [N, K]
        whole = whole.T if self.transposed else whole
        return whole if dtype is None else whole.astype(dtype)

    def tiles(self):
        """(first, rows): the matrix's stored rows in order, dequantized a tile at a time
        ([n, K] float32 each, n about TILE_BYTES / 4K): what the textbook product multiplies by."""
        step = max(1, TILE_BYTES // (4 * self.cols))
        first = 0
        for p in self.parts:
            for a in range(0, p.rows, step):
                b = min(a + step, p.rows)
                yield first + a, p.dequantize(slice(a, b) if p.order is None else p.order[a:b], self.cols)  # [b-a, K]
            first += p.rows


def stack(parts: list[Quantized]) -> Quantized:
    """Matrices of the same row length, their rows one after another: [sum N_i, K]."""
    cols = {q.cols for q in parts}
    assert len(cols) == 1 and not any(q.transposed for q in parts), "stacked matrices share their row length"
    return Quantized(tuple(p for q in parts for p in q.parts), cols.pop())


def textbook_product(x: np.ndarray, w: Quantized) -> np.ndarray:
    """x [T, K] @ w [K, N] for a transposed Quantized w (a family's [in, out] weight): each tile of
    stored rows dequantized (formats.py), then NumPy's product. -> [T, N]"""
    assert w.transposed and x.shape[-1] == w.cols, (x.shape, w.shape)
    y = np.empty((x.shape[0], w.n_rows), dtype=np.float32)  # [T, N]
    for first, tile in w.tiles():
        y[:, first : first + len(tile)] = x @ tile.T  # [T, K] @ [K, n] -> [T, n]
    return y


QUANTIZE_ROWS = 4096  # rows quantized at a time: the float32 temporaries stay small


def quantized_rows(w: np.ndarray, kind: str) -> Quantized | np.ndarray:
    """Float32 rows [N, K] as a Quantized of blocks `kind` (formats.quantize: q8_0, q4_0); rows whose
    length is not a multiple of 32 stay as they are."""
    from .formats import BLOCK_TYPES, QUANTIZERS, quantize

    n, k = w.shape
    if k % 32:
        return w
    type_id = QUANTIZERS[kind][0]
    data = np.empty((n, k // 32 * BLOCK_TYPES[type_id].nbytes), dtype=np.uint8)  # [N, row bytes]
    for a in range(0, n, QUANTIZE_ROWS):
        data[a : a + QUANTIZE_ROWS] = quantize(w[a : a + QUANTIZE_ROWS], kind)[1]
    return Quantized((Part(type_id, data),), k)


def quantize_weights(model, kind: str) -> None:
    """Replace every matrix of a loaded model by blocks of `kind`, along each matrix's input axis
    (as a GGUF stores them: the rows of [out, in]); norms, biases and position tables stay float32.
    A tied unembedding stays the embedding's transpose. What `--quantize` does to a float32 folder."""
    import dataclasses

    def matrix(w):  # a family's [in, out] weight -> the same, quantized along `in`
        if isinstance(w, np.ndarray) and w.ndim == 2 and w.dtype == np.float32:
            q = quantized_rows(np.ascontiguousarray(w.T), kind)
            return q.T if isinstance(q, Quantized) else w
        if dataclasses.is_dataclass(w) and not isinstance(w, type):
            return dataclasses.replace(
                w, **{f.name: matrix(getattr(w, f.name)) for f in dataclasses.fields(w) if f.init}
            )
        return w

    tied = isinstance(model.unembedding, np.ndarray) and np.shares_memory(model.unembedding, model.token_embedding)
    model.layers = [matrix(layer) for layer in model.layers]
    embedding = quantized_rows(np.ascontiguousarray(model.token_embedding), kind)
    model.unembedding = embedding.T if tied and isinstance(embedding, Quantized) else matrix(model.unembedding)
    model.token_embedding = embedding
