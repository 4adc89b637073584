"""Every operation of a transformer, forward and backward, side by side, on float32 NumPy arrays.

Each `name(...)` returns its output and what its backward needs (`saved`); each `name_backward`
takes the gradient of the loss with respect to that output and returns the gradients with
respect to the inputs and parameters. The chain rule does the rest (engine/train/model.py).

Axes (STYLE.md): B sequences, T positions, D width, H / Hkv query and key/value heads, Dh head
size, F MLP width, V vocabulary, N = B*T rows. The derivations are the textbook ones; Karpathy's
"Becoming a backprop ninja" (makemore part 4) derives LayerNorm's and cross-entropy's by hand.
"""

from __future__ import annotations

import numpy as np

from .. import ops

# ---------------------------------------------------------------------------------------------
# linear: y = x W + b


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """x [N, in] @ w [in, out] (+ b [out]) -> [N, out]."""
    y = x @ w  # [N, in] @ [in, out] -> [N, out]
    if b is not None:
        y += b
    return y


def linear_backward(dy: np.ndarray, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dy [N, out] -> (dx [N, in], dw [in, out], db [out]). Each input row touched w once: dw sums
    the outer products of the rows, dx sends dy back through w."""
    dx = dy @ w.T  # [N, out] @ [out, in] -> [N, in]
    dw = x.T @ dy  # [in, N] @ [N, out] -> [in, out]
    return dx, dw, dy.sum(axis=0)  # db [out]: the bias is added to every row


# ---------------------------------------------------------------------------------------------
# embeddings: a row lookup, whose gradient adds each position's dx to the row it read


def embedding_backward(dx: np.ndarray, ids: np.ndarray, n_rows: int) -> np.ndarray:
    """dx [B, T, D] of rows table[ids] -> d table [n_rows, D]; a row read twice gets both gradients."""
    d_table = np.zeros((n_rows, dx.shape[-1]), dtype=np.float32)  # [V, D]
    np.add.at(d_table, ids.reshape(-1), dx.reshape(-1, dx.shape[-1]))  # scatter-add, not assignment
    return d_table


# ---------------------------------------------------------------------------------------------
# LayerNorm (GPT-2) and RMSNorm (Llama), over the last axis


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float):
    """[N, D] -> [N, D]: (x - mean) / std * g + b. Saved: the normalised x and 1/std."""
    mean = x.mean(axis=-1, keepdims=True)  # [N, 1]
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + np.float32(eps))  # [N, 1]
    xhat = (x - mean) * rstd  # [N, D]
    return xhat * g + b, (xhat, rstd, g)


def layer_norm_backward(dy: np.ndarray, saved) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dy [N, D] -> (dx [N, D], dg [D], db [D]). Moving one x moves the mean and the std of its
    row too: the two subtracted means take those paths out again."""
    xhat, rstd, g = saved
    dxhat = dy * g  # [N, D]
    along = (dxhat * xhat).mean(axis=-1, keepdims=True)  # [N, 1]
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * along)  # [N, D]
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def rms_norm(x: np.ndarray, g: np.ndarray, eps: float):
    """[N, D] -> [N, D]: x / rms(x) * g; no centring, no bias. Saved: x / rms and 1/rms."""
    r = 1.0 / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + np.float32(eps))  # [N, 1]
    xhat = x * r  # [N, D]
    return xhat * g, (xhat, r, g)


def rms_norm_backward(dy: np.ndarray, saved) -> tuple[np.ndarray, np.ndarray]:
    """dy [N, D] -> (dx [N, D], dg [D]): LayerNorm's backward without the mean's path."""
    xhat, r, g = saved
    dxhat = dy * g  # [N, D]
    dx = r * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))  # [N, D]
    return dx, (dy * xhat).sum(axis=0)


# ---------------------------------------------------------------------------------------------
# MLP activations: GELU (tanh form, GPT-2) and SwiGLU (Llama)

_C = np.float32(np.sqrt(2.0 / np.pi))
_A = np.float32(0.044715)


def gelu(x: np.ndarray):
    """[N, F] -> [N, F], the tanh form GPT-2 uses (ops.gelu). Saved: x and tanh(u)."""
    t = np.tanh(_C * (x + _A * x * x * x))  # [N, F]
    return 0.5 * x * (1.0 + t), (x, t)


def gelu_backward(dy: np.ndarray, saved) -> np.ndarray:
    """d/dx 0.5 x (1 + tanh u) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, u = c (x + a x^3)."""
    x, t = saved
    du = _C * (1.0 + 3.0 * _A * x * x)  # [N, F]
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)  # [N, F]


def swiglu(gate: np.ndarray, up: np.ndarray):
    """silu(gate) * up: [N, F], [N, F] -> [N, F]. Saved: gate, up and sigmoid(gate)."""
    s = 1.0 / (1.0 + np.exp(-gate))  # [N, F] sigmoid
    return gate * s * up, (gate, up, s)


def swiglu_backward(dy: np.ndarray, saved) -> tuple[np.ndarray, np.ndarray]:
    """dy [N, F] -> (d gate, d up), each [N, F]; silu'(g) = s (1 + g (1 - s))."""
    gate, up, s = saved
    d_up = dy * gate * s  # [N, F]
    d_gate = dy * up * s * (1.0 + gate * (1.0 - s))  # [N, F]
    return d_gate, d_up


# ---------------------------------------------------------------------------------------------
# RoPE (Llama): a rotation of each pair (i, i + Dh/2) by the position's angle


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """[B, n, T, Dh] -> [B, n, T, Dh]; cos, sin [T, Dh/2] (ops.rope_tables). The "rotate half"
    pairing of ops.apply_rope, with heads before positions."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]  # [B, n, T, Dh/2] each
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rope_backward(dy: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """A rotation's gradient is the rotation back: the same pairs turned by minus the angle."""
    return rope(dy, cos, -sin)  # [B, n, T, Dh]


# ---------------------------------------------------------------------------------------------
# attention: softmax(q k^T / sqrt(Dh) + mask) v, with grouped key/value heads


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True):
    """q [B, H, T, Dh], k, v [B, Hkv, T, Dh] -> out [B, H, T, Dh]. Saved: the inputs and weights.

    Query head h reads key/value head h // G (G = H / Hkv; transformers' repeat_kv). `causal`
    False drops the mask: every position may then read the ones after it (`tfcli train
    --no-mask`), which is the leak the mask is there to stop."""
    group = q.shape[1] // k.shape[1]
    kr, vr = (k, v) if group == 1 else (np.repeat(k, group, axis=1), np.repeat(v, group, axis=1))  # [B, H, T, Dh] each
    # NumPy's stacked matmul calls BLAS only when the right operand's rows are contiguous; a
    # transposed view of k falls back to a loop 30x slower: the copy is the cheap part.
    k_t = np.ascontiguousarray(kr.transpose(0, 1, 3, 2))  # [B, H, Dh, T]
    scores = q @ k_t * np.float32(1.0 / np.sqrt(q.shape[-1]))  # [B, H, T, Dh] @ [B, H, Dh, T] -> [B, H, T, T]
    if causal:
        t_len = q.shape[2]
        scores += np.triu(np.full((t_len, t_len), -np.inf, dtype=np.float32), k=1)  # [T, T]: -inf on the future
    p = ops.softmax(scores)  # [B, H, T, T], rows sum to 1; the future gets exactly 0
    return p @ vr, (q, kr, vr, p, group)  # [B, H, T, T] @ [B, H, T, Dh] -> [B, H, T, Dh]


def attention_backward(dout: np.ndarray, saved) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dout [B, H, T, Dh] -> (dq [B, H, T, Dh], dk, dv [B, Hkv, T, Dh]).

    Softmax's backward: ds = p * (dp - sum(dp * p)) row by row. A masked weight is 0, so its
    score gets no gradient: the mask needs no backward of its own. A shared key/value head sums
    the gradients of the query heads that read it."""
    q, kr, vr, p, group = saved
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    dv = p.transpose(0, 1, 3, 2) @ dout  # [B, H, T, T] @ [B, H, T, Dh] -> [B, H, T, Dh]
    # [B, H, T, Dh] @ [B, H, Dh, T] -> [B, H, T, T] (a copy: see attention())
    dp = dout @ np.ascontiguousarray(vr.transpose(0, 1, 3, 2))
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))  # [B, H, T, T]
    ds *= scale
    dq = ds @ kr  # [B, H, T, T] @ [B, H, T, Dh] -> [B, H, T, Dh]
    dk = ds.transpose(0, 1, 3, 2) @ q  # [B, H, T, T] @ [B, H, T, Dh] -> [B, H, T, Dh]
    b, h, t_len, dh = q.shape
    fold = (b, h // group, group, t_len, dh)  # [B, Hkv, G, T, Dh]: the G query heads of each kv head
    return dq, dk.reshape(fold).sum(axis=2), dv.reshape(fold).sum(axis=2)


# ---------------------------------------------------------------------------------------------
# cross-entropy: the mean of -log p(target) over every position


def cross_entropy(logits: np.ndarray, targets: np.ndarray):
    """logits [N, V], targets [N] -> (mean loss in nats, saved). Saved: the probabilities."""
    shifted = logits - logits.max(axis=-1, keepdims=True)  # [N, V], exp() of at most 0
    log_z = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # [N, 1]
    logp = shifted - log_z  # [N, V] log-softmax
    loss = -logp[np.arange(len(targets)), targets].mean(dtype=np.float64)
    return float(loss), (np.exp(logp), targets)


def cross_entropy_backward(saved) -> np.ndarray:
    """d loss / d logits = (softmax - one_hot(target)) / N: [N, V]. Each row pushes the target up
    and every other token down, in proportion to how likely the model found it."""
    probs, targets = saved
    d = probs.copy()  # [N, V]
    d[np.arange(len(targets)), targets] -= 1.0
    d /= np.float32(len(targets))
    return d


# ---------------------------------------------------------------------------------------------
# dropout (--dropout, default 0): zero a share p of the values, scale the rest by 1/(1-p)


def dropout(x: np.ndarray, p: float, rng: np.random.Generator | None):
    """x -> x * keep / (1 - p); saved: that multiplier (None when p is 0: nothing happens)."""
    if p <= 0 or rng is None:
        return x, None
    keep = (rng.random(x.shape, dtype=np.float32) >= p).astype(np.float32) / np.float32(1.0 - p)
    return x * keep, keep


def dropout_backward(dy: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    return dy if keep is None else dy * keep
