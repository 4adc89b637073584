"""The backward pass every family shares: engine/model.py's forward read from the bottom up.

    d logits                                        # [T, V]   from a loss or a metric
    dx = final_norm⁻ᵀ(unembed⁻ᵀ(d logits))          # [T, D]   site resid_post L-1
    for each block b, last first:
        d mlp_out = dx;   dx += mlp_norm_backward(mlp_backward(dx))        # site resid_mid b
        d attn_out = dx;  dx += attn_norm_backward(attention_backward(dx)) # site resid_pre b
    d embeddings = dx                               # [T, D]   site embed

A residual connection copies its gradient to both branches: that is all `x = x + f(x)` asks.
A family's file in this folder supplies the backward of what it supplies to the forward (its
attention, norms, embedding, and anything around the MLP), each beside the other in the same order;
the tape (grad/tape.py) holds what the forward computed.

Gradients are kept by the model's own attribute paths and shapes (`layers.3.w_qkv` [D, (H+2Hkv)*Dh],
`layers.3.mlp.w_in`, `token_embedding`), in tfcli's [in, out] orientation; the family's `named`
turns them into the checkpoint's names and layout (torch's `named_parameters`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import ops as G
from .tape import Step, Tape


@dataclass
class Grads:
    """The gradients of one scalar: by weight (the model's attribute path -> an array of the
    weight's shape, float32), and by site ((site name, block) -> an array of the site's shape; the
    embeddings' block is -1). `sites` holds every site of engine/sites.py the pass went through."""

    weights: dict[str, np.ndarray] = field(default_factory=dict)
    sites: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)

    def add(self, path: str, g: np.ndarray) -> None:
        """Accumulate: a tied matrix gets one gradient from the embedding and one from the unembedding."""
        g = g.astype(np.float32, copy=False)
        self.weights[path] = self.weights[path] + g if path in self.weights else g

    def wants(self, path: str) -> bool:
        """Whether the weight at `path` needs its gradient (a subclass may freeze some: LoRA's)."""
        return True

    def product(self, path: str, x: np.ndarray, dy: np.ndarray) -> None:
        """The weight's gradient of a product y = x @ w [in, out]: xᵀ dy, added. Every product's
        weight gradient comes through here, so that a LoRA step (engine/train/lora.py) can take
        its adapter's share from x and dy instead, and never form the frozen ones."""
        self.add(path, x.T @ dy)  # [in, T] @ [T, out] -> [in, out]

    def bias(self, path: str, dy: np.ndarray) -> None:
        """A bias met every row of y: its gradient sums dy [T, out] over them."""
        if self.wants(path):
            self.add(path, dy.sum(axis=0))

    def site(self, name: str, block: int) -> np.ndarray:
        return self.sites[(name, block)]


def dropped(dy: np.ndarray, tape: Tape, site: str, block: int) -> np.ndarray:
    """The gradient [B*T, D] at a site, carried back through the dropout the tape applied there (if any)."""
    keep = tape.kept.get((site, block))
    return dy if keep is None else dy * keep  # [B*T, D]


class Backward:
    """The shared walk back; a family subclasses it and supplies the backward of its own steps."""

    def __init__(self, model):
        self.model = model
        self.config = model.config

    def run(self, tape: Tape, d_logits: np.ndarray, grads: Grads | None = None) -> Grads:
        """d scalar / d logits [B*T, V] (all rows of the recorded pass) -> every weight's and site's
        gradient, in `grads` (a new Grads by default)."""
        grads, n = Grads() if grads is None else grads, self.config.n_layer
        final = tape.steps[n]
        dh = self.logits_backward(final, d_logits, grads)  # [B*T, D], the normed final stream
        dx = self.final_norm_backward(tape.resid_final, dh, grads)  # [B*T, D]
        for i in reversed(range(n)):
            step, layer = tape.steps[i], self.model.layers[i]
            grads.sites[("resid_post", i)] = dx
            grads.sites[("mlp_out", i)] = dx  # [B*T, D]: x + mlp(..) passes dx to both
            dh2 = self.mlp_backward(step, layer, i, dropped(dx, tape, "mlp_out", i), grads)  # [B*T, D]
            dx = dx + self.mlp_norm_backward(step.resid_mid, layer, i, dh2, grads)
            grads.sites[("resid_mid", i)] = dx
            grads.sites[("attn_out", i)] = dx
            dh1 = self.attention_backward(step, layer, i, dropped(dx, tape, "attn_out", i), tape, grads)  # [B*T, D]
            dx = dx + self.attn_norm_backward(step.resid_pre, layer, i, dh1, grads)
            grads.sites[("resid_pre", i)] = dx
        grads.sites[("embed", -1)] = dx
        self.embed_backward(tape, dropped(dx, tape, "embed", -1), grads)
        return grads

    # -- the steps every family shares (a family replaces what it does differently) ------------

    def logits_backward(self, final: Step, d_logits: np.ndarray, grads: Grads) -> np.ndarray:
        """logits = h @ unembedding: d logits [T, V] -> dh [T, D]; a tied unembedding's gradient
        goes to the embedding it is a view of."""
        w = self.model.unembedding  # [D, V]
        h, _ = final.product(w)  # [T, D]
        if self.config.tie_embeddings:
            if grads.wants("token_embedding"):
                grads.add("token_embedding", d_logits.T @ h)  # [V, T] @ [T, D] -> [V, D]
        else:
            grads.product("unembedding", h, d_logits)  # [D, V]
        return G.transposed_product(d_logits, w)  # [T, V] @ [V, D] -> [T, D]

    def mlp_backward(self, step: Step, layer, i: int, dout: np.ndarray, grads: Grads) -> np.ndarray:
        """The MLP (ops.MLP): d out [T, D] -> d its input h [T, D]; site mlp_act's gradient kept."""
        m = layer.mlp
        h, u = step.product(m.w_in)  # [T, D], [T, F or 2F]
        a, _ = step.product(m.w_out)  # [T, F]
        dh, da, du = G.mlp_backward(dout, u, m)  # [T, D], [T, F], [T, F or 2F]
        grads.sites[("mlp_act", i)] = da  # [T, F]
        p = f"layers.{i}.mlp."
        grads.product(p + "w_out", a, dout)  # [F, D]
        grads.product(p + "w_in", h, du)  # [D, F or 2F]
        if m.b_out is not None:
            grads.bias(p + "b_out", dout)
        if m.b_in is not None:
            grads.bias(p + "b_in", du)
        return dh

    def attend_backward(self, step: Step, i: int, dz: np.ndarray, tape: Tape, grads: Grads):
        """The shared attention (Transformer.attend, through kvcache.grouped_attention and the
        Sequences cache): d z [B*T, H, Dh] -> (dq [B*T, H, Dh], dk, dv [B*T, Hkv, Dh]); sites z and
        attn ([B*H, T, S]: the weights' gradient, though the pass only reads them) kept."""
        grads.sites[("z", i)] = dz
        a = step.attention
        n, g, t_len, dh = a.q.shape  # N = B*Hkv
        b = tape.shape[0]
        n_kv = n // b
        # z was out [B*Hkv, G, T, Dh] moved back to [B*T, H, Dh]: move its gradient the other way
        dout = dz.reshape(b, t_len, n_kv, g, dh).transpose(0, 2, 3, 1, 4).reshape(n * g, t_len, dh)  # [B*Hkv*G, T, Dh]
        keys = np.repeat(a.k.transpose(0, 2, 1), g, axis=0)  # [N*G, S, Dh], as executor.Plain.attention repeats them
        values = np.repeat(a.v, g, axis=0)  # [N*G, S, Dh]
        w = a.weights.reshape(n * g, t_len, -1)  # [N*G, T, S]
        dq, dk, dv, dw = G.reference_attention_backward(dout, a.q.reshape(n * g, t_len, dh), keys, values, w, a.softcap)
        grads.sites[("attn", i)] = dw.reshape(b * n_kv * g, t_len, -1)  # [B*H, T, S]
        dk = dk.reshape(n, g, -1, dh).sum(axis=1)  # [N, S, Dh]: a shared key/value head sums its query heads'
        dv = dv.reshape(n, g, -1, dh).sum(axis=1)  # [N, S, Dh]
        dq = dq.reshape(b, n_kv, g, t_len, dh).transpose(0, 3, 1, 2, 4).reshape(b * t_len, n_kv * g, dh)  # [B*T, H, Dh]
        # the Sequences cache laid each sequence's keys out as [Hkv, Dh, T] and values as [Hkv, T, Dh]
        dk = dk.reshape(b, n_kv, t_len, dh).transpose(0, 2, 1, 3).reshape(b * t_len, n_kv, dh)  # [B*T, Hkv, Dh]
        dv = dv.reshape(b, n_kv, t_len, dh).transpose(0, 2, 1, 3).reshape(b * t_len, n_kv, dh)  # [B*T, Hkv, Dh]
        return dq, dk, dv

    def linear_backward(self, step: Step, w, b, dy: np.ndarray, grads: Grads, path: str,
                        bias: str | None) -> np.ndarray:  # fmt: skip
        """A product y = x @ w + b of the block: d y [T, out] -> d x [T, in], the weight's gradient added."""
        x, _ = step.product(w)  # [T, in]
        grads.product(path, x, dy)
        if b is not None and bias is not None:
            grads.bias(bias, dy)
        return G.transposed_product(dy, w)  # [T, out] @ [out, in] -> [T, in]

    def embed_backward(self, tape: Tape, dx: np.ndarray, grads: Grads) -> None:
        """x = token_embedding[tokens]: d x [T, D] -> the rows read."""
        if grads.wants("token_embedding"):
            grads.add("token_embedding", G.rows_backward(dx, tape.tokens, self.config.vocab_size))

    # -- supplied by each family ---------------------------------------------------------------

    def final_norm_backward(self, x: np.ndarray, dy: np.ndarray, grads: Grads) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    def attn_norm_backward(self, x: np.ndarray, layer, i: int, dy: np.ndarray, grads: Grads) -> np.ndarray:
        raise NotImplementedError

    def attention_backward(self, step: Step, layer, i: int, dout: np.ndarray, tape: Tape, grads: Grads) -> np.ndarray:
        raise NotImplementedError

    def mlp_norm_backward(self, x: np.ndarray, layer, i: int, dy: np.ndarray, grads: Grads) -> np.ndarray:
        raise NotImplementedError

    def named(self, grads: Grads) -> dict[str, np.ndarray]:
        """The weight gradients under the checkpoint's names and in its layout."""
        raise NotImplementedError
