"""The fast products and attention behind the executor door: the same numbers as the textbook
(ops.py: `x @ w`, `reference_attention`), computed as measurement justified (benchmarks/README.md);
tests/test_ops.py holds each to its twin."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor

import numpy as np

from ...ops import softmax  # noqa: F401  (the textbook's, for readers comparing the two attentions)
from ...threads import ON_THIS_THREAD


FEW_ROWS = 16  # passes of up to this many rows: the MLP split between two threads, the compiled attention


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x [T, in] @ w [in, out] -> [T, out].

    Llama's weights are [in, out] views of [out, in] rows (engine/families/llama.py). Up to 256 rows,
    OpenBLAS is faster computing the product the other way round, (w^T x^T)^T, which reads the stored
    rows directly instead of repacking the whole matrix for each small product.
    """
    t_len = x.shape[0]
    rows = stored_rows(w)
    if 1 < t_len <= 256 and rows:
        return (w.T @ x.T).T  # [out, in] @ [in, T] -> [out, T] -> [T, out] view
    return x @ w


def stored_rows(w: np.ndarray) -> bool:
    """Whether w [in, out] is a view of stored rows [out, in] (w.T has contiguous rows)."""
    return w.strides[0] == w.itemsize


def in_halves(
    run: Callable[[int, int], None], n: int, pool: Executor | None, rest: Callable[[], None] | None = None
) -> None:
    """run(0, m) on this thread and run(m, n) on `pool` at the same time (m: the larger half),
    then `rest` here; returns when both halves are done, raising the pool's error if any."""
    mine = n if pool is None or pool is ON_THIS_THREAD else n - n // 2  # this thread's blocks
    later = pool.submit(run, mine, n) if mine < n else None
    try:
        run(0, mine)
        if rest is not None:
            rest()
    finally:
        if later is not None:
            later.result()  # its error, if any, is raised here


ROW_BLOCK = 32  # weight rows per block of each_row(): 32 x in floats stay in cache while every row of x reads them


def each_row(x: np.ndarray, rows: np.ndarray, pool: Executor | None = None) -> np.ndarray:
    """x [T, in] times the weight rows [out, in], one vector-matrix product per row of x: -> [T, out].

    Each row of the result is, bit for bit, what the row alone computes (x[t] @ rows.T, OpenBLAS's
    gemv, whose dot products do not depend on how many weight rows one call covers), so a
    sequence's numbers do not depend on its company in a batch step. The weights are still read
    from memory about once for all T rows: they go block by block (ROW_BLOCK rows), and the T
    products of a block run one after another while it is in cache; NumPy loops over the blocks
    and rows in one stacked matmul call. `pool` takes the second half of the blocks.
    """
    t_len, n_in = x.shape
    n_out = rows.shape[0]
    n = n_out // ROW_BLOCK
    blocks = rows[: n * ROW_BLOCK].reshape(n, 1, ROW_BLOCK, n_in)  # [n, 1, 32, in], a view
    columns = x[None, :, :, None]  # [1, T, in, 1]
    parts = np.empty((n, t_len, ROW_BLOCK, 1), dtype=np.float32)  # [n, T, 32, 1]: block b's products for each row

    def run(a: int, b: int) -> None:
        if b > a:
            np.matmul(blocks[a:b], columns, out=parts[a:b])  # [b-a, 1, 32, in] @ [1, T, in, 1] -> [b-a, T, 32, 1]

    y = np.empty((t_len, n_out), dtype=np.float32)  # [T, out]

    def rest() -> None:  # the rows after the last whole block
        # [1, rest, in] @ [T, in, 1] -> [T, rest]
        y[:, n * ROW_BLOCK :] = np.matmul(rows[n * ROW_BLOCK :][None], x[:, :, None])[..., 0]

    in_halves(run, n, pool, rest if n * ROW_BLOCK < n_out else None)
    y[:, : n * ROW_BLOCK] = parts[..., 0].transpose(1, 0, 2).reshape(t_len, n * ROW_BLOCK)  # [T, n*32]
    return y


ATTN_BLOCK = 128  # queries per block in a long prompt pass


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int, return_weights: bool = False, window: int | None = None,
    softcap: float | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Causal scaled dot-product attention with grouped heads: `reference_attention`, made fast.

    What it changes, and why: the query heads that share a key/value head are batched into one
    product (no copy of the shared keys); keys arrive as [Hkv, Dh, S] (a view of the cache's
    [Hkv, S, Dh]); q is scaled instead of the [T, S] scores (fewer multiplications); the mask
    is added only to the last [T, T] square (earlier positions are never in any query's future);
    the exponentials are multiplied by v before being normalised (dividing the [T, Dh] result
    costs less than dividing the [T, S] weights); and a long prompt goes in blocks of queries that
    score only the keys up to their own position. With a sliding `window`, a block scores only the
    keys from its first query's window on (decoding: the last `window` keys); `softcap` as in
    reference_attention.

    q: [Hkv, G, T, Dh] queries for positions start..start+T-1, G = H / Hkv query heads per kv head
    k: [Hkv, Dh, S] keys for positions 0..S-1 (S = start + T), the transposed view the KV cache gives
    v: [Hkv, S, Dh] values
    returns (out [Hkv, G, T, Dh], weights [Hkv, G, T, S] if return_weights else None)

    A long prompt goes through in blocks of queries: block b only scores the keys up to its own
    last position, so the upper-right triangle that the mask would zero is never computed (about
    40% of the scores of a 512-token prompt) and the scores stay [Hkv, G*128, S] at most.
    """
    n_kv, group, t_len, head_dim = q.shape
    if t_len <= ATTN_BLOCK and not (window and start + t_len > window):
        return _attention_block(q, k, v, return_weights, None, softcap)
    s_len = k.shape[2]
    out = np.empty(q.shape, dtype=np.float32)  # [Hkv, G, T, Dh]
    weights = np.zeros((n_kv, group, t_len, s_len), dtype=np.float32) if return_weights else None
    for b in range(0, t_len, ATTN_BLOCK):
        e = min(b + ATTN_BLOCK, t_len)
        seen = start + e  # keys this block may look at
        first = max(0, start + b - window + 1) if window else 0  # the oldest key its first query sees
        out[:, :, b:e], w = _attention_block(
            q[:, :, b:e], k[:, :, first:seen], v[:, first:seen], return_weights, window, softcap
        )
        if weights is not None:
            weights[:, :, b:e, first:seen] = w
    return out, weights


def _attention_block(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, return_weights: bool, window: int | None = None,
    softcap: float | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """softmax(q k^T / sqrt(Dh) + mask) v for the queries of the last T positions over keys 0..S-1
    (k given transposed, [Hkv, Dh, S]).

    The mask sets the future to -inf *before* softmax, so each row still sums to 1 and the future
    gets exactly 0. Only the last T keys can be in some query's future: the mask is a [T, T] triangle
    added to that last square of the scores (with one query, decoding, there is no future at all).
    With a `window`, keys more than window - 1 positions before a query are masked too.
    The exponentials are multiplied by v before they are normalized: dividing the [T, Dh] result
    by the row sums is the same sum of products as dividing the [T, S] weights, and S is the larger.
    """
    n_kv, group, t_len, head_dim = q.shape
    s_len = k.shape[2]
    qf = q.reshape(n_kv, group * t_len, head_dim) * np.float32(1.0 / np.sqrt(head_dim))  # [Hkv, G*T, Dh], scaled
    # a decode step on keys kept [Hkv, S, Dh]: OpenBLAS's q k^T for a few rows is 2x slower
    if group * t_len <= 16 and k.strides[1] == k.itemsize:
        # ([Hkv, S, Dh] @ [Hkv, Dh, G*T])^T, a view
        scores = (k.transpose(0, 2, 1) @ qf.transpose(0, 2, 1)).transpose(0, 2, 1)
    else:
        scores = qf @ k  # [Hkv, G*T, Dh] @ [Hkv, Dh, S] -> [Hkv, G*T, S]
    scores = scores.reshape(n_kv, group, t_len, s_len)  # [Hkv, G, T, S]
    if softcap:
        scores /= np.float32(softcap)
        np.tanh(scores, out=scores)
        scores *= np.float32(softcap)  # softcap·tanh(scores / softcap)
    if t_len > 1:
        # Query t sits at position S-T+t and may look at keys up to it: -inf above the diagonal of the last square.
        scores[..., s_len - t_len :] += np.triu(np.full((t_len, t_len), -np.inf, dtype=np.float32), k=1)  # [T, T]
    if window and s_len > window:
        too_old = np.arange(s_len)[None, :] <= np.arange(s_len - t_len, s_len)[:, None] - window  # [T, S]
        scores[..., too_old] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)  # exp() of at most 0: no overflow
    e = np.exp(scores, out=scores)  # [Hkv, G, T, S], the softmax numerators
    total = e.sum(axis=-1, keepdims=True)  # [Hkv, G, T, 1]
    out = (e.reshape(n_kv, group * t_len, s_len) @ v).reshape(n_kv, group, t_len, head_dim)  # [Hkv, G, T, Dh]
    out /= total
    return out, (np.divide(e, total, out=e) if return_weights else None)
