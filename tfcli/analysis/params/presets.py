"""Shapes of published models, with the parameter figure their authors quoted.

GPT-3: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1. Every row has
context 2048 and the GPT-2 vocabulary of 50,257, learned positions, LayerNorm, biases, a GELU MLP
of 4 x d_model, and the unembedding tied to the embedding (as in GPT-2, which the paper follows).
GPT-2: the config.json files of openai-community/gpt2{,-medium,-large,-xl} (context 1024).
SmolLM2-135M: HuggingFaceTB/SmolLM2-135M config.json.
Qwen3-0.6B, Llama-3.2-1B, Gemma-3-270M, Phi-4-mini: the config.json of Qwen/Qwen3-0.6B,
meta-llama/Llama-3.2-1B, google/gemma-3-270m and microsoft/Phi-4-mini-instruct; the quoted figure
from each model card. A preset is a shape to count: the RoPE scaling, windows and other settings
that do not change a parameter count are left out (ModelConfig.extra is None).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from tfcli.engine.config import ModelConfig

from .shape import ShapeError, same_shape


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    config: ModelConfig  # the shape, as the engine would describe the model
    quoted: str  # the figure the authors printed, e.g. "1.3B"
    source: str  # where `quoted` and the shape come from
    note: str = ""  # where the shape departs from what was printed, and why
    note_zh: str = ""  # the note in Chinese (params --lang zh)


def _gpt(layers: int, d_model: int, heads: int, context: int) -> ModelConfig:
    """GPT-2's block (GPT-3 keeps it): LayerNorm, learned positions, biases, a GELU MLP of 4 D, tied."""
    return ModelConfig(
        family="gpt2",
        vocab_size=50257,
        n_ctx=context,
        n_layer=layers,
        d_model=d_model,
        n_head=heads,
        n_kv_head=heads,
        head_dim=d_model // heads,
        d_ff=4 * d_model,
        norm_eps=1e-5,
        tie_embeddings=True,
    )


def _gpt3(layers: int, d_model: int, heads: int) -> ModelConfig:
    return _gpt(layers, d_model, heads, 2048)


def _gpt2(layers: int, d_model: int, heads: int) -> ModelConfig:
    return _gpt(layers, d_model, heads, 1024)


def _modern(family: str, vocab: int, context: int, layers: int, d_model: int, heads: int, kv_heads: int, head_dim: int,
            d_ff: int, **traits) -> ModelConfig:
    """A Llama-style block (RMSNorm, SwiGLU, RoPE, no biases, tied embeddings) unless `traits` say otherwise."""
    kinds = {"norm": "rmsnorm", "mlp": "swiglu", "positions": "rope", "qkv_bias": False,
             "o_bias": False, "mlp_bias": False}
    kinds |= {"norm_eps": 1e-6, "tie_embeddings": True}
    return ModelConfig(
        family=family, vocab_size=vocab, n_ctx=context, n_layer=layers, d_model=d_model,
        n_head=heads, n_kv_head=kv_heads,
        head_dim=head_dim, d_ff=d_ff, **(kinds | traits),
    )  # fmt: skip


_GPT3 = "GPT-3 paper, Table 2.1"
_GPT2 = "GPT-2 paper, Table 2"
SOURCES_ZH = {_GPT3: "GPT-3 论文表 2.1", _GPT2: "GPT-2 论文表 2"}  # a repository's name reads the same in both


def _gpt2_notes(printed: str, released: str) -> tuple[str, str]:
    """A GPT-2 preset's note, in English and Chinese: the paper's figure against the checkpoint's."""
    return (f"the GPT-2 paper printed {printed}; the released checkpoint holds the count here "
            f"(OpenAI's download name: {released})",
            f"GPT-2 论文印的是 {printed}；发布的检查点存的是这里的计数"
            f"（OpenAI 的下载名：{released}）")  # fmt: skip


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("gpt3-small", "GPT-3 Small", _gpt3(12, 768, 12), "125M", _GPT3),
        Preset("gpt3-medium", "GPT-3 Medium", _gpt3(24, 1024, 16), "350M", _GPT3),
        Preset("gpt3-large", "GPT-3 Large", _gpt3(24, 1536, 16), "760M", _GPT3),
        Preset(
            "gpt3-xl",
            "GPT-3 XL",
            _gpt3(24, 2048, 16),
            "1.3B",
            _GPT3,
            "the table prints 24 heads of 128, but 24 × 128 = 3,072 ≠ d_model 2,048 and would give 1.5B; "
            "16 heads of 128 (as GPT-Neo 1.3B) match d_model and the 1.3B figure",
            "表中印的是 24 个 128 维的头，但 24 × 128 = 3,072 ≠ d_model 2,048，且会得出 1.5B；"
            "16 个 128 维的头（与 GPT-Neo 1.3B 相同）与 d_model 和 1.3B 的数字都相符",
        ),
        Preset("gpt3-2.7b", "GPT-3 2.7B", _gpt3(32, 2560, 32), "2.7B", _GPT3),
        Preset("gpt3-6.7b", "GPT-3 6.7B", _gpt3(32, 4096, 32), "6.7B", _GPT3),
        Preset(
            "gpt3-13b",
            "GPT-3 13B",
            _gpt3(40, 5120, 40),
            "13B",
            _GPT3,
            "the table prints d_model 5,140, which 40 heads of 128 (= 5,120) cannot fill; 5,120 is used",
            "表中印的 d_model 是 5,140，40 个 128 维的头（= 5,120）填不满它；这里用 5,120",
        ),
        Preset("gpt3", "GPT-3 175B", _gpt3(96, 12288, 96), "175B", _GPT3),
        Preset("gpt2", "GPT-2 small", _gpt2(12, 768, 12), "117M", _GPT2, *_gpt2_notes("117M", "124M")),
        Preset("gpt2-medium", "GPT-2 medium", _gpt2(24, 1024, 16), "345M", _GPT2, *_gpt2_notes("345M", "355M")),
        Preset("gpt2-large", "GPT-2 large", _gpt2(36, 1280, 20), "762M", _GPT2, *_gpt2_notes("762M", "774M")),
        Preset("gpt2-xl", "GPT-2 XL", _gpt2(48, 1600, 25), "1542M", _GPT2, *_gpt2_notes("1542M", "1558M")),
        Preset(
            "smollm2-135m",
            "SmolLM2-135M",
            ModelConfig(
                family="llama",
                vocab_size=49152,
                n_ctx=8192,
                n_layer=30,
                d_model=576,
                n_head=9,
                n_kv_head=3,
                head_dim=64,
                d_ff=1536,
                norm_eps=1e-5,
                tie_embeddings=True,
                norm="rmsnorm",
                mlp="swiglu",
                positions="rope",
                qkv_bias=False,
                o_bias=False,
                mlp_bias=False,
                rope_theta=100000.0,
            ),
            "135M",
            "HuggingFaceTB/SmolLM2-135M",
        ),
        Preset(
            "qwen3-0.6b",
            "Qwen3-0.6B",
            _modern("qwen3", 151936, 40960, 28, 1024, 16, 8, 128, 3072, qk_norm=True, rope_theta=1_000_000.0),
            "0.6B",
            "Qwen/Qwen3-0.6B",
            "16 heads of 128 in a width of 1,024: the attention is twice as wide as the residual stream",
            "宽度 1,024 中有 16 个 128 维的头：注意力的宽度是残差流的两倍",
        ),
        Preset(
            "llama-3.2-1b",
            "Llama-3.2-1B",
            _modern("llama", 128256, 131072, 16, 2048, 32, 8, 64, 8192, norm_eps=1e-5, rope_theta=500_000.0),
            "1.23B",
            "meta-llama/Llama-3.2-1B",
        ),
        Preset(
            "gemma-3-270m",
            "Gemma-3-270M",
            _modern("gemma3", 262144, 32768, 18, 640, 4, 1, 256, 2048, norm="rmsnorm1p", mlp="geglu", qk_norm=True,
                    norms_per_block=4, rope_theta=1_000_000.0),
            "270M",
            "google/gemma-3-270m",
            "the 262,144-token embedding holds most of the parameters (Google: 170M embedding, 100M in the blocks)",
            "262,144 个词元的嵌入占了大部分参数（Google：嵌入 170M，块中 100M）",
        ),
        Preset(
            "phi-4-mini",
            "Phi-4-mini",
            _modern("phi3", 200064, 131072, 32, 3072, 24, 8, 128, 8192, norm_eps=1e-5, rotary_dim=96),
            "3.8B",
            "microsoft/Phi-4-mini-instruct",
        ),
    )
}

# Other spellings people use for the same rows.
ALIASES = {"gpt3-175b": "gpt3", "gpt3-125m": "gpt3-small", "gpt3-350m": "gpt3-medium", "gpt3-760m": "gpt3-large"}
ALIASES |= {"gpt3-1.3b": "gpt3-xl", "gpt2-small": "gpt2", "gpt2-124m": "gpt2", "smollm2": "smollm2-135m"}
ALIASES |= {"qwen3": "qwen3-0.6b", "llama-3.2": "llama-3.2-1b", "llama3.2-1b": "llama-3.2-1b",
            "gemma-3": "gemma-3-270m", "gemma3-270m": "gemma-3-270m"}
ALIASES |= {"phi-4": "phi-4-mini", "phi4-mini": "phi-4-mini"}

DEFAULT = "gpt3"


def get(name: str) -> Preset:
    """The preset called `name` (any case, or a common alias); ShapeError with the closest name otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    close = difflib.get_close_matches(key, [*PRESETS, *ALIASES], n=1, cutoff=0.6)
    hint = f"did you mean {ALIASES.get(close[0], close[0])!r}? See --list-presets" if close else "see --list-presets"
    raise ShapeError(f"unknown preset {name!r}", hint)


def matching(config: ModelConfig) -> Preset | None:
    """The preset whose shape `config` has (every parameter the same), if any."""
    return next((p for p in PRESETS.values() if same_shape(p.config, config)), None)
