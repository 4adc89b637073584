"""Any inference family, trainable: the model's own forward pass (engine/families/) and its backward
(engine/grad/), on the parameters the trainer keeps (a dict under the checkpoint's names, the
checkpoint's layout).

Each step builds the inference model from the dict with the family's own name table (its fused
q/k/v and gate/up matrices are copies, so the model is rebuilt after every update: one copy of the
weights, small beside a step's products), records a pass, walks it back, and hands the gradients
back under the same names (grad's `named`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import grad
from ..checkpoint import Checkpoint
from ..config import ModelConfig
from ..errors import CheckpointError
from ..executor import PLAIN
from ..families import family
from ..kvcache import Sequences
from .model import Params, Trainable


class DictTensors:
    """The Tensors interface of a checkpoint (engine/checkpoint.py) over a dict of arrays in memory."""

    def __init__(self, arrays: Params):
        self.arrays = arrays

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    @property
    def names(self) -> list[str]:
        return list(self.arrays)

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        a = self.arrays.get(name)
        if a is None or a.shape != tuple(shape):
            raise CheckpointError(f"tensor {name!r} is {'missing' if a is None else list(a.shape)}, not {list(shape)}")
        return a

    def fused(self, names_rows: list[tuple[str, int]], n_in: int) -> np.ndarray:
        return np.concatenate([self.get(name, (rows, n_in)) for name, rows in names_rows]).T  # [in, sum out_i]

    def ignore(self, *names: str) -> None:
        pass


class FamilyTrainable(Trainable):
    def build(self):
        """The inference model of the current parameters."""
        ckpt = Checkpoint(Path("."), self.config, DictTensors(self.params))
        return family(self.config.family).MODEL.from_checkpoint(ckpt)

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        model = self.build()
        b, t = x.shape
        logits = model.forward(np.asarray(x).reshape(-1), Sequences(b, t), all_logits=True, run=PLAIN)  # [B*T, V]
        shifted = logits - logits.max(axis=-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # [N, V]
        return -float(logp[np.arange(b * t), np.asarray(y).reshape(-1)].mean(dtype=np.float64))

    def loss_and_grads(self, x: np.ndarray, y: np.ndarray, rng=None) -> tuple[float, Params]:
        model = self.build()
        loss, grads = grad.loss_and_grads(model, x, y)
        named = grad.backward_of(model).named(grads)
        return loss, {name: np.ascontiguousarray(named[name]) for name in self.params}

    def logits_last(self, ids: np.ndarray) -> np.ndarray:
        model = self.build()
        ids = np.asarray(ids)[-self.config.n_ctx :]
        return model.forward(ids, model.new_cache(len(ids)), all_logits=False)[-1]  # [V]


def llama_like(cfg: ModelConfig, fused: bool = False, gemma: bool = False) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape (a Linear [out, in]) of Qwen3 (q/k norms), Phi-3 (fused
    qkv_proj and gate_up_proj) and Gemma 3 (four norms a block, q/k norms), transformers' order."""
    D, F, V, Dh = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.head_dim
    out = {"model.embed_tokens.weight": (V, D)}
    for i in range(cfg.n_layer):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
        out[p + "input_layernorm.weight"] = (D,)
        if fused:
            out[a + "qkv_proj.weight"] = (cfg.d_attn + 2 * cfg.d_kv, D)
        for n, rows in () if fused else (("q", cfg.d_attn), ("k", cfg.d_kv), ("v", cfg.d_kv)):
            out[a + f"{n}_proj.weight"] = (rows, D)
            if cfg.qkv_bias:
                out[a + f"{n}_proj.bias"] = (rows,)
        out[a + "o_proj.weight"] = (D, cfg.d_attn)
        if cfg.o_bias:
            out[a + "o_proj.bias"] = (D,)
        if cfg.qk_norm:
            out |= {a + "q_norm.weight": (Dh,), a + "k_norm.weight": (Dh,)}
        out[p + "post_attention_layernorm.weight"] = (D,)
        if gemma:
            out |= {p + "pre_feedforward_layernorm.weight": (D,), p + "post_feedforward_layernorm.weight": (D,)}
        if fused:
            out[p + "mlp.gate_up_proj.weight"] = (2 * F, D)
        else:
            out |= {p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D)}
        out[p + "mlp.down_proj.weight"] = (D, F)
    out["model.norm.weight"] = (D,)
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (V, D)
    return out


def shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    return llama_like(cfg, fused=cfg.family == "phi3", gemma=cfg.family == "gemma3")


MODEL = FamilyTrainable
