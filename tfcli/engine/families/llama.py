"""Llama: RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP (Touvron et al. 2023).

Hugging Face stores Linear weights as [out, in]. The name table turns each into [in, out] once,
at load, so that every matmul in the block reads `x @ w` like GPT-2's. The three attention input
projections are fused into one [D, (H+2Hkv)*Dh] matrix and the SwiGLU gate and up projections into
one [D, 2F] (as GPT-2's c_attn fuses Q, K, V): a decode step then makes 4 matrix products per layer
instead of 7, and q and k leave the fused product side by side, so one RoPE call rotates both.
The fused matrices are copies, read from the file straight into their row blocks; the others stay
zero-copy views of the mapped file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .. import ops
from ..config import ConfigReader, ModelConfig, settings_object
from ..errors import ConfigError, GGUFError, shown
# gemma3, phi3 and the store read these here
from .rope_scaling import RopeScaling, rope_frequencies, rope_settings  # noqa: F401
from ..memory import check_allocation
from ..model import LayerCall, Transformer

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint

NAME = "llama"
MODEL_TYPES = ("llama", "mistral")
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")


@dataclass(frozen=True)
class LlamaExtra:
    """What only Llama's block reads (ModelConfig.extra)."""

    scaling: RopeScaling | None = None
    window: int | None = None  # Phi-3's sliding window on every layer (sliding_window)


def config_from_hf(
    raw: dict[str, Any], *, family: str = NAME, qkv_bias: bool | None = None, o_bias: bool | None = None,
    qk_norm: bool = False,
) -> ModelConfig:
    """Llama's config.json keys. Families built on Llama's block (Qwen2, Qwen3, Phi-3) pass their own
    biases and whether queries and keys are normalised."""
    r = ConfigReader(raw)
    d_model = r.int("hidden_size")
    n_head = r.int("num_attention_heads")
    n_kv_head = r.int("num_key_value_heads", default=n_head)
    if raw.get("hidden_act", "silu") != "silu":
        raise ConfigError(
            f"config.json: hidden_act {shown(raw.get('hidden_act'))} is not supported", f"{family} models use silu"
        )
    rope_params = settings_object(raw, "rope_parameters")
    theta, scaling = rope_settings(raw, rope_params, family)
    if raw.get("head_dim") is not None:
        head_dim = r.int("head_dim")
    elif d_model % n_head == 0:
        head_dim = d_model // n_head
    else:
        raise ConfigError(
            f"config.json: hidden_size {d_model} is not divisible by num_attention_heads {n_head}",
            "set head_dim explicitly or fix the head count",
        )
    if n_head % n_kv_head:
        raise ConfigError(
            f"config.json: num_attention_heads {n_head} is not a multiple of num_key_value_heads {n_kv_head}",
            "grouped-query attention needs each key/value head shared by the same number of query heads",
        )
    if head_dim % 2:
        raise ConfigError(
            f"config.json: head_dim {head_dim} is odd; rotary embeddings need an even head size",
            "fix head_dim (or hidden_size / num_attention_heads) in config.json",
        )
    attention_bias = bool(raw.get("attention_bias", False))
    return ModelConfig(
        family=family,
        vocab_size=r.int("vocab_size"),
        n_ctx=r.int("max_position_embeddings"),
        n_layer=r.int("num_hidden_layers"),
        d_model=d_model,
        n_head=n_head,
        n_kv_head=n_kv_head,
        head_dim=head_dim,
        d_ff=r.int("intermediate_size"),
        norm_eps=r.float("rms_norm_eps", default=1e-6),
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        norm="rmsnorm",
        mlp="swiglu",
        positions="rope",
        qkv_bias=attention_bias if qkv_bias is None else qkv_bias,
        o_bias=attention_bias if o_bias is None else o_bias,
        mlp_bias=bool(raw.get("mlp_bias", False)),  # counted by `params`; refused by the engine (from_checkpoint)
        rope_theta=theta,
        qk_norm=qk_norm,
        extra=LlamaExtra(scaling),
        bos_token_id=r.opt_int("bos_token_id"),
        eos_token_ids=r.int_tuple("eos_token_id"),
    )


# `tfcli params --from`: what each stored tensor is (names after the "model." prefix).
CENSUS = (
    (r"embed_tokens\.weight", "token_embedding"),
    (r"layers\.\d+\.self_attn\.q_proj\.weight", "attn_q"),
    (r"layers\.\d+\.self_attn\.k_proj\.weight", "attn_k"),
    (r"layers\.\d+\.self_attn\.v_proj\.weight", "attn_v"),
    (r"layers\.\d+\.self_attn\.o_proj\.weight", "attn_o"),
    (r"layers\.\d+\.self_attn\.[qkvo]_proj\.bias", "attn_bias"),
    (r"layers\.\d+\.mlp\.(gate|up|down)_proj\.weight", "mlp"),
    (r"layers\.\d+\.mlp\.(gate|up|down)_proj\.bias", "mlp_bias"),
    (r"layers\.\d+\.(input_layernorm|post_attention_layernorm)\.weight", "norms"),
    (r"layers\.\d+\.self_attn\.[qk]_norm\.weight", "qk_norms"),  # Qwen3
    (r"norm\.weight", "final_norm"),
    (r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq", "buffer"),  # RoPE table some old files kept
    (r"lm_head\.weight", "unembedding"),
)


class GGUFMetadata(Protocol):
    """What a family's `settings` may read from a GGUF file (store/gguf/family.py gives it): the
    `{arch}.`-prefixed keys, checked for their type, and the tensors its table lists as settings."""

    name: str  # the file's name, to start an error message with

    def get(self, suffix: str, default: Any = None) -> Any: ...  # `{arch}.{suffix}` as stored, unchecked
    def count(self, suffix: str, default: Any = None) -> int: ...  # a positive integer; GGUFError otherwise
    # a positive finite number (float32 read as its shortest decimal)
    def number(self, suffix: str, default: Any = None) -> float: ...
    def tensor(self, name: str) -> np.ndarray | None: ...  # a settings tensor as float32, None if the file has none


@dataclass(frozen=True)
class GGUFNames:
    """How llama.cpp names and lays out a family (gguf-py/gguf/constants.py, MODEL_TENSOR), and how
    its family-specific metadata becomes config.json."""

    arch: str  # general.architecture
    names: dict[str, str]  # GGUF tensor name -> Hugging Face key; per-layer names with {i}
    config: dict[str, Any]  # config.json entries fixed for the family (architectures, model_type, ...)
    permuted_qk: bool  # llama.cpp's converter reorders Q and K rows for its RoPE layout (undone on conversion)
    # config.json entries from the file beyond the generic LLM keys (RoPE, windows, soft-capping),
    # given those generic entries; raises GGUFError on what the family cannot run
    settings: Callable[[GGUFMetadata, dict[str, Any]], dict[str, Any]]
    settings_tensors: tuple[str, ...] = ()  # tensors that are settings, read by `settings`, not weights
    norm_shift: float = 0.0  # what llama.cpp's converter added to every norm weight (undone on conversion)


def plain_rope(meta: GGUFMetadata, config: dict[str, Any]) -> dict[str, Any]:
    """The `settings` of a family whose GGUFs have plain RoPE over whole heads: nothing to add, and
    anything else (partial rotation, a scaling llama.cpp names) refused."""
    if meta.count("rope.dimension_count", config["head_dim"]) != config["head_dim"]:
        raise GGUFError(
            f"{meta.name}: RoPE on part of each head (rope.dimension_count) is not supported",
            f"tfcli converts plain {config['model_type']} models",
        )
    scaling = meta.get("rope.scaling.type", "none")
    if scaling != "none":
        raise GGUFError(
            f"{meta.name}: RoPE scaling ({shown(scaling)}) is not supported", "only plain RoPE is implemented"
        )
    return {}


def llama3_factors(inv_freq: np.ndarray, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """What each frequency [R/2] is divided by under Llama 3's scaling, as llama.cpp's converter
    writes them into `rope_freqs` (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors)."""
    wavelength = 2 * np.pi / inv_freq  # [R/2]
    smooth = (original / wavelength - low) / (high - low)  # [R/2]
    blended = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelength < original / high, 1.0, np.where(wavelength > original / low, factor, blended))  # [R/2]


def llama3_from_factors(factors: np.ndarray, inv_freq: np.ndarray) -> tuple[float, float, int] | None:
    """Llama 3's factor, high_freq_factor and original context that give these per-frequency
    divisors with low_freq_factor 1, or None. The divisors fix only original / low and original /
    high (scaling all three changes nothing), so low is taken as 1, as in every Llama 3.x. Where
    two or more frequencies are blended their smooth values (linear in 1 / wavelength) give the
    rest; with fewer, high is taken as 4 (Meta's value) and the original context fitted to them."""
    factor = float(factors.max())
    x = inv_freq / (2 * np.pi)  # [R/2] 1 / wavelength
    kept, stretched = np.isclose(factors, 1.0, rtol=1e-6), np.isclose(factors, factor, rtol=1e-6)
    middle = ~(kept | stretched)
    smooth = (1 / factors[middle] - 1 / factor) / (1 - 1 / factor)  # 0 (stretched) .. 1 (kept)
    if middle.sum() >= 2:
        slope, offset = np.polyfit(x[middle], smooth, 1)  # smooth = original·x/(high - 1) - 1/(high - 1)
        if offset >= 0 or slope <= 0:
            return None
        high, original = 1 - 1 / offset, -slope / offset
    elif middle.sum() == 1:
        high, original = 4.0, (3 * smooth[0] + 1) / x[middle][0]
    elif kept.any():  # none between: an original context above 4x the longest kept wavelength (checked below)
        high, original = 4.0, math.floor(4 / x[kept].min()) + 1
    else:  # every frequency stretched: an original context below the shortest wavelength
        high, original = 4.0, math.ceil(1 / x.max()) - 1
    high, original = float(f"{high:.6g}"), int(round(original))
    if (
        original < 1
        or high <= 1
        or not np.allclose(llama3_factors(inv_freq, factor, 1.0, high, original), factors, rtol=1e-5)
    ):
        return None
    return factor, high, original


def llama_settings(meta: GGUFMetadata, config: dict[str, Any]) -> dict[str, Any]:
    """Llama's RoPE: plain, or Llama 3.1+'s frequency scaling, which llama.cpp stores as the
    divisor of each frequency (a `rope_freqs` tensor) instead of config keys; turned back into
    the llama3 rope_parameters that give those divisors."""
    plain_rope(meta, config)
    factors = meta.tensor("rope_freqs.weight")
    if factors is None:
        return {}
    theta, head_dim = config["rope_theta"], config["head_dim"]
    inv_freq = ops.rope_frequencies(head_dim, theta).astype(np.float64)  # [Dh/2]
    if factors.shape != inv_freq.shape:
        raise GGUFError(
            f"{meta.name}: rope_freqs.weight has shape {list(factors.shape)}, not one factor for each of the "
            f"{len(inv_freq)} rotated pairs",
            "the file is corrupt",
        )
    if not np.isfinite(factors).all() or factors.min() < 1:
        raise GGUFError(f"{meta.name}: rope_freqs.weight holds factors below 1 or not finite", "the file is corrupt")
    if np.allclose(factors, 1.0, rtol=1e-6):
        return {}
    fitted = llama3_from_factors(factors.astype(np.float64), inv_freq)
    if fitted is None:
        raise GGUFError(
            f"{meta.name}: its RoPE frequency factors (rope_freqs.weight) do not follow Llama 3's scaling",
            "only Llama 3's scaling is implemented",
        )
    factor, high, original = fitted
    scaling = {
        "rope_type": "llama3", "factor": float(str(np.float32(factor))), "low_freq_factor": 1.0,
        "high_freq_factor": high, "original_max_position_embeddings": original,
    }
    return {"rope_parameters": {"rope_theta": theta, **scaling}}


GGUF = GGUFNames(
    arch="llama",
    names={
        "token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight", "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
        "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
        "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
        "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
        "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
        "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
        "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
        "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
        "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
    },
    config={
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "mlp_bias": False,
        "hidden_act": "silu",
    },
    permuted_qk=True,
    settings=llama_settings,
    settings_tensors=("rope_freqs.weight",),
)


@dataclass(frozen=True)
class LlamaLayer:
    attn_norm: np.ndarray  # [D]   input_layernorm
    w_qkv: np.ndarray  # [D, (H+2Hkv)*Dh]  q_proj, k_proj, v_proj side by side
    b_qkv: np.ndarray | None  # [(H+2Hkv)*Dh] with qkv_bias
    wo: np.ndarray  # [H*Dh, D]  o_proj (view)
    bo: np.ndarray | None  # [D] with o_bias
    mlp_norm: np.ndarray  # [D]   post_attention_layernorm
    mlp: ops.MLP  # SwiGLU: gate_proj and up_proj side by side [D, 2F], SiLU, down_proj [F, D] (view)
    q_norm: np.ndarray | None = None  # [Dh] with qk_norm (Qwen3): each query head's RMSNorm
    k_norm: np.ndarray | None = None  # [Dh] each key head's


class Rotary:
    """RoPE's cos and sin tables for one set of frequencies [R/2], computed once for the positions
    used so far (a context can be millions of positions long; a generation rarely is) and grown by
    doubling."""

    def __init__(self, inv_freq: np.ndarray, n_ctx: int, scale: float = 1.0):
        self.inv_freq, self.n_ctx, self.scale = inv_freq, n_ctx, scale  # [R/2]; scale: longrope's attention factor
        empty = np.empty((0, len(inv_freq)), dtype=np.float32)
        self.tables = (empty, empty)  # [P, R/2] each

    def __call__(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin for each of the positions [T]: [T, R/2] each."""
        cos, sin = self.tables  # read once: the parts of a prompt pass call this from several threads
        first, last = int(positions[0]), int(positions[-1])
        # a prompt or a decode step; not a batch step, whose rows may stand at different positions
        # (engine/slots.py): [3, 9, 5] has its first and last two apart without being consecutive
        consecutive = last - first == len(positions) - 1 and (
            len(positions) <= 2 or bool((np.diff(positions) == 1).all())
        )
        end = last + 1 if consecutive else int(positions.max()) + 1
        if end > len(cos):
            n = min(self.n_ctx, max(end, 2 * len(cos), 256))
            check_allocation(16 * n * len(self.inv_freq), f"RoPE tables for {n:,} positions")
            cos, sin = ops.rope_tables(n, self.inv_freq)  # [n, R/2] each
            if self.scale != 1:
                cos, sin = cos * np.float32(self.scale), sin * np.float32(self.scale)
            self.tables = cos, sin
        if consecutive:  # views, no gather
            return cos[first:end], sin[first:end]
        return cos[positions], sin[positions]


class Llama(Transformer):
    tables = ("rope",)

    def __init__(self, config: ModelConfig, embed_tokens, layers: list[LlamaLayer], norm, lm_head):
        self.config = config
        self.token_embedding = embed_tokens  # [V, D]
        self.layers = layers
        self.norm = norm  # [D]
        self.unembedding = lm_head.T  # [D, V]; a view of embed_tokens when tied
        rotary_dim = config.rotary_dim or config.head_dim  # R
        scaling = config.extra.scaling
        self.rope = Rotary(
            rope_frequencies(rotary_dim, config.rope_theta, scaling), config.n_ctx,
            scaling.attention_factor if scaling else 1.0,
        )
        self.window = config.extra.window

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> Llama:
        """The name table: Hugging Face LlamaForCausalLM keys, each Linear transposed to [in, out]."""
        cfg, t = ckpt.config, ckpt.tensors
        if cfg.mlp_bias:
            raise ConfigError(f"config.json: mlp_bias is not supported for {cfg.family} models")
        D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
        q_dim, kv_dim = cfg.d_attn, cfg.d_kv

        def layer(i: int) -> LlamaLayer:
            p = f"model.layers.{i}."
            a = p + "self_attn."
            qkv = [(a + "q_proj.weight", q_dim), (a + "k_proj.weight", kv_dim), (a + "v_proj.weight", kv_dim)]
            return LlamaLayer(
                attn_norm=t.get(p + "input_layernorm.weight", (D,)),
                w_qkv=t.fused(qkv, D),
                b_qkv=np.concatenate(
                    [t.get(a + f"{n}_proj.bias", (k,)) for n, k in zip("qkv", (q_dim, kv_dim, kv_dim))]
                )
                if cfg.qkv_bias
                else None,
                wo=t.get(a + "o_proj.weight", (D, q_dim)).T,  # [out, in] -> [in, out] view
                bo=t.get(a + "o_proj.bias", (D,)) if cfg.o_bias else None,
                mlp_norm=t.get(p + "post_attention_layernorm.weight", (D,)),
                mlp=ops.MLP(
                    w_in=t.fused([(p + "mlp.gate_proj.weight", F), (p + "mlp.up_proj.weight", F)], D), act=ops.silu,
                    gated=True, w_out=t.get(p + "mlp.down_proj.weight", (D, F)).T,
                ),
                q_norm=t.get(a + "q_norm.weight", (cfg.head_dim,)) if cfg.qk_norm else None,
                k_norm=t.get(a + "k_norm.weight", (cfg.head_dim,)) if cfg.qk_norm else None,
            )

        embed = t.get("model.embed_tokens.weight", (V, D))
        if cfg.tie_embeddings:
            lm_head = embed
            t.ignore("lm_head.weight")  # a copy of the embedding some savers write out; not read
        else:
            lm_head = t.get("lm_head.weight", (V, D))
        # non-persistent buffers some converters save
        t.ignore(*(name for name in t.names if name.endswith("rotary_emb.inv_freq")))
        return cls(cfg, embed, [layer(i) for i in range(cfg.n_layer)], t.get("model.norm.weight", (D,)), lm_head)

    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self.token_embedding[tokens]  # [T, D]; positions enter through RoPE, not here

    def attn_norm(self, x: np.ndarray, layer: LlamaLayer) -> np.ndarray:
        return ops.rms_norm(x, layer.attn_norm, self.config.norm_eps)  # [T, D]

    def attention(self, h: np.ndarray, layer: LlamaLayer, at: LayerCall) -> np.ndarray:
        """Grouped-query self-attention with rotary positions: [T, D] -> [T, D]."""
        cfg = self.config
        t_len = h.shape[0]
        H, Hkv = cfg.n_head, cfg.n_kv_head
        qkv = at.linear(h, layer.w_qkv, layer.b_qkv)  # [T, D] @ [D, (H+2Hkv)*Dh] -> [T, (H+2Hkv)*Dh]
        qkv = qkv.reshape(t_len, H + 2 * Hkv, cfg.head_dim)  # [T, H+2Hkv, Dh]
        qk = qkv[:, : H + Hkv]  # [T, H+Hkv, Dh]
        if layer.q_norm is not None:  # Qwen3: each head's queries and keys normalised before they rotate
            qk = np.concatenate(
                [
                    ops.rms_norm(qk[:, :H], layer.q_norm, cfg.norm_eps),
                    ops.rms_norm(qk[:, H:], layer.k_norm, cfg.norm_eps),
                ],
                axis=1,
            )
        cos, sin = self.rope(at.positions)  # [T, R/2] each
        qk = ops.apply_rope(qk, cos, sin)  # [T, H+Hkv, Dh]: queries and keys rotate together
        z = self.attend(qk[:, :H], qk[:, H:], qkv[:, H + Hkv :], at, window=self.window)  # [T, H, Dh]
        return at.linear(z.reshape(t_len, cfg.d_attn), layer.wo, layer.bo)  # [T, H*Dh] @ [H*Dh, D] -> [T, D]

    def mlp_norm(self, x: np.ndarray, layer: LlamaLayer) -> np.ndarray:
        return ops.rms_norm(x, layer.mlp_norm, self.config.norm_eps)  # [T, D]

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        return ops.rms_norm(x, self.norm, self.config.norm_eps)  # [T, D]

    def output_projection(self, layer: LlamaLayer) -> tuple[np.ndarray, np.ndarray | None]:
        return layer.wo, layer.bo  # W_O [H*Dh, D] (o_proj), b_O [D] or None

    def frozen_final_norm(self, x: np.ndarray):
        """The final RMSNorm at the residual x [D] with its scale held fixed, as a linear map of a
        part c [.., D] of x, and the constant it adds (none): final_norm(x) = map(x)."""
        rms = np.sqrt(np.square(x).mean() + self.config.norm_eps)
        return (lambda c: c / rms * self.norm), None


MODEL = Llama
