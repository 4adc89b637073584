"""The building blocks of a transformer, as pure NumPy functions on float32 arrays.

Axes (STYLE.md): T tokens in this call, S cached positions, D model width, H / Hkv query and
key/value heads, Dh head size, F MLP width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """[..., N] -> [..., N], rows summing to 1; subtracting the max keeps exp() from overflowing.
    One array the size of x is made; exp and the division work in it."""
    e = x - x.max(axis=axis, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """[T, D] -> [T, D]: zero mean, unit variance per token, then scale and shift (GPT-2)."""
    n = np.float32(x.shape[-1])
    centered = x - x.sum(axis=-1, keepdims=True) / n  # [T, D]
    var = np.square(centered).sum(axis=-1, keepdims=True) / n  # [T, 1]
    return centered / np.sqrt(var + np.float32(eps)) * g + b


def rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    """[T, D] -> [T, D]: divide by the root mean square, then scale; no centring, no bias (Llama)."""
    # [T, 1]; sum(): np.mean's Python layer costs more than the math here
    ms = np.square(x).sum(axis=-1, keepdims=True) / np.float32(x.shape[-1])
    return x / np.sqrt(ms + np.float32(eps)) * g


def gelu(x: np.ndarray) -> np.ndarray:
    """The tanh approximation of GELU that GPT-2 was trained with ("gelu_new"):
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed in place in one temporary."""
    t = np.square(x)
    t *= np.float32(0.044715) * _SQRT_2_OVER_PI
    t += _SQRT_2_OVER_PI
    t *= x  # sqrt(2/pi) (x + 0.044715 x^3)
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= x
    t *= np.float32(0.5)
    return t


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), the gate of a SwiGLU MLP (x / (1 + e^-x), with one temporary). Below x = -88.7,
    e^-x is inf in float32 and x / inf the limit, -0.0: not a fault to warn of."""
    t = np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += 1.0
    return np.divide(x, t, out=t)


Linear = Callable[..., np.ndarray]  # (x [T, in], w [in, out], b [out] | None) -> [T, out]: an executor's product


@dataclass(frozen=True)
class MLP:
    """One block's MLP: the weights and the activation a family gives it.

    Plain:  a = act(h W_in + b_in)                      W_in [D, F]   (GPT-2: GELU)
    Gated:  a = act(h W_gate) * (h W_up)                W_in [D, 2F] = [W_gate | W_up] (Llama: SiLU, SwiGLU)
    Then:   out = a W_out + b_out                       W_out [F, D]

    The hidden activation `a` [T, F] holds the answers to the MLP's F questions (tfcli neurons).
    """

    w_in: np.ndarray  # [D, F], or [D, 2F] gate and up side by side when gated
    w_out: np.ndarray  # [F, D]
    act: Callable[[np.ndarray], np.ndarray]
    gated: bool = False
    b_in: np.ndarray | None = None  # [F] (or [2F] when gated)
    b_out: np.ndarray | None = None  # [D]

    @property
    def d_ff(self) -> int:
        return self.w_out.shape[0]

    def hidden(self, h: np.ndarray, linear: Linear) -> np.ndarray:
        """[T, D] -> the hidden activation [T, F]."""
        u = linear(h, self.w_in, self.b_in)  # [T, D] @ [D, F or 2F] -> [T, F or 2F]
        if self.gated:
            f = self.d_ff
            return self.act(u[:, :f]) * u[:, f:]  # [T, F]
        return self.act(u)  # [T, F]

    def down(self, a: np.ndarray, linear: Linear) -> np.ndarray:
        return linear(a, self.w_out, self.b_out)  # [T, F] @ [F, D] -> [T, D]

    def part_out(self, h: np.ndarray, lo: int, hi: int, linear: Linear) -> np.ndarray:
        """What the hidden units lo..hi-1 alone add to the residual stream: [T, D] -> [T, D]. The
        MLP's output is the sum of its parts' (b_out counted once, with the part holding unit 0)."""
        f, b = self.d_ff, self.b_in
        if self.gated:
            gate = linear(h, self.w_in[:, lo:hi], None if b is None else b[lo:hi])  # [T, U]
            up = linear(h, self.w_in[:, f + lo : f + hi], None if b is None else b[f + lo : f + hi])  # [T, U]
            a = self.act(gate) * up  # [T, U]
        else:
            a = self.act(linear(h, self.w_in[:, lo:hi], None if b is None else b[lo:hi]))  # [T, U]
        return linear(a, self.w_out[lo:hi], self.b_out if lo == 0 < hi else None)  # [T, U] @ [U, D] -> [T, D]


def rope_frequencies(rotary_dim: int, theta: float) -> np.ndarray:
    """The angle per position of each rotated pair, theta^(-2i/Dh) as in RoFormer: [Dh/2], float64.
    A family that stretches them (Llama 3's RoPE scaling) changes this array before rope_tables."""
    return 1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)  # [Dh/2]


def rope_tables(n_positions: int, inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables, each [n_positions, R/2] for R/2 frequencies [R/2] (rope_frequencies),
    computed once per model; in float64 then rounded, so that long positions keep their phase."""
    angles = np.outer(np.arange(n_positions, dtype=np.float64), inv_freq)  # [P, R/2]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs of dimensions by each position's angle: [T, n, Dh] -> [T, n, Dh].

    Uses the "rotate half" pairing of the Hugging Face Llama layout: dimension i is paired with
    i + R/2 (not with i + 1 as in the original paper). cos, sin: [T, R/2]. R is the rotated part of
    each head: all of it (R = Dh), or its first R dimensions (Phi-3's partial_rotary_factor), the
    rest passing through unchanged.
    """
    half = cos.shape[-1]
    x1, x2 = x[..., :half], x[..., half : 2 * half]  # [T, n, R/2] each
    c, s = cos[:, None, :], sin[:, None, :]  # [T, 1, R/2]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, x[..., 2 * half :]], axis=-1)  # [T, n, Dh]


def reference_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, window: int | None = None, softcap: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """softmax(q kᵀ / √Dh + mask) v, written as the formula reads (picoGPT's `attention`).

    q: [H, T, Dh] queries of the last T of S positions; k, v: [H, S, Dh] keys and values of all S
    (for grouped-query attention, repeat each key/value head for the query heads that share it).
    `window`: a query sees only itself and the window - 1 positions before it (Gemma's sliding
    layers); `softcap`: scores become softcap·tanh(scores / softcap) before the mask (Gemma 2).
    Returns (out [H, T, Dh], weights [H, T, S]). fast/run/dense_ops.py's `attention` computes the same thing
    faster; tests/test_ops.py checks that they agree.
    """
    t_len, s_len, head_dim = q.shape[1], k.shape[1], q.shape[2]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(head_dim)  # [H, T, Dh] @ [H, Dh, S] -> [H, T, S]
    if softcap:
        scores = softcap * np.tanh(scores / softcap)  # [H, T, S], now within (-softcap, softcap)
    # Query t sits at position S-T+t and may not look at later positions: -inf there, 0 after softmax.
    query_pos, key_pos = np.arange(s_len - t_len, s_len)[:, None], np.arange(s_len)[None, :]
    hidden = key_pos > query_pos  # [T, S]
    if window:
        hidden |= key_pos <= query_pos - window  # [T, S]: too far back for a sliding window
    weights = softmax(np.where(hidden, -np.inf, scores).astype(np.float32))  # [H, T, S], rows sum to 1
    return weights @ v, weights  # [H, T, S] @ [H, S, Dh] -> [H, T, Dh]
