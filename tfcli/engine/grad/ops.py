"""The backward of each building block of engine/ops.py, in the same order and with the same axes.

Each `name_backward` takes the gradient of a scalar (a loss, a metric) with respect to the output
of `ops.name` and what the forward computed, and returns the gradients with respect to its inputs
and weights. The forward's values come from the tape of the pass (grad/tape.py); what is cheap
(a norm's 1/rms) is computed again from the recorded input rather than kept.

Axes (STYLE.md): T tokens, S positions attended, D width, H / Hkv heads, Dh head size, F MLP width,
V vocabulary. Karpathy's "Becoming a backprop ninja" derives the norms' backward by hand.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..quantized import Quantized


# ---------------------------------------------------------------------------------------------
# linear: y = x W + b


def linear_backward(dy: np.ndarray, x: np.ndarray, w: np.ndarray | Quantized) -> tuple[np.ndarray, ...]:
    """dy [T, out] of y = x [T, in] @ w [in, out] + b -> (dx [T, in], dw [in, out], db [out]).
    dx sends dy back through w; dw sums each row's outer product; the bias met every row."""
    dx = transposed_product(dy, w)  # [T, out] @ [out, in] -> [T, in]
    dw = x.T @ dy  # [in, T] @ [T, out] -> [in, out]
    return dx, dw, dy.sum(axis=0)


def transposed_product(dy: np.ndarray, w: np.ndarray | Quantized) -> np.ndarray:
    """dy [T, out] @ w.T -> [T, in]; a quantized w [in, out] stores its columns as rows: each tile
    of them dequantized, as the forward's textbook product does (quantized.textbook_product)."""
    if not isinstance(w, Quantized):
        return dy @ w.T  # [T, out] @ [out, in] -> [T, in]
    assert w.transposed, w
    dx = np.zeros((dy.shape[0], w.cols), dtype=np.float32)  # [T, in]
    for first, tile in w.tiles():  # tile [n, in]: stored rows first..first+n-1 = output columns
        dx += dy[:, first : first + len(tile)] @ tile  # [T, n] @ [n, in] -> [T, in]
    return dx


def rows_backward(dx: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
    """dx [T, D] of table[rows] -> d table [n_rows, D]: a row read twice gets both gradients."""
    d_table = np.zeros((n_rows, dx.shape[-1]), dtype=np.float32)  # [V, D]
    np.add.at(d_table, rows, dx)  # scatter-add, not assignment
    return d_table


# ---------------------------------------------------------------------------------------------
# norms over the last axis


def layer_norm_backward(dy: np.ndarray, x: np.ndarray, g: np.ndarray, eps: float) -> tuple[np.ndarray, ...]:
    """dy [T, D] of ops.layer_norm(x, g, b) -> (dx [T, D], dg [D], db [D]). Moving one x moves its
    row's mean and std too: the two subtracted means take those paths out again."""
    centered = x - x.mean(axis=-1, keepdims=True)  # [T, D]
    rstd = 1.0 / np.sqrt(np.square(centered).mean(axis=-1, keepdims=True) + np.float32(eps))  # [T, 1]
    xhat = centered * rstd  # [T, D]
    dxhat = dy * g  # [T, D]
    along = (dxhat * xhat).mean(axis=-1, keepdims=True)  # [T, 1]
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * along)  # [T, D]
    return dx, (dy * xhat).reshape(-1, x.shape[-1]).sum(axis=0), dy.reshape(-1, x.shape[-1]).sum(axis=0)


def rms_norm_backward(dy: np.ndarray, x: np.ndarray, g: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """dy [.., n] of ops.rms_norm(x, g) -> (dx [.., n], dg [n]): LayerNorm's backward without the
    mean's path. Works on any leading axes (Qwen3's and Gemma's per-head norms: [T, H, Dh])."""
    r = 1.0 / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + np.float32(eps))  # [.., 1]
    xhat = x * r  # [.., n]
    dxhat = dy * g  # [.., n]
    dx = r * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))  # [.., n]
    return dx, (dy * xhat).reshape(-1, x.shape[-1]).sum(axis=0)


# ---------------------------------------------------------------------------------------------
# activations: the derivative of each function ops.MLP may hold

_C = np.float32(np.sqrt(2.0 / np.pi))
_A = np.float32(0.044715)


def gelu_derivative(x: np.ndarray) -> np.ndarray:
    """d/dx of ops.gelu, 0.5 x (1 + tanh u) with u = c (x + a x³): 0.5 (1 + tanh u) + 0.5 x (1 - tanh² u) du/dx."""
    # in place, in two temporaries: the formula's nine [T, F] temporaries cost as much as a product
    x2 = np.square(x)  # [.., F] x²
    t = x2 * (_A * _C)
    t += _C
    t *= x
    np.tanh(t, out=t)  # [.., F] tanh u
    d = np.square(t)
    np.subtract(np.float32(1.0), d, out=d)  # 1 - tanh² u
    x2 *= np.float32(3.0) * _A
    x2 += np.float32(1.0)
    x2 *= _C  # du/dx = c (1 + 3 a x²)
    d *= x2
    d *= x
    t += np.float32(1.0)
    d += t
    d *= np.float32(0.5)
    return d  # [.., F]


def silu_derivative(x: np.ndarray) -> np.ndarray:
    """d/dx of ops.silu, x s(x) with s the sigmoid: s (1 + x (1 - s))."""
    s = 1.0 / (1.0 + np.exp(-x))  # [.., F]
    return s * (1.0 + x * (1.0 - s))


DERIVATIVES = {ops.gelu: gelu_derivative, ops.silu: silu_derivative}


def mlp_backward(dout: np.ndarray, u: np.ndarray, m: ops.MLP):
    """dout [T, D] of ops.MLP (u = h W_in + b_in [T, F or 2F]; a = act(u) its hidden activation
    [T, F]) -> (dh [T, D], da [T, F] (the gradient at site mlp_act), du [T, F or 2F]). Its two
    products' weight gradients are aᵀ dout and hᵀ du (grad/model.py: Grads.product)."""
    da = transposed_product(dout, m.w_out)  # [T, D] @ [D, F] -> [T, F]
    derivative = DERIVATIVES[m.act]
    if m.gated:
        f = m.d_ff
        gate, up = u[:, :f], u[:, f:]  # [T, F] each
        du = np.concatenate([da * up * derivative(gate), da * m.act(gate)], axis=1)  # [T, 2F]: a = act(gate) * up
    else:
        du = da * derivative(u)  # [T, F]
    dh = transposed_product(du, m.w_in)  # [T, F or 2F] @ [F or 2F, D] -> [T, D]
    return dh, da, du


# ---------------------------------------------------------------------------------------------
# RoPE and attention


def apply_rope_backward(dy: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """dy [T, n, Dh] of ops.apply_rope -> [T, n, Dh]. RoPE is linear in x: its gradient goes back
    through the transposed map, each pair turned by minus the angle (cos and sin scaled by a
    longrope factor included); the unrotated tail passes through."""
    return ops.apply_rope(dy, cos, -sin)


def reference_attention_backward(dout: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, weights: np.ndarray,
                                 softcap: float | None = None):  # fmt: skip
    """dout [N, T, Dh] of ops.reference_attention(q [N, T, Dh], k, v [N, S, Dh]) whose weights were
    [N, T, S] -> (dq [N, T, Dh], dk [N, S, Dh], dv [N, S, Dh], dweights [N, T, S]).

    Softmax's backward, row by row: d score = p (dp - Σ dp·p). A masked weight is 0, so its score
    gets nothing: the causal mask and a sliding window need no backward of their own. A soft cap
    c·tanh(s/c) multiplies by its slope 1 - tanh²."""
    dv = weights.transpose(0, 2, 1) @ dout  # [N, S, T] @ [N, T, Dh] -> [N, S, Dh]
    dp = dout @ v.transpose(0, 2, 1)  # [N, T, Dh] @ [N, Dh, S] -> [N, T, S]
    ds = weights * (dp - (dp * weights).sum(axis=-1, keepdims=True))  # [N, T, S]
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    if softcap:
        t = np.tanh(q @ k.transpose(0, 2, 1) * scale / np.float32(softcap))  # [N, T, S], as the forward capped
        ds *= 1.0 - t * t
    ds *= scale
    dq = ds @ k  # [N, T, S] @ [N, S, Dh] -> [N, T, Dh]
    dk = ds.transpose(0, 2, 1) @ q  # [N, S, T] @ [N, T, Dh] -> [N, S, Dh]
    return dq, dk, dv, dp


# ---------------------------------------------------------------------------------------------
# soft-capped logits (Gemma 2 style): c·tanh(l / c)


def softcap_backward(dy: np.ndarray, capped: np.ndarray, cap: float) -> np.ndarray:
    """dy [T, V] of c·tanh(l/c), from the capped values [T, V] themselves: slope 1 - (capped/c)²."""
    t = capped / np.float32(cap)  # [T, V] = tanh(l / c)
    return dy * (1.0 - t * t)
