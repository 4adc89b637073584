"""GPT-2: learned positions, pre-LayerNorm blocks, GELU MLP, tied unembedding (Radford et al. 2019).

Weights keep the Hugging Face GPT-2 names and its Conv1D orientation [in, out], so `x @ w` needs
no transpose (transformers' modeling_gpt2.py for the layout). GPT-3 has the same block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import ops
from ..config import ConfigReader, ModelConfig
from ..errors import ConfigError, shown
from ..model import LayerCall, Transformer

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint

NAME = "gpt2"
MODEL_TYPES = ("gpt2",)
ARCHITECTURES = ("GPT2LMHeadModel", "GPT2Model")
GGUF = None  # GPT-2 GGUFs are not converted


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    r = ConfigReader(raw)
    d_model, n_head = r.int("n_embd"), r.int("n_head")
    if raw.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
        raise ConfigError(
            f"config.json: activation_function {shown(raw.get('activation_function'))} is not supported",
            "GPT-2 models use gelu_new (the tanh form of GELU)",
        )
    if raw.get("scale_attn_by_inverse_layer_idx") or raw.get("scale_attn_weights") is False:
        raise ConfigError(
            "config.json: non-standard GPT-2 attention scaling is not supported",
            "tfcli runs GPT-2 with scale_attn_weights true and scale_attn_by_inverse_layer_idx false",
        )
    if d_model % n_head:
        raise ConfigError(
            f"config.json: n_embd {d_model} is not divisible by n_head {n_head}",
            "fix n_embd or n_head so that each head gets n_embd / n_head dimensions",
        )
    return ModelConfig(
        family=NAME,
        vocab_size=r.int("vocab_size"),
        n_ctx=r.int("n_positions", "n_ctx"),
        n_layer=r.int("n_layer"),
        d_model=d_model,
        n_head=n_head,
        n_kv_head=n_head,
        head_dim=d_model // n_head,
        d_ff=4 * d_model if raw.get("n_inner") is None else r.int("n_inner"),
        norm_eps=r.float("layer_norm_epsilon", default=1e-5),
        tie_embeddings=bool(raw.get("tie_word_embeddings", True)),
        norm="layernorm",
        mlp="gelu",
        positions="learned",
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        bos_token_id=r.opt_int("bos_token_id"),
        eos_token_ids=r.int_tuple("eos_token_id"),
    )


# `tfcli params --from`: what each stored tensor is (names after the optional "transformer." prefix).
CENSUS = (
    (r"wte\.weight", "token_embedding"),
    (r"wpe\.weight", "position_embedding"),
    (r"h\.\d+\.attn\.c_attn\.weight", "qkv"),  # Q, K and V side by side, [D, 3D]
    (r"h\.\d+\.attn\.c_proj\.weight", "attn_o"),
    (r"h\.\d+\.attn\.c_(attn|proj)\.bias", "attn_bias"),
    (r"h\.\d+\.mlp\.c_(fc|proj)\.weight", "mlp"),
    (r"h\.\d+\.mlp\.c_(fc|proj)\.bias", "mlp_bias"),
    (r"h\.\d+\.ln_[12]\.(weight|bias)", "norms"),
    (r"ln_f\.(weight|bias)", "final_norm"),
    (r"h\.\d+\.attn\.(bias|masked_bias)", "buffer"),  # the causal mask old checkpoints saved: a constant
    (r"lm_head\.weight", "unembedding"),
)
# Buffers that old GPT-2 checkpoints saved alongside the weights (the causal mask); not parameters.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")


@dataclass(frozen=True)
class GPT2Layer:
    ln_1_g: np.ndarray  # [D]
    ln_1_b: np.ndarray  # [D]
    c_attn_w: np.ndarray  # [D, 3D]  Q, K, V side by side
    c_attn_b: np.ndarray  # [3D]
    c_proj_w: np.ndarray  # [D, D]  attention output
    c_proj_b: np.ndarray  # [D]
    ln_2_g: np.ndarray  # [D]
    ln_2_b: np.ndarray  # [D]
    mlp: ops.MLP  # c_fc [D, F] + bias, GELU, c_proj [F, D] + bias


class GPT2(Transformer):
    def __init__(self, config: ModelConfig, wte, wpe, layers: list[GPT2Layer], ln_f_g, ln_f_b, lm_head):
        self.config = config
        self.token_embedding = wte  # [V, D]
        self.wpe = wpe  # [n_ctx, D] learned position embeddings
        self.layers = layers
        self.ln_f_g = ln_f_g  # [D]
        self.ln_f_b = ln_f_b  # [D]
        self.unembedding = lm_head.T  # [D, V] view; the same memory as wte when tied

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> GPT2:
        """The name table: Hugging Face GPT-2 keys, with or without the 'transformer.' prefix.
        Conv1D weights are already [in, out]: nothing is transposed."""
        cfg, t = ckpt.config, ckpt.tensors
        p = "transformer." if "transformer.wte.weight" in t else ""
        D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size

        def layer(i: int) -> GPT2Layer:
            h = f"{p}h.{i}."
            return GPT2Layer(
                ln_1_g=t.get(h + "ln_1.weight", (D,)),
                ln_1_b=t.get(h + "ln_1.bias", (D,)),
                c_attn_w=t.get(h + "attn.c_attn.weight", (D, 3 * D)),
                c_attn_b=t.get(h + "attn.c_attn.bias", (3 * D,)),
                c_proj_w=t.get(h + "attn.c_proj.weight", (D, D)),
                c_proj_b=t.get(h + "attn.c_proj.bias", (D,)),
                ln_2_g=t.get(h + "ln_2.weight", (D,)),
                ln_2_b=t.get(h + "ln_2.bias", (D,)),
                mlp=ops.MLP(
                    w_in=t.get(h + "mlp.c_fc.weight", (D, F)),
                    b_in=t.get(h + "mlp.c_fc.bias", (F,)),
                    act=ops.gelu,  # the tanh approximation GPT-2 was trained with
                    w_out=t.get(h + "mlp.c_proj.weight", (F, D)),
                    b_out=t.get(h + "mlp.c_proj.bias", (D,)),
                ),
            )

        wte = t.get(p + "wte.weight", (V, D))
        if cfg.tie_embeddings:
            lm_head = wte
            t.ignore("lm_head.weight")  # a copy of wte that some savers write out; not read
        else:
            lm_head = t.get("lm_head.weight", (V, D))
        t.ignore(*(name for name in t.names if name.endswith(IGNORED_SUFFIXES)))
        return cls(
            cfg,
            wte=wte,
            wpe=t.get(p + "wpe.weight", (cfg.n_ctx, D)),
            layers=[layer(i) for i in range(cfg.n_layer)],
            ln_f_g=t.get(p + "ln_f.weight", (D,)),
            ln_f_b=t.get(p + "ln_f.bias", (D,)),
            lm_head=lm_head,
        )

    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self.token_embedding[tokens] + self.wpe[positions]  # [T, D] + [T, D]

    def attn_norm(self, x: np.ndarray, layer: GPT2Layer) -> np.ndarray:
        return ops.layer_norm(x, layer.ln_1_g, layer.ln_1_b, self.config.norm_eps)  # [T, D]

    def attention(self, h: np.ndarray, layer: GPT2Layer, at: LayerCall) -> np.ndarray:
        """Multi-head self-attention: [T, D] -> [T, D]."""
        cfg = self.config
        t_len = h.shape[0]
        qkv = at.linear(h, layer.c_attn_w, layer.c_attn_b)  # [T, D] @ [D, 3D] -> [T, 3D]
        q, k, v = (a.reshape(t_len, cfg.n_head, cfg.head_dim) for a in np.split(qkv, 3, axis=1))  # [T, H, Dh] each
        z = self.attend(q, k, v, at)  # [T, H, Dh]
        return at.linear(z.reshape(t_len, cfg.d_attn), layer.c_proj_w, layer.c_proj_b)  # [T, D] @ [D, D] -> [T, D]

    def mlp_norm(self, x: np.ndarray, layer: GPT2Layer) -> np.ndarray:
        return ops.layer_norm(x, layer.ln_2_g, layer.ln_2_b, self.config.norm_eps)  # [T, D]

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        return ops.layer_norm(x, self.ln_f_g, self.ln_f_b, self.config.norm_eps)  # [T, D]

    def output_projection(self, layer: GPT2Layer) -> tuple[np.ndarray, np.ndarray | None]:
        return layer.c_proj_w, layer.c_proj_b  # W_O [H*Dh, D], b_O [D]

    def frozen_final_norm(self, x: np.ndarray):
        """The final LayerNorm at the residual x [D] with its scale held fixed, as a linear map of a
        part c [.., D] of x, and the constant the norm adds (its bias): final_norm(x) = map(x) + bias."""
        centered = x - x.mean()
        std = np.sqrt(np.square(centered).mean() + self.config.norm_eps)
        return (lambda c: (c - c.mean(axis=-1, keepdims=True)) / std * self.ln_f_g), self.ln_f_b


MODEL = GPT2
