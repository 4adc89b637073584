"""A model that learns: the forward pass keeps what the backward pass needs, and the backward
pass walks the same steps in reverse, from the loss to every parameter.

    x = embed(tokens)                         # [B, T, D]
    for each block: x = block(x)              # [B, T, D]   (family: gpt2.py, llama.py)
    logits = final_norm(x) @ unembedding      # [N, V]
    loss = cross_entropy(logits, targets)     # one number

Parameters are one dict, keyed by the Hugging Face names and stored in the Hugging Face layout
(GPT-2's Conv1D [in, out], Llama's Linear [out, in]), so that a checkpoint is the dict written
out, and a gradient has the name and shape of its parameter, as torch's `named_parameters` do.
"""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig
from . import layers

Params = dict[str, np.ndarray]


class Trainable:
    """The shared half of a trainable model; a family supplies embed, block and final_norm
    (and their backwards) and the names of its tensors."""

    prefix: str  # "transformer." (GPT-2) or "model." (Llama, Qwen2)
    embed_name: str  # the token embedding [V, D]

    def __init__(self, config: ModelConfig, params: Params, causal: bool = True, dropout: float = 0.0):
        self.config = config
        self.params = params
        self.causal = causal  # False: `--no-mask`, every position may read the whole sequence
        self.dropout = dropout

    @property
    def unembed_name(self) -> str:
        return self.embed_name if self.config.tie_embeddings else "lm_head.weight"

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        """Mean cross-entropy of next-token targets y [B, T] given inputs x [B, T]; no gradients."""
        logits, _ = self.forward(x)  # [N, V]
        return layers.cross_entropy(logits, y.reshape(-1))[0]

    def loss_and_grads(self, x: np.ndarray, y: np.ndarray, rng: np.random.Generator | None = None
                       ) -> tuple[float, Params]:  # fmt: skip
        """The loss on inputs x [B, T] and targets y [B, T], and its gradient for every parameter."""
        logits, saved = self.forward(x, rng)  # [N, V]
        loss, ce = layers.cross_entropy(logits, y.reshape(-1))
        grads: Params = {}
        self.backward(layers.cross_entropy_backward(ce), saved, grads)
        return loss, grads

    def forward(self, ids: np.ndarray, rng: np.random.Generator | None = None):
        """ids [B, T] -> logits [N, V] (N = B*T), and what backward() needs."""
        b_len, t_len = ids.shape
        rng = rng if self.dropout > 0 else None
        x, s_embed = self.embed(ids, rng)  # [N, D]
        blocks = []
        for i in range(self.config.n_layer):
            x, s = self.block(x, i, (b_len, t_len), rng)  # [N, D]
            blocks.append(s)
        h, s_norm = self.final_norm(x)  # [N, D]
        w_out = self.params[self.unembed_name]  # [V, D]: tied, it is the embedding itself
        logits = h @ w_out.T  # [N, D] @ [D, V] -> [N, V]
        return logits, (s_embed, blocks, s_norm, h)

    def backward(self, d_logits: np.ndarray, saved, grads: Params) -> None:
        """d loss / d logits [N, V] -> grads of every parameter, added into `grads`."""
        s_embed, blocks, s_norm, h = saved
        w_out = self.params[self.unembed_name]  # [V, D]
        add(grads, self.unembed_name, d_logits.T @ h)  # [V, N] @ [N, D] -> [V, D]
        dx = d_logits @ w_out  # [N, V] @ [V, D] -> [N, D]
        dx = self.final_norm_backward(dx, s_norm, grads)  # [N, D]
        for i in reversed(range(self.config.n_layer)):
            dx = self.block_backward(dx, i, blocks[i], grads)  # [N, D]
        self.embed_backward(dx, s_embed, grads)  # the embedding of a tied model adds to its unembedding's

    def logits_last(self, ids: np.ndarray) -> np.ndarray:
        """ids [T] -> the next-token logits of the last position [V], for samples during training.
        With --no-mask the model runs as it was trained: each position reads the whole prefix."""
        logits, _ = self.forward(ids[None, -self.config.n_ctx :])  # [T, V]
        return logits[-1]

    # supplied by each family
    def embed(self, ids, rng):  # [B, T] -> [N, D], saved
        raise NotImplementedError

    def embed_backward(self, dx, saved, grads) -> None:
        raise NotImplementedError

    def block(self, x, i, shape, rng):  # [N, D] -> [N, D], saved
        raise NotImplementedError

    def block_backward(self, dx, i, saved, grads):  # [N, D] -> [N, D]
        raise NotImplementedError

    def final_norm(self, x):  # [N, D] -> [N, D], saved
        raise NotImplementedError

    def final_norm_backward(self, dx, saved, grads):  # [N, D] -> [N, D]
        raise NotImplementedError


def add(grads: Params, name: str, g: np.ndarray) -> None:
    """Accumulate a gradient: a tied matrix gets one from the embedding and one from the unembedding."""
    if name in grads:
        grads[name] = grads[name] + g
    else:
        grads[name] = g.astype(np.float32, copy=False)


def split_heads(x: np.ndarray, shape: tuple[int, int], n_head: int) -> np.ndarray:
    """[N, n*Dh] -> [B, n, T, Dh]: the batch layout of attention, as a contiguous copy (NumPy's
    stacked matmul runs a slow loop instead of BLAS on strided views: 30x in layers.attention)."""
    b_len, t_len = shape
    return np.ascontiguousarray(x.reshape(b_len, t_len, n_head, -1).transpose(0, 2, 1, 3))


def merge_heads(x: np.ndarray) -> np.ndarray:
    """[B, n, T, Dh] -> [N, n*Dh]: the heads side by side again, one row per position."""
    b_len, n, t_len, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b_len * t_len, n * dh)
