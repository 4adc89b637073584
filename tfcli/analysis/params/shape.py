"""A shape to count: a ModelConfig, checked, and changed by the shape flags.

The accounting counts a tfcli.engine.config.ModelConfig, the same object a loaded model runs on;
presets build one, config.json gives one, and the flags give a modified one (dataclasses.replace).
Here are the checks that turn an impossible shape into a one-line error, and the rules by which a
size you do not give follows from those you do.
"""

from __future__ import annotations

from dataclasses import replace

from tfcli.engine.config import MLPS, NORMS, POSITIONS, ModelConfig
from tfcli.engine.errors import UsageError


class ShapeError(UsageError):
    """A shape no transformer can have; `hint` says how to fix it (exit 2, like a bad flag)."""


# The sizes of a shape by the names the flags and the JSON use, and the ModelConfig field of each.
SIZES = {"layers": "n_layer", "d_model": "d_model", "heads": "n_head", "head_dim": "head_dim", "kv_heads": "n_kv_head"}
SIZES |= {"d_ff": "d_ff", "vocab": "vocab_size", "context": "n_ctx"}
# What a shape is, as the JSON report and the "changed" list name it.
SHAPE_KEYS = (*SIZES, "tied", "attn_bias", "mlp_bias", "mlp", "norm", "positions")


def gqa(cfg: ModelConfig) -> bool:
    """Grouped-query attention: fewer key/value heads than query heads."""
    return cfg.n_kv_head != cfg.n_head


def norm_params(cfg: ModelConfig) -> int:
    """Parameters of one norm: LayerNorm has a scale and a shift, RMSNorm only a scale."""
    return NORMS[cfg.norm].vectors * cfg.d_model


def shape_dict(cfg: ModelConfig) -> dict:
    """The shape under the names of SHAPE_KEYS (attn_bias: any bias in attention, split into
    qkv_bias and o_bias since Qwen2 has the one without the other), with d_attn and d_kv."""
    # "layers": the older name of "blocks", kept
    d = {"blocks": cfg.n_layer} | {key: getattr(cfg, field) for key, field in SIZES.items()}
    d |= {"tied": cfg.tie_embeddings, "attn_bias": cfg.qkv_bias or cfg.o_bias, "mlp_bias": cfg.mlp_bias}
    d |= {"mlp": cfg.mlp, "norm": cfg.norm, "positions": cfg.positions, "qkv_bias": cfg.qkv_bias, "o_bias": cfg.o_bias}
    d |= {"norms_per_block": cfg.norms_per_block, "qk_norm": cfg.qk_norm}
    return d | {"d_attn": cfg.d_attn, "d_kv": cfg.d_kv}


def same_shape(a: ModelConfig, b: ModelConfig) -> bool:
    """Whether two configs have the same parameters (norm_eps, RoPE base, token ids aside)."""
    return shape_dict(a) == shape_dict(b)


def default_d_ff(d_model: int, mlp: str) -> int:
    """The MLP width a model of width D gets unless told otherwise.

    GPT-2/3: 4 D. LLaMA (Meta's llama/model.py): 2/3 of 4 D, so that three matrices cost what two did,
    rounded up to a multiple of 256 (any gated MLP).
    """
    if MLPS[mlp].matrices == 2:
        return 4 * d_model
    hidden = 2 * 4 * d_model // 3
    return 256 * -(-hidden // 256)


def check(cfg: ModelConfig) -> ModelConfig:
    """The config itself, or a ShapeError naming the first impossible value."""
    for name, field in SIZES.items():
        _positive(name, getattr(cfg, field))
    _one_of("mlp", cfg.mlp, MLPS)
    _one_of("norm", cfg.norm, NORMS)
    _one_of("positions", cfg.positions, POSITIONS)
    if cfg.n_head % cfg.n_kv_head:
        raise ShapeError(
            f"{cfg.n_head} query heads cannot be shared evenly by {cfg.n_kv_head} key/value heads",
            "the number of heads must be a multiple of the number of key/value heads",
        )
    return cfg


def modify(
    base: ModelConfig,
    *,
    layers: int | None = None,
    d_model: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    kv_heads: int | None = None,
    d_ff: int | None = None,
    vocab: int | None = None,
    context: int | None = None,
    tied: bool | None = None,
    bias: bool | None = None,
    mlp: str | None = None,
) -> ModelConfig:
    """`base` with the given values changed.

    A value not given that followed from others in `base` follows them again: head_dim = D / H,
    kv_heads = H (no GQA), d_ff = the default for D and the MLP kind. A value `base` set apart
    (a Llama's explicit head_dim, a GQA head count) is kept. `bias` sets every projection's bias.
    """
    given = {"layers": layers, "d_model": d_model, "heads": heads, "head_dim": head_dim, "kv_heads": kv_heads}
    given |= {"d_ff": d_ff, "vocab": vocab, "context": context}
    for name, value in given.items():
        if value is not None:
            _positive(name, value)
    D = base.d_model if d_model is None else d_model
    H = base.n_head if heads is None else heads
    kind = base.mlp if mlp is None else mlp
    _one_of("mlp", kind, MLPS)

    if head_dim is None:
        follows = base.n_head * base.head_dim == base.d_model
        if follows and (d_model is not None or heads is not None):
            if D % H:
                raise ShapeError(f"d_model {D:,} is not divisible by {H} heads",
                                 "choose heads that divide d_model, or give --head-dim")
            head_dim = D // H
        else:
            head_dim = base.head_dim
    if kv_heads is None:
        kv_heads = H if base.n_kv_head == base.n_head else base.n_kv_head
    if d_ff is None:
        follows = base.d_ff == default_d_ff(base.d_model, base.mlp)
        d_ff = default_d_ff(D, kind) if follows and (d_model is not None or mlp is not None) else base.d_ff
    sizes = {"n_layer": layers, "vocab_size": vocab, "n_ctx": context, "tie_embeddings": tied}
    biases = {"qkv_bias": bias, "o_bias": bias, "mlp_bias": bias}
    kept = {field: value for field, value in (sizes | biases).items() if value is not None}
    return check(replace(base, d_model=D, n_head=H, head_dim=head_dim, n_kv_head=kv_heads, d_ff=d_ff, mlp=kind, **kept))


MAX_SIZE = 10**18  # past any model's dimension; products of such sizes (FLOPs, bytes) stay finite floats


def _positive(name: str, value: object) -> None:
    from tfcli.engine.errors import shown, shown_number

    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapeError(f"{name} must be a positive whole number, not {shown(value, 40)}")
    if value > MAX_SIZE:
        raise ShapeError(f"{name} must be at most 10^18, not {shown_number(value)}",
                         "a hypothetical model is counted up to 10^18 in each size")


def _one_of(name: str, value: str, allowed: dict[str, object]) -> None:
    if value not in allowed:
        raise ShapeError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
