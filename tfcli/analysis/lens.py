"""The logit lens and a token's hidden state followed through the layers, on arrays.

No I/O, no printing. The residual stream comes from ONE forward pass that records it
(engine/inspect.py); the lens then reads every layer's stream as if the model stopped there:
`unembed(final_norm(h))` (nostalgebraist 2020, "interpreting GPT: the logit lens"). Layer 0 is
the embeddings (plus positions for GPT-2), layer L the model's real output.

Axes (STYLE.md): T tokens, D model width, V vocabulary, L layers; a lens stack is [L+1, T, k].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.inspect import Recorder
from tfcli.engine.sites import Hooks


def residual_stream(model, ids, hooks: Hooks | None = None, run: Plain = PLAIN) -> list[np.ndarray]:
    """ids [T] through the model once, from an empty cache -> [L+1] x [T, D]: the embeddings, then
    the stream after each layer (before the final norm). `hooks`: an intervention in that pass
    (an ablation), applied before the stream is recorded; `run`: its executor."""
    rec = Recorder(residual=True)
    ids = np.asarray(ids)
    model.forward(ids, model.new_cache(len(ids)), hooks=Hooks().merge(hooks).merge(rec), run=run)
    return rec.hidden_states()


@dataclass(frozen=True)
class Lens:
    """The lens's top-k at every layer and position."""

    ids: np.ndarray  # [L+1, T, k] token ids, most likely first
    probs: np.ndarray  # [L+1, T, k] their probabilities after softmax over the whole vocabulary
    entropy: np.ndarray  # [L+1, T] bits of each distribution (0 = certain)


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """[R, N] -> ids [R, k] and values [R, k], largest first (ties: the smaller id first)."""
    k = min(k, x.shape[-1])
    if k == 1:
        ids = x.argmax(axis=-1)[:, None]  # argmax takes the first of equal values, as lexsort below does
        return ids, np.take_along_axis(x, ids, axis=-1)
    part = np.argpartition(-x, k - 1, axis=-1)[:, :k]  # [R, k], unordered
    vals = np.take_along_axis(x, part, axis=-1)
    order = np.lexsort((part, -vals), axis=-1)  # by value, then id
    ids = np.take_along_axis(part, order, axis=-1)
    return ids, np.take_along_axis(vals, order, axis=-1)


# rows of (layer, position) per product: [256, V] floats, 50 MB for V = 49,152
# (larger: page faults cost more than BLAS gains)
CHUNK_ROWS = 256


def lens_cost(model, n_rows: int, k: int) -> tuple[int, float]:
    """What the lens of n_rows (layer, position) rows costs: (bytes it holds at its peak, floating-point
    operations). Each row is a [D] @ [D, V] product; the rows, their top k and a chunk's [R, V]
    logits, exponentials and top-k temporaries are held."""
    d, v = model.unembedding.shape
    nbytes = n_rows * (4 * d + 16 * k + 8) + CHUNK_ROWS * v * 4 * 4
    return nbytes, 2.0 * n_rows * d * v


def logit_lens(model, hidden: list[np.ndarray], k: int = 5, progress=None, run: Plain = PLAIN) -> Lens:
    """The lens of a recorded residual stream [L+1] x [T, D]: softmax(unembed(final_norm(h))) at
    every layer and position, keeping the top k and the entropy.

    The rows of several layers go through the unembedding together (one larger product runs
    BLAS at a few times the speed of one per layer); all of them at once would be (L+1) x T x V
    floats. The softmax is never stored: p = e^(z - max) / s, so the top tokens are those of the
    logits, and the entropy is log s - sum(e (z - max)) / s, in nats. `progress(done, total)`, if
    given, is called after each chunk of rows; `run`: the executor of the unembedding's products."""
    n_layers, t_len = len(hidden), hidden[0].shape[0]
    rows = np.concatenate(hidden)  # [(L+1) * T, D]
    # rows are independent: a long text is not one [T, V] block (4,001 x 49,152 floats, and as many int64 in top_k)
    step = CHUNK_ROWS
    ids = np.empty((len(rows), min(k, model.unembedding.shape[1])), dtype=np.int64)
    probs = np.empty(ids.shape, dtype=np.float64)
    ent = np.empty(len(rows), dtype=np.float64)
    for a in range(0, len(rows), step):
        z = model.unembed(model.final_norm(rows[a : a + step]), run)  # [R, D] @ [D, V] -> [R, V]
        z -= z.max(axis=-1, keepdims=True)  # z - max: every logit <= 0, the top one 0
        top, zt = top_k(z, k)  # [R, k]
        e = np.exp(z)  # [R, V]
        s = e.sum(axis=-1, dtype=np.float64)  # [R]
        ids[a : a + step] = top
        probs[a : a + step] = np.exp(zt.astype(np.float64)) / s[:, None]
        ent[a : a + step] = np.log(s) - np.einsum("rv,rv->r", e, z, dtype=np.float64) / s
        if progress is not None:
            progress(min(a + step, len(rows)), len(rows))
    shape = (n_layers, t_len)
    return Lens(ids.reshape(*shape, -1), probs.reshape(*shape, -1), (ent / np.log(2)).reshape(shape))


# --- one token in several contexts ------------------------------------------------------------


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity along the last axis: [..., D], [..., D] -> [...]."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    den = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return np.divide((a * b).sum(axis=-1), den,
                     out=np.zeros(np.broadcast_shapes(a.shape[:-1], b.shape[:-1])), where=den > 0)


@dataclass(frozen=True)
class Trajectory:
    """The last token of each of C texts, followed through the layers."""

    states: np.ndarray  # [C, L+1, D] its residual stream after each layer (0 = the embedding)
    token_embedding: np.ndarray  # [C, D] the bare token's row of the embedding matrix

    @property
    def pairwise(self) -> np.ndarray:
        """[L+1, C, C] the cosine between contexts at each layer."""
        s = self.states.transpose(1, 0, 2).astype(np.float64)  # [L+1, C, D]
        n = np.linalg.norm(s, axis=-1, keepdims=True)  # [L+1, C, 1]
        u = np.divide(s, n, out=np.zeros_like(s), where=n > 0)
        return u @ u.transpose(0, 2, 1)  # [L+1, C, C], without a [L+1, C, C, D] product in between

    @property
    def from_embedding(self) -> np.ndarray:
        """[C, L+1] the cosine between each layer's state and the bare token's embedding."""
        return cosine(self.states, self.token_embedding[:, None, :])

    @property
    def moved(self) -> np.ndarray:
        """[C, L+1] how far the state is from the bare embedding, relative to the state's own length:
        |h - e| / |h| (0 = still the embedding, about 1 = the embedding is a small part of it)."""
        d = np.linalg.norm(self.states - self.token_embedding[:, None, :], axis=-1)
        n = np.linalg.norm(self.states, axis=-1)
        return np.divide(d, n, out=np.zeros_like(d), where=n > 0)

    @property
    def norms(self) -> np.ndarray:
        """[C, L+1] the length of the state."""
        return np.linalg.norm(self.states, axis=-1)


def trajectory(streams: list[list[np.ndarray]], last_ids: list[int], embedding: np.ndarray) -> Trajectory:
    """streams: per text its [L+1] x [T, D] residual stream; last_ids its last token -> Trajectory."""
    states = np.stack([np.stack([h[-1] for h in s]) for s in streams])  # [C, L+1, D]
    return Trajectory(states, embedding[np.asarray(last_ids)])  # [C, D]


def baseline_cosine(streams: list[list[np.ndarray]], skip_first: bool = True) -> np.ndarray:
    """[L+1]: the mean cosine between the states of DIFFERENT positions at each layer, over all the
    texts: how alike any two hidden states are there (hidden states share a common direction, so
    a cosine between contexts means something only above this). The first position of each text is
    left out when skip_first: it often carries an outsized state of its own (an "attention sink")."""
    out = []
    for layer in range(len(streams[0])):
        rows = np.concatenate([s[layer][1:] if skip_first and len(s[layer]) > 1 else s[layer]
                               for s in streams])  # [N, D]
        if len(rows) < 2:
            out.append(float("nan"))
            continue
        u = rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-30)
        c = u @ u.T  # [N, N]
        n = len(rows)
        out.append(float((c.sum() - np.trace(c)) / (n * (n - 1))))
    return np.array(out)
