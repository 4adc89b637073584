"""Gemma 3 (text): Llama's kind of block with Gemma's habits (Gemma Team 2025; transformers'
modeling_gemma3.py):

- the token embeddings are multiplied by √D before the first block;
- every RMSNorm scales by (1 + w), not w (its weights start at 0), and there are four per block:
  before and after the attention, before and after the MLP; the norms after are applied to what
  the step adds, so `attn_out` and `mlp_out` are the normed outputs;
- queries and keys get a (1 + w) RMSNorm per head before RoPE, and are scaled by
  query_pre_attn_scalar^-½ instead of Dh^-½;
- a GeGLU MLP: the tanh GELU of the gate times the up projection;
- the layers `layer_types` marks "sliding_attention" attend only to the last `sliding_window`
  positions and rotate with their own RoPE base (10,000); the others see everything, with the
  main base (1,000,000) and its scaling;
- tied embeddings (an untied lm_head.weight is read too); final logits soft-capped where a config
  sets final_logit_softcapping (Gemma 2 style). attn_logit_softcapping is read but not applied, as transformers' Gemma 3
  does not apply
  it (its attention never passes it on; released Gemma 3 configs set it to null).

The KV cache of a sliding layer holds about its window, not every position (engine/kvcache.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import ops
from ..config import ConfigReader, ModelConfig, positive_float, settings_object
from ..errors import ConfigError, GGUFError, shown
from ..model import LayerCall, Transformer
from . import llama
from .llama import RopeScaling, Rotary, rope_frequencies, rope_settings

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from ..executor import Plain

NAME = "gemma3"
MODEL_TYPES = ("gemma3_text",)
ARCHITECTURES = ("Gemma3ForCausalLM",)
LAYER_TYPES = ("sliding_attention", "full_attention")


@dataclass(frozen=True)
class GemmaSettings:
    """What only Gemma's block reads (ModelConfig.extra)."""

    windows: tuple[int | None, ...]  # per layer: the sliding window, or None for global attention
    local_theta: float  # RoPE base of the sliding layers (rope_local_base_freq)
    scaling: RopeScaling | None  # RoPE scaling of the global layers
    query_scale: float  # query_pre_attn_scalar^-1/2, the scores' scale
    logit_softcap: float | None  # final_logit_softcapping


def _softcap(raw: dict[str, Any], key: str) -> float | None:
    return None if raw.get(key) is None else positive_float(raw[key], key)


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    r = ConfigReader(raw)
    d_model, n_head = r.int("hidden_size"), r.int("num_attention_heads")
    n_kv_head, n_layer = r.int("num_key_value_heads", default=n_head), r.int("num_hidden_layers")
    head_dim = r.int("head_dim", default=256)
    _softcap(raw, "attn_logit_softcapping")  # checked, not applied (see above)
    act = raw.get("hidden_activation", raw.get("hidden_act", "gelu_pytorch_tanh"))
    if act != "gelu_pytorch_tanh":
        raise ConfigError(
            f"config.json: hidden_activation {shown(act)} is not supported", "Gemma 3 models use gelu_pytorch_tanh"
        )
    if raw.get("use_bidirectional_attention"):
        raise ConfigError(
            "config.json: bidirectional attention is not supported",
            "tfcli runs causal language models; set use_bidirectional_attention to false",
        )
    if n_head % n_kv_head:
        raise ConfigError(
            f"config.json: num_attention_heads {n_head} is not a multiple of num_key_value_heads {n_kv_head}",
            "grouped-query attention needs each key/value head shared by the same number of query heads",
        )
    if head_dim % 2:
        raise ConfigError(
            f"config.json: head_dim {head_dim} is odd; rotary embeddings need an even head size",
            "fix head_dim in config.json",
        )
    window = r.int("sliding_window", default=4096)
    types = raw.get("layer_types")
    if types is None:  # older files: every `sliding_window_pattern`-th layer is global
        pattern = r.int("sliding_window_pattern", default=6)
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layer)]
    if not isinstance(types, list) or len(types) != n_layer:
        size = f"{len(types)} entries" if isinstance(types, list) else shown(types)
        raise ConfigError(
            f"config.json: layer_types must list one type for each of the {n_layer} layers, not {size}",
            "fix layer_types in config.json",
        )
    for t in types:
        if t not in LAYER_TYPES:
            raise ConfigError(
                f"config.json: layer type {shown(t)} is not supported", f"layer_types holds {' or '.join(LAYER_TYPES)}"
            )
    # transformers 5: rope_parameters by layer type; older files: rope_theta, rope_scaling and rope_local_base_freq.
    params = settings_object(raw, "rope_parameters")
    if "full_attention" in params or "sliding_attention" in params:
        theta, scaling = rope_settings({}, settings_object(params, "full_attention", "rope_parameters."), NAME)
        local_theta, local_scaling = rope_settings(
            {}, settings_object(params, "sliding_attention", "rope_parameters."), NAME
        )
    else:
        theta, scaling = rope_settings(raw, params, NAME)
        local_theta = positive_float(raw.get("rope_local_base_freq", 10000.0), "rope_local_base_freq")
        local_scaling = None
    if local_scaling is not None:
        raise ConfigError(
            "config.json: RoPE scaling on the sliding layers is not supported",
            "Gemma 3 scales only the global layers' RoPE",
        )
    settings = GemmaSettings(
        windows=tuple(window if t == "sliding_attention" else None for t in types), local_theta=local_theta,
        scaling=scaling,
        query_scale=positive_float(raw.get("query_pre_attn_scalar", head_dim), "query_pre_attn_scalar") ** -0.5,
        logit_softcap=_softcap(raw, "final_logit_softcapping"),
    )
    attention_bias = bool(raw.get("attention_bias", False))
    return ModelConfig(
        family=NAME, vocab_size=r.int("vocab_size"), n_ctx=r.int("max_position_embeddings"), n_layer=n_layer,
        d_model=d_model, n_head=n_head, n_kv_head=n_kv_head, head_dim=head_dim, d_ff=r.int("intermediate_size"),
        norm_eps=r.float("rms_norm_eps", default=1e-6), tie_embeddings=bool(raw.get("tie_word_embeddings", True)),
        norm="rmsnorm1p", mlp="geglu", positions="rope", qkv_bias=attention_bias, o_bias=attention_bias, mlp_bias=False,
        rope_theta=theta, qk_norm=True, norms_per_block=4, windows=settings.windows if any(settings.windows) else (),
        extra=settings, bos_token_id=r.opt_int("bos_token_id"), eos_token_ids=r.int_tuple("eos_token_id"),
    )


# `tfcli params --from`: what each stored tensor is (names after the "model." prefix).
CENSUS = (
    *llama.CENSUS,
    (r"layers\.\d+\.(pre|post)_feedforward_layernorm\.weight", "norms"),
)


def gguf_settings(meta: llama.GGUFMetadata, config: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's own entries from a llama.cpp GGUF (src/llama-model.cpp, LLM_ARCH_GEMMA3): which
    layers slide - every sliding_window_pattern-th (6 unless the file says) is global, or a list of
    one flag per layer, true for a sliding one - over a window of attention.sliding_window (none
    when the file has no window: every layer global); RoPE base 10,000 on the sliding layers
    (rope.freq_base_swa where a file has it); the global layers' linear scaling; the queries scaled
    by key_length^-1/2, except in the 62-layer 27B, where llama.cpp (after gemma_pytorch) takes
    hidden_size / heads; final logits soft-capped where the file says."""
    name, n_layer, head_dim = meta.name, config["num_hidden_layers"], config["head_dim"]
    if meta.count("rope.dimension_count", head_dim) != head_dim:
        raise GGUFError(
            f"{name}: RoPE on part of each head (rope.dimension_count) is not supported", "Gemma 3 rotates whole heads"
        )
    window = meta.get("attention.sliding_window", 0)
    pattern = meta.get("attention.sliding_window_pattern", 6)
    if not window:
        sliding = [False] * n_layer
    elif isinstance(pattern, list):
        # GGUF bools read as 0 and 1
        if len(pattern) != n_layer or not all(isinstance(p, int) and p in (0, 1) for p in pattern):
            raise GGUFError(
                f"{name}: gemma3.attention.sliding_window_pattern must hold one true/false for each of the {n_layer} "
                "layers",
                "the file is corrupt",
            )
        sliding = [bool(p) for p in pattern]
    else:
        period = meta.count("attention.sliding_window_pattern", 6)
        sliding = [i % period < period - 1 for i in range(n_layer)]  # llama_hparams::set_swa_pattern
    full = {"rope_type": "default", "rope_theta": config["rope_theta"]}
    scaling = meta.get("rope.scaling.type", "none")
    if scaling == "linear":
        full = {"rope_type": "linear", "rope_theta": config["rope_theta"], "factor": meta.number("rope.scaling.factor")}
    elif scaling != "none":
        raise GGUFError(
            f"{name}: RoPE scaling ({shown(scaling)}) is not supported",
            "Gemma 3 scales its global layers' RoPE linearly",
        )
    cap = meta.get("final_logit_softcapping")
    return {
        "sliding_window": meta.count("attention.sliding_window") if window else 4096,  # unused when no layer slides
        "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
        "rope_parameters": {
            "full_attention": full,
            "sliding_attention": {"rope_type": "default", "rope_theta": meta.number("rope.freq_base_swa", 10000.0)},
        },
        "query_pre_attn_scalar": config["hidden_size"] // config["num_attention_heads"] if n_layer == 62 else head_dim,
        "final_logit_softcapping": None if cap is None else meta.number("final_logit_softcapping"),
    }


# llama.cpp's names (gguf-py MODEL_TENSORS[GEMMA3]); no output.weight: Gemma 3 ties its embeddings.
GGUF = llama.GGUFNames(
    arch="gemma3",
    names={
        "token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
        "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
        "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
        "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
        "blk.{i}.attn_q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",
        "blk.{i}.attn_k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
        "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
        "blk.{i}.post_attention_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
        "blk.{i}.ffn_norm.weight": "model.layers.{i}.pre_feedforward_layernorm.weight",
        "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
        "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
        "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
        "blk.{i}.post_ffw_norm.weight": "model.layers.{i}.post_feedforward_layernorm.weight",
    },
    config={
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh",
        "attention_bias": False,
    },
    # llama.cpp runs Gemma 3 with NEOX RoPE (halves, as Hugging Face): rows as they are.
    permuted_qk=False,
    settings=gguf_settings,
    # convert_hf_to_gguf.py's Gemma3Model.norm_shift: Gemma3RMSNorm's (1 + w), stored as 1 + w.
    norm_shift=1.0,
)


@dataclass(frozen=True)
class GemmaLayer:
    attn_norm: np.ndarray  # [D]   1 + input_layernorm (the (1 + w) of Gemma's RMSNorm, added once at load)
    w_qkv: np.ndarray  # [D, (H+2Hkv)*Dh]  q_proj, k_proj, v_proj side by side
    b_qkv: np.ndarray | None  # [(H+2Hkv)*Dh] with attention_bias
    q_norm: np.ndarray  # [Dh]  1 + q_norm
    k_norm: np.ndarray  # [Dh]  1 + k_norm
    wo: np.ndarray  # [H*Dh, D]  o_proj (view)
    bo: np.ndarray | None  # [D] with attention_bias
    post_attn_norm: np.ndarray  # [D]   1 + post_attention_layernorm
    mlp_norm: np.ndarray  # [D]   1 + pre_feedforward_layernorm
    mlp: ops.MLP  # GeGLU: gate_proj and up_proj side by side [D, 2F], tanh GELU, down_proj [F, D] (view)
    post_mlp_norm: np.ndarray  # [D]   1 + post_feedforward_layernorm
    window: int | None  # a sliding layer's window, None for global attention


class Gemma3(Transformer):
    tables = ("rope_global", "rope_local")

    def __init__(self, config: ModelConfig, embed_tokens, layers: list[GemmaLayer], norm, lm_head):
        self.config = config
        g: GemmaSettings = config.extra
        self.token_embedding = embed_tokens  # [V, D]
        self.unembedding = lm_head.T  # [D, V]; a view of embed_tokens when tied, as every published Gemma 3 is
        self.layers = layers
        self.norm = norm  # [D]  1 + norm
        self.embed_scale = np.float32(np.sqrt(config.d_model))  # √D, in float32 as transformers rounds it
        self.rope_global = Rotary(rope_frequencies(config.head_dim, config.rope_theta, g.scaling), config.n_ctx)
        self.rope_local = Rotary(rope_frequencies(config.head_dim, g.local_theta, None), config.n_ctx)
        # Our attention divides the scores by √Dh; Gemma divides them by √query_pre_attn_scalar.
        self.q_factor = np.float32(g.query_scale * np.sqrt(config.head_dim))

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> Gemma3:
        """The name table: Hugging Face Gemma3ForCausalLM keys, each Linear transposed to [in, out];
        every norm weight w stored as the 1 + w it scales by."""
        cfg, t = ckpt.config, ckpt.tensors
        D, F, V, Dh = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.head_dim
        q_dim, kv_dim = cfg.d_attn, cfg.d_kv
        windows = cfg.extra.windows

        def scale(name: str, n: int) -> np.ndarray:
            return 1.0 + t.get(name, (n,))  # [n]

        def layer(i: int) -> GemmaLayer:
            p = f"model.layers.{i}."
            a = p + "self_attn."
            qkv = [(a + "q_proj.weight", q_dim), (a + "k_proj.weight", kv_dim), (a + "v_proj.weight", kv_dim)]
            return GemmaLayer(
                attn_norm=scale(p + "input_layernorm.weight", D),
                w_qkv=t.fused(qkv, D),
                b_qkv=np.concatenate(
                    [t.get(a + f"{n}_proj.bias", (k,)) for n, k in zip("qkv", (q_dim, kv_dim, kv_dim))]
                )
                if cfg.qkv_bias
                else None,
                q_norm=scale(a + "q_norm.weight", Dh),
                k_norm=scale(a + "k_norm.weight", Dh),
                wo=t.get(a + "o_proj.weight", (D, q_dim)).T,  # [out, in] -> [in, out] view
                bo=t.get(a + "o_proj.bias", (D,)) if cfg.o_bias else None,
                post_attn_norm=scale(p + "post_attention_layernorm.weight", D),
                mlp_norm=scale(p + "pre_feedforward_layernorm.weight", D),
                mlp=ops.MLP(
                    w_in=t.fused([(p + "mlp.gate_proj.weight", F), (p + "mlp.up_proj.weight", F)], D),
                    act=ops.gelu,  # gelu_pytorch_tanh: the tanh form, as GPT-2's
                    gated=True,
                    w_out=t.get(p + "mlp.down_proj.weight", (D, F)).T,
                ),
                post_mlp_norm=scale(p + "post_feedforward_layernorm.weight", D),
                window=windows[i],
            )

        embed = t.get("model.embed_tokens.weight", (V, D))
        if cfg.tie_embeddings:
            lm_head = embed
            t.ignore("lm_head.weight")  # a copy of the embedding some savers write out; not read
        else:
            lm_head = t.get("lm_head.weight", (V, D))
        return cls(cfg, embed, [layer(i) for i in range(cfg.n_layer)], scale("model.norm.weight", D), lm_head)

    def rms(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return ops.rms_norm(x, scale, self.config.norm_eps)  # [.., n]: x / rms(x) · (1 + w)

    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self.token_embedding[tokens] * self.embed_scale  # [T, D], scaled by √D; positions enter through RoPE

    def attn_norm(self, x: np.ndarray, layer: GemmaLayer) -> np.ndarray:
        return self.rms(x, layer.attn_norm)  # [T, D]

    def attention(self, h: np.ndarray, layer: GemmaLayer, at: LayerCall) -> np.ndarray:
        """Grouped-query attention with q/k norms and RoPE, over a sliding window on the sliding
        layers; its output normed (post_attention_layernorm) before it joins the residual stream
        (site attn_out is that normed output): [T, D] -> [T, D]."""
        cfg = self.config
        t_len = h.shape[0]
        H, Hkv = cfg.n_head, cfg.n_kv_head
        qkv = at.linear(h, layer.w_qkv, layer.b_qkv)  # [T, D] @ [D, (H+2Hkv)*Dh] -> [T, (H+2Hkv)*Dh]
        qkv = qkv.reshape(t_len, H + 2 * Hkv, cfg.head_dim)  # [T, H+2Hkv, Dh]
        q = self.rms(qkv[:, :H], layer.q_norm)  # [T, H, Dh], each head normed
        k = self.rms(qkv[:, H : H + Hkv], layer.k_norm)  # [T, Hkv, Dh]
        if self.q_factor != 1:
            q *= self.q_factor  # [T, H, Dh]: scores scaled by query_pre_attn_scalar^-1/2
        cos, sin = (self.rope_global if layer.window is None else self.rope_local)(at.positions)  # [T, Dh/2] each
        qk = ops.apply_rope(np.concatenate([q, k], axis=1), cos, sin)  # [T, H+Hkv, Dh]
        z = self.attend(qk[:, :H], qk[:, H:], qkv[:, H + Hkv :], at, window=layer.window)  # [T, H, Dh]
        o = at.linear(z.reshape(t_len, cfg.d_attn), layer.wo, layer.bo)  # [T, H*Dh] @ [H*Dh, D] -> [T, D]
        return self.rms(o, layer.post_attn_norm)  # [T, D]

    def mlp_norm(self, x: np.ndarray, layer: GemmaLayer) -> np.ndarray:
        return self.rms(x, layer.mlp_norm)  # [T, D]  pre_feedforward_layernorm

    def mlp(self, h: np.ndarray, layer: GemmaLayer, at: LayerCall) -> np.ndarray:
        """The GeGLU MLP, its output normed (post_feedforward_layernorm) before it joins the
        residual stream (site mlp_out is that normed output): [T, D] -> [T, D]."""
        return self.rms(at.mlp(h, layer.mlp), layer.post_mlp_norm)  # [T, D]

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        return self.rms(x, self.norm)  # [T, D]

    def logits(self, h: np.ndarray, run: Plain) -> np.ndarray:
        return self._cap(run.linear(h, self.unembedding))  # [T, D] @ [D, V] -> [T, V]

    def _cap(self, logits: np.ndarray) -> np.ndarray:
        cap = self.config.extra.logit_softcap
        # [T, V] within (-cap, cap)
        return logits if cap is None else np.float32(cap) * np.tanh(logits / np.float32(cap))

    def output_projection(self, layer: GemmaLayer):
        return layer.wo, layer.bo  # W_O [H*Dh, D] (o_proj), b_O [D] or None

    def frozen_attn_out(self, layer: GemmaLayer, o: np.ndarray):
        """The post-attention (1 + w) RMSNorm at the attention output o [D] with its scale held
        fixed: a linear map of a part c [.., D] of o (one head's share), as the final norm is frozen."""
        rms = np.sqrt(np.square(o).mean() + self.config.norm_eps)
        return lambda c: c / rms * layer.post_attn_norm

    def frozen_final_norm(self, x: np.ndarray):
        """The final (1 + w) RMSNorm at the residual x [D] with its scale held fixed, as a linear
        map of a part c [.., D] of x, and the constant it adds (none)."""
        if self.config.extra.logit_softcap is not None:
            raise ConfigError(
                "direct logit attribution is not defined with soft-capped logits",
                "the tanh cap on the final logits is not linear; released Gemma 3 configs set final_logit_softcapping "
                "to null",
            )
        rms = np.sqrt(np.square(x).mean() + self.config.norm_eps)
        return (lambda c: c / rms * self.norm), None


MODEL = Gemma3
