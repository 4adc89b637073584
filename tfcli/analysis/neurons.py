"""The MLP as questions: which of a layer's F hidden units (neurons) a token turns on, and what a
neuron's answer adds to the prediction. Pure NumPy on arrays and the model's own pieces.

A layer's MLP computes a = act(x W_up) (for SwiGLU silu(x W_gate) * (x W_up)), [T, F], and adds
a W_down, [T, F] @ [F, D]: row n of W_down is what neuron n writes into the residual stream,
scaled by its activation. Its direct effect on the prediction is that row read the way the lens
reads the stream: through the final norm (its gain, and its centring for LayerNorm, without its
bias) and the unembedding. That ranks tokens as TransformerLens's W_out[n] @ W_U with the final
norm folded in (fold_ln) does; the attention and MLPs of later layers can still change it.
"""

from __future__ import annotations

import numpy as np

from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.inspect import Recorder


def activations(model, ids, layer: int, run: Plain = PLAIN) -> np.ndarray:
    """ids [T] through the model once (`run`: its executor) -> the MLP activations of `layer` [T, F]."""
    rec = Recorder(mlp=True, layers=[layer])
    ids = np.asarray(ids)
    model.forward(ids, model.new_cache(len(ids)), hooks=rec, run=run)
    return rec.mlp_act[layer]


def top_neurons(acts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """[T, F] -> the k neurons with the largest activation per token, ids [T, k] and values [T, k]
    (largest first; ties: the smaller id)."""
    from .lens import top_k

    return top_k(acts, k)


def output_direction(model, layer_index: int, neuron: int) -> np.ndarray:
    """[D]: what neuron `neuron` of layer `layer_index` adds to the residual stream per unit of
    activation, its row of the down projection (the bias, if any, taken out)."""
    return np.array(model.layers[layer_index].mlp.w_out[neuron], dtype=np.float32)  # [F, D] -> row [D]


def direct_logits(model, direction: np.ndarray, run: Plain = PLAIN) -> np.ndarray:
    """[D] -> [V]: the logits the final norm and unembedding give this direction alone (the norm's
    bias, a constant of every prediction, subtracted)."""
    d = np.stack([direction, np.zeros_like(direction)]).astype(np.float32)  # [2, D]
    normed = model.final_norm(d)  # [2, D]
    return model.unembed(normed[:1] - normed[1:], run)[0]  # [1, D] @ [D, V] -> [V]


def most_common(top_ids: np.ndarray, n: int) -> list[tuple[int, int]]:
    """The neurons found most often in the per-token top lists: [(neuron, count)], most first."""
    ids, counts = np.unique(top_ids.ravel(), return_counts=True)
    order = np.lexsort((ids, -counts))[:n]
    return [(int(ids[i]), int(counts[i])) for i in order]
