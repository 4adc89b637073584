"""A model that learns: any inference family's own forward pass (engine/families/) and its backward
(engine/grad/), on the parameters the trainer keeps.

    x = embed(tokens)                         # [B*T, D]   the family's forward, recorded on a tape
    for each block: x = block(x)              # [B*T, D]
    logits = final_norm(x) @ unembedding      # [B*T, V]
    loss = cross_entropy(logits, targets)     # one number; engine/grad walks it back to every weight

Parameters are one dict, keyed by the Hugging Face names and stored in the Hugging Face layout
(GPT-2's Conv1D [in, out], Llama's Linear [out, in]), so that a checkpoint is the dict written
out, and a gradient has the name and shape of its parameter, as torch's `named_parameters` do.
Each step builds the inference model from the dict with the family's own name table (its fused
q/k/v and gate/up matrices are copies, so the model is rebuilt after every update: one copy of the
weights, small beside a step's products), records a pass, walks it back, and hands the gradients
back under the same names (the family backward's `named`). `--no-mask` and `--dropout` are the
tape's (engine/grad/tape.py): no block has a second, trainable copy.
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

Params = dict[str, np.ndarray]


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


class Trainable:
    """One model of any family the trainer trains: `params` (checkpoint names -> arrays) learn.
    `causal` False: `--no-mask`, each position reads its whole sequence; `dropout`: `--dropout`."""

    def __init__(self, config: ModelConfig, params: Params, causal: bool = True, dropout: float = 0.0):
        self.config = config
        self.params = params
        self.causal = causal
        self.dropout = dropout

    def build(self):
        """The inference model of the current parameters."""
        ckpt = Checkpoint(Path("."), self.config, DictTensors(self.params))
        return family(self.config.family).MODEL.from_checkpoint(ckpt)

    def logits(self, model, ids: np.ndarray) -> np.ndarray:
        """ids [B, T] -> logits [B*T, V], masked as the run trains (no dropout: evaluation)."""
        b, t = ids.shape
        if not self.causal:
            return grad.record(model, ids, causal=False)[0]  # [B*T, V]
        return model.forward(ids.reshape(-1), Sequences(b, t), all_logits=True, run=PLAIN)  # [B*T, V]

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        """Mean cross-entropy of next-token targets y [B, T] given inputs x [B, T] (grad.IGNORED
        targets left out); no gradients."""
        logits = self.logits(self.build(), np.asarray(x))  # [B*T, V]
        y = np.asarray(y).reshape(-1)  # [N]
        rows = np.flatnonzero(y != grad.IGNORED)  # [n]
        shifted = logits[rows] - logits[rows].max(axis=-1, keepdims=True)  # [n, V]
        logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # [n, V]
        return -float(logp[np.arange(len(rows)), y[rows]].mean(dtype=np.float64))

    def loss_and_grads(self, x: np.ndarray, y: np.ndarray, rng: np.random.Generator | None = None
                       ) -> tuple[float, Params]:  # fmt: skip
        """The loss on inputs x [B, T] and targets y [B, T], and its gradient for every parameter.
        `rng` draws the dropout's masks (needed when dropout > 0)."""
        model = self.build()
        dropout = self.dropout if rng is not None else 0.0
        loss, grads = grad.loss_and_grads(model, x, y, causal=self.causal, dropout=dropout, rng=rng)
        named = grad.backward_of(model).named(grads)
        return loss, {name: np.ascontiguousarray(named[name]) for name in self.params}

    def logits_last(self, ids: np.ndarray) -> np.ndarray:
        """ids [T] -> the next-token logits of the last position [V], for samples during training.
        With --no-mask the model runs as it was trained: each position reads the whole prefix."""
        model = self.build()
        ids = np.asarray(ids)[-self.config.n_ctx :]
        if not self.causal:
            return self.logits(model, ids[None])[-1]  # [V]
        return model.forward(ids, model.new_cache(len(ids)), all_logits=False)[-1]  # [V]


def gpt2_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape of a GPT-2 (Conv1D weights [in, out]), transformers' order."""
    D, F, V, P = cfg.d_model, cfg.d_ff, cfg.vocab_size, "transformer."
    out = {P + "wte.weight": (V, D), P + "wpe.weight": (cfg.n_ctx, D)}
    for i in range(cfg.n_layer):
        p = f"{P}h.{i}."
        out |= {
            p + "ln_1.weight": (D,), p + "ln_1.bias": (D,),
            p + "attn.c_attn.weight": (D, 3 * D), p + "attn.c_attn.bias": (3 * D,),
            p + "attn.c_proj.weight": (D, D), p + "attn.c_proj.bias": (D,),
            p + "ln_2.weight": (D,), p + "ln_2.bias": (D,),
            p + "mlp.c_fc.weight": (D, F), p + "mlp.c_fc.bias": (F,),
            p + "mlp.c_proj.weight": (F, D), p + "mlp.c_proj.bias": (D,),
        }  # fmt: skip
    out |= {P + "ln_f.weight": (D,), P + "ln_f.bias": (D,)}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (V, D)
    return out


def llama_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape (a Linear [out, in]) of Llama and Qwen2 (q/k/v biases), Qwen3
    (q/k norms), Phi-3 (fused qkv_proj and gate_up_proj) and Gemma 3 (four norms a block, q/k
    norms), transformers' order."""
    D, F, V, Dh = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.head_dim
    fused, gemma = cfg.family == "phi3", cfg.family == "gemma3"
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
    return gpt2_shapes(cfg) if cfg.family == "gpt2" else llama_shapes(cfg)


def init_gpt2(cfg: ModelConfig, rng: np.random.Generator) -> Params:
    """A new GPT-2 as transformers' GPT2PreTrainedModel._init_weights makes one: weights N(0, 0.02),
    the projections into the residual stream N(0, 0.02 / sqrt(2 L)) (GPT-2 paper, section 2.3: each
    block adds to the stream twice), biases 0, LayerNorm gains 1."""
    resid_std = 0.02 / np.sqrt(2 * cfg.n_layer)
    params = {}
    for name, shape in gpt2_shapes(cfg).items():
        if name.endswith("bias"):
            params[name] = np.zeros(shape, np.float32)
        elif ".ln_" in name:
            params[name] = np.ones(shape, np.float32)
        else:
            std = resid_std if name.endswith("c_proj.weight") else 0.02
            params[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return params
