"""The tape: a forward pass that keeps what its backward needs.

The pass is the model's own (Transformer.forward), run on the textbook executor and watched by a
few hooks: no second copy of any block. The executor's door sees every matrix product and every
attention, so the tape (a `Plain` executor) keeps, per block, each product's input and output by
its weight, and the attention's queries, keys, values and weights; hooks at the residual sites
say which block runs and keep the stream entering each norm. What the families compute between
two products (norms, RoPE, reshapes) is cheap: their backward computes it again from these.

Two of training's options are the tape's, not the blocks': `--no-mask` (causal=False: the attention
lets each position read its whole sequence) and `--dropout p` (hooks at the sites embed, attn_out
and mlp_out multiply each value by 0 or 1/(1-p); the tape keeps the multipliers, and the backward
multiplies those sites' gradients by them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import ops
from ..executor import Plain
from ..kvcache import Sequences
from ..quantized import Quantized
from ..sites import Hooks, Site


@dataclass(eq=False)
class Attention:
    """One attention call as the executor saw it (executor.Plain.attention): queries q [N, G, T, Dh]
    (N = B·Hkv key/value heads, G query heads each), keys k [N, Dh, S], values v [N, S, Dh], the
    weights [N, G, T, S] and the soft cap of the scores, if any."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    weights: np.ndarray
    softcap: float | None


@dataclass(eq=False)
class Step:
    """What the tape holds of one block (or, as block L, of the final norm and unembedding)."""

    resid_pre: np.ndarray | None = None  # [B*T, D] the stream entering the block
    resid_mid: np.ndarray | None = None  # [B*T, D] between attention and MLP
    products: dict[int, tuple] = field(default_factory=dict)  # id(weight) -> (weight, x [rows, in], y [rows, out])
    attention: Attention | None = None

    def product(self, w) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the product y = x @ w (+ b) this block made with weight `w`."""
        _, x, y = self.products[id(w)]
        return x, y


class Tape(Plain):
    """The textbook executor, keeping what each step of one pass computed (its `steps`)."""

    def __init__(self, n_layer: int, causal: bool = True, dropout: float = 0.0, rng: np.random.Generator | None = None):
        self.steps = [Step() for _ in range(n_layer + 1)]  # the blocks, then the final norm and unembedding
        self.block = 0
        self.hooks = Hooks()
        self.hooks.add("resid_pre", self._enter)
        self.hooks.add("resid_mid", self._mid)
        self.hooks.add("resid_post", self._leave)
        self.resid_final: np.ndarray | None = None  # [B*T, D] the stream leaving the last block
        self.causal = causal  # False: each position reads its whole sequence (tfcli train --no-mask)
        self.kept: dict[tuple[str, int], np.ndarray] = {}  # (site, block) -> dropout's multiplier [B*T, D]
        self.dropout, self.rng = dropout, rng
        if dropout > 0:
            for name in DROPPED:
                self.hooks.add(name, self._drop)

    def _drop(self, x: np.ndarray, site: Site) -> np.ndarray:
        """Dropout: zero a share p of the values, scale the rest by 1/(1-p) (so the mean is kept)."""
        p = self.dropout
        keep = (self.rng.random(x.shape, dtype=np.float32) >= p).astype(np.float32) / np.float32(1.0 - p)  # [B*T, D]
        self.kept[(site.name, site.block)] = keep
        return x * keep

    def _enter(self, x: np.ndarray, site: Site) -> None:
        self.block = site.block
        self.steps[site.block].resid_pre = x

    def _mid(self, x: np.ndarray, site: Site) -> None:
        self.steps[site.block].resid_mid = x

    def _leave(self, x: np.ndarray, site: Site) -> None:
        self.block = site.block + 1  # after the last block: the final norm and unembedding's step
        self.resid_final = x

    def linear(self, x: np.ndarray, w: np.ndarray | Quantized, b: np.ndarray | None = None) -> np.ndarray:
        y = super().linear(x, w, b)  # [T, in] @ [in, out] -> [T, out]
        self.steps[self.block].products[id(w)] = (w, x, y)  # w kept too: its id stays its own
        return y

    def attention(self, q, k, v, start, weights, window=None, softcap=None):
        out, w = grouped_attention(q, k, v, self.causal, window, softcap)  # [N, G, T, Dh], [N, G, T, S]
        # k: a view of the cache's keys, copied
        self.steps[self.block].attention = Attention(q, np.array(k), v, w, softcap)
        return out, (w if weights else None)


DROPPED = ("embed", "attn_out", "mlp_out")  # where --dropout acts: the embeddings and each branch's output


def grouped_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True, window: int | None = None,
                      softcap: float | None = None):  # fmt: skip
    """executor.Plain.attention (ops.reference_attention), the key/value heads broadcast over their G
    query heads instead of repeated, the mask written into the scores in place: q [N, G, T, Dh], k
    [N, Dh, S], v [N, S, Dh] -> (out [N, G, T, Dh], weights [N, G, T, S]); a training step's
    attention at about half the textbook's cost (tests/test_train_grads.py holds the two equal).
    causal False (--no-mask): no mask and no window, each position reads its whole sequence. The
    backward is the same either way: it reads the weights, and a masked weight is 0."""
    t_len, s_len = q.shape[2], k.shape[2]
    scores = q @ k[:, None]  # [N, G, T, Dh] @ [N, 1, Dh, S] -> [N, G, T, S]
    scores /= np.float32(np.sqrt(q.shape[-1]))
    if softcap:
        scores = softcap * np.tanh(scores / softcap)  # [N, G, T, S]
    if causal:
        query_pos, key_pos = np.arange(s_len - t_len, s_len)[:, None], np.arange(s_len)[None, :]
        hidden = key_pos > query_pos  # [T, S]
        if window:
            hidden |= key_pos <= query_pos - window
        scores[..., hidden] = -np.inf  # [N, G, T, S]: 0 after softmax
    w = ops.softmax(scores.astype(np.float32, copy=False))  # [N, G, T, S]
    return w @ v[:, None], w  # [N, G, T, S] @ [N, 1, S, Dh] -> [N, G, T, Dh]


def unmasked_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, softcap: float | None):
    """grouped_attention without the causal mask (tfcli train --no-mask)."""
    return grouped_attention(q, k, v, False, None, softcap)


def record(model, tokens: np.ndarray, hooks: Hooks | None = None, causal: bool = True, dropout: float = 0.0,
           rng: np.random.Generator | None = None) -> tuple[np.ndarray, Tape]:  # fmt: skip
    """Run B sequences of T tokens [B, T] (or one, [T]) through `model` from position 0, keeping the
    tape -> (logits [B*T, V], the tape). The rows are sequence 0's T positions, then sequence 1's.
    `hooks`: recorders (engine/inspect.py) to read sites on the way; one that changed a value would
    not be differentiated through. `causal`, `dropout` and `rng`: training's --no-mask and --dropout."""
    ids = np.asarray(tokens)
    n_seq, t_len = (1, ids.shape[0]) if ids.ndim == 1 else ids.shape
    tape = Tape(model.config.n_layer, causal, dropout, rng)
    tape.hooks.merge(hooks)
    tape.positions = np.tile(np.arange(t_len), n_seq)  # [B*T]
    tape.shape = (n_seq, t_len)
    tape.tokens = ids.reshape(-1)  # [B*T]
    cache = Sequences(n_seq, t_len)
    logits = model.forward(tape.tokens, cache, all_logits=True, hooks=tape.hooks, run=tape)  # [B*T, V]
    tape.logits = logits
    tape.hooks = None  # its hooks are the tape's own methods: a cycle that would keep every step's values until gc
    return logits, tape
