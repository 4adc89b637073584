"""The door to the fast paths: how a forward pass runs its matrix products, MLPs and attention.

A forward pass (engine/model.py) asks the executor once how it runs (`plan`), has the plan run the
model's trunk (embed and blocks), then calls `linear`, `mlp` and `attention` on it, and never sees
a thread. `PLAIN`, the default of every pass, is the textbook: `x @ w + b`, the MLP as one product,
activation and another, attention as the formula reads (ops.reference_attention). A reader can
stop here.

The other side of the door is engine/fast/ (`Fast`, `FAST`, `RowByRow`), which computes the same
numbers (tests/test_executor.py runs both on GPT-2, Llama and Qwen2) with what measurement
justified: blocks, threads, prompt parts, compiled kernels. A reader may skip it. The caller picks
the executor (a Session, the CLI, the server): the model never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from . import ops
from .memory import check_allocation
from .quantized import Quantized, textbook_product


class Plain:
    """The textbook, one step after another on the calling thread."""

    def plan(self, model, cache, rows: int, hooks) -> Plan:
        """How a pass of `rows` rows of `model` through `cache` runs (the fast executor picks its
        strategy here; `hooks`, the pass's, tell it whether a long prompt may be cut). A pass whose
        temporaries would not fit in memory is refused first (check_pass)."""
        check_pass(model.config, cache.length, rows)
        return Plan(self, cache, rows)

    def numerics(self, model, rows: int) -> str:
        """The arithmetic a pass of `rows` rows of `model` computes with: two passes whose numerics
        differ may give the same row different bits (the fast executor's products of a few rows
        quantize the activations of a quantized model to 8 bits, as llama.cpp's do). An experiment
        runs its variants in passes whose numerics are its recorded run's. The textbook: float32."""
        return "float32"

    def around_step(self, rows: int) -> AbstractContextManager:
        """What a decode step of `rows` sequences runs inside (fast.executor.RowByRow: BLAS on one thread)."""
        return nullcontext()

    def linear(self, x: np.ndarray, w: np.ndarray | Quantized, b: np.ndarray | None = None) -> np.ndarray:
        # [T, in] @ [in, out] -> [T, out]; a quantized w: each tile of its rows dequantized, then the same product
        y = textbook_product(x, w) if isinstance(w, Quantized) else x @ w
        if b is not None:
            y += b
        return y

    def mlp(self, h: np.ndarray, m: ops.MLP) -> np.ndarray:
        return m.down(m.hidden(h, self.linear), self.linear)  # [T, D] -> [T, F] -> [T, D]

    def blocks(self, model, first: int, x: np.ndarray, cache, positions: np.ndarray) -> np.ndarray | None:
        """Blocks first..L-1 of a pass without hooks run another way ([T, D] -> [T, D]), or None: the
        textbook's blocks run (Transformer.blocks_from). The fast executor's compiled blocks go here."""
        return None

    def rows_apart(self, model, rows: int) -> bool:
        """Whether a pass of `rows` rows of `model` gives each row the same bits whatever the other
        rows are (the fast executor's compiled blocks do). The textbook's products of several rows
        are BLAS's, whose sums depend on how many rows there are: no."""
        return False

    def attention(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int, weights: bool, window: int | None = None,
        softcap: float | None = None,
    ):
        """q [N, G, T, Dh] (G query heads per key/value head), k [N, Dh, S] (as the cache gives
        keys: a transposed view), v [N, S, Dh] -> (out [N, G, T, Dh], weights [N, G, T, S] or None). `window`,
        `softcap`: a sliding window and soft-capped scores (ops.reference_attention)."""
        n, g, t_len, dh = q.shape
        keys = np.repeat(k.transpose(0, 2, 1), g, axis=0)  # [N*G, S, Dh]: each query head gets its own copy
        values = np.repeat(v, g, axis=0)  # [N*G, S, Dh]
        # [N*G, T, Dh], [N*G, T, S]
        out, w = ops.reference_attention(q.reshape(n * g, t_len, dh), keys, values, window, softcap)
        return out.reshape(n, g, t_len, dh), (w.reshape(n, g, t_len, -1) if weights else None)


class Plan:
    """One pass as the executor runs it: `run`, the executor for its rows, and `trunk`, which runs
    the model's trunk over them: here in one go, on the calling thread, through the cache itself
    (the fast executor may cut a long prompt into parts on threads)."""

    def __init__(self, run: Plain, cache, rows: int):
        self.run, self.cache, self.rows = run, cache, rows

    def trunk(self, model, tokens: np.ndarray, positions: np.ndarray, hooks) -> np.ndarray:
        """tokens [T] at positions [T] through model.trunk (embed and blocks) -> the residual stream [T, D]."""
        return self.each_part(lambda cache, rows: model.trunk(tokens[rows], cache, positions[rows], hooks, self.run))

    def each_part(self, trunk: Callable[[object, slice], np.ndarray]) -> np.ndarray:
        """trunk(cache, rows) -> the residual stream [t, D] of the pass's `rows` (a slice); -> [T, D]."""
        return trunk(self.cache, slice(0, self.rows))


# bytes of temporaries from which a pass asks the memory (/proc/meminfo every step: too dear)
PASS_CHECKED_FROM = 1 << 26


def check_pass(config, start: int, t_len: int) -> None:
    """Refuse (ResourceError) a pass of t_len tokens after `start` cached ones whose largest
    temporaries would not fit in memory: the attention scores and their softmax [H, T, S] and the
    MLP's [T, F] (x3)."""
    temporaries = 4 * (3 * config.n_head * t_len * (start + t_len) + 3 * t_len * 2 * config.d_ff)
    if temporaries > PASS_CHECKED_FROM:
        check_allocation(temporaries, f"a forward pass over {t_len:,} tokens")


PLAIN = Plain()
