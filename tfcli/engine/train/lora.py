"""LoRA (Hu et al. 2021): train two thin matrices beside a frozen weight, in PEFT's format.

A target Linear W [out, in] (the checkpoint's layout) runs as W + s·B A, with A [r, in], B [out, r]
and s = alpha / r (alpha / √r with rsLoRA). A starts random (PEFT's kaiming-uniform:
U(-1/√in, 1/√in)), B at zero, so that the adapted model starts as the base. The effective weight
enters the pass linearly, so its gradient dW (engine/grad, under the checkpoint's names) gives the
adapter's exactly:

    dB = s · dW Aᵀ      [out, in] @ [in, r] -> [out, r]
    dA = s · Bᵀ dW      [r, out] @ [out, in] -> [r, in]

Saved as PEFT saves them (adapter_config.json, adapter_model.safetensors with
`base_model.model.{module}.lora_A.weight` [r, in] and `.lora_B.weight` [out, r]), so peft and
transformers load them. The weights' metadata also records a fingerprint of the base it was
trained on (`tfcli.base`: peft ignores it), so that tfcli refuses it on another model.

At inference (`--lora ADAPTER` on generate, chat, score, serve) the adapter is merged at load:
each targeted W is read as W + s·B A once (`AdaptedTensors`), and the model runs as any other,
on its fast paths, at no cost per token; only the targeted matrices become float32 copies (a
quantized one is dequantized for it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import ModelConfig
from ..errors import TfcliError, shown
from ..grad.model import Grads
from .model import Params, Trainable

# The short names --targets takes and the Linear (PEFT's module) each means, by family. Phi-3 stores
# q, k, v as one qkv_proj and gate, up as one gate_up_proj; GPT-2 q, k, v as one c_attn: PEFT adapts
# a module whole, so an adapter there adapts the fused matrix (an adapter on a slice of it is not a
# PEFT adapter: nothing else could load it).
SEPARATE = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
            "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}  # fmt: skip
MODULES_OF = {
    "llama": SEPARATE, "qwen2": SEPARATE, "qwen3": SEPARATE, "gemma3": SEPARATE,
    "phi3": {"qkv": "self_attn.qkv_proj", "o": "self_attn.o_proj", "gate_up": "mlp.gate_up_proj",
             "down": "mlp.down_proj"},
    "gpt2": {"qkv": "attn.c_attn", "o": "attn.c_proj", "up": "mlp.c_fc", "down": "mlp.c_proj"},
}  # fmt: skip
FUSED_INTO = {"phi3": {"q": "qkv", "k": "qkv", "v": "qkv", "gate": "gate_up", "up": "gate_up"},
              "gpt2": {"q": "qkv", "k": "qkv", "v": "qkv"}}  # fmt: skip
TARGETS = ("q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up")  # every short name of some family
FAMILIES = tuple(MODULES_OF)
MODULES = SEPARATE  # the separate projections' table (Llama, Qwen2, Qwen3, Gemma 3)


def layer_prefix(family: str, i: int) -> str:
    return f"transformer.h.{i}." if family == "gpt2" else f"model.layers.{i}."


def default_targets(family: str) -> tuple[str, ...]:
    """The attention's projections: q,k,v,o, or qkv,o where they are fused."""
    return ("qkv", "o") if "qkv" in MODULES_OF.get(family, {}) else ("q", "k", "v", "o")


def resolve_targets(family: str, targets: tuple[str, ...]) -> tuple[str, ...]:
    """--targets checked against the family (the default when empty); LoraError saying why one is not there."""
    table = MODULES_OF.get(family)
    if table is None:
        raise LoraError(f"LoRA is not available for {family} models", f"it adapts {', '.join(FAMILIES)} models")
    targets = tuple(targets) or default_targets(family)
    for t in targets:
        fused = FUSED_INTO.get(family, {}).get(t)
        if fused:
            parts = [k for k, v in FUSED_INTO[family].items() if v == fused]
            both = ", ".join(parts[:-1]) + " and " + parts[-1]
            raise LoraError(f"--targets {t}: a {family} model keeps {both} in one matrix "
                            f"({table[fused].split('.')[-1]}), which an adapter adapts whole",
                            f"use --targets {fused} (the choices: {','.join(table)})")  # fmt: skip
        if t not in table:
            raise LoraError(f"--targets {shown(t)} is not a projection of a {family} block",
                            f"choose from {','.join(table)}")  # fmt: skip
    return targets


CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."
BASE_KEY = "tfcli.base"  # the safetensors metadata key of the base's fingerprint


class LoraError(TfcliError):
    """An adapter that cannot be made, read or applied."""


@dataclass
class Adapter:
    rank: int
    alpha: float
    targets: tuple[str, ...]  # short names (MODULES_OF)
    tensors: Params  # PEFT's names -> A [r, in] or B [out, r]
    base: str = ""  # base_model_name_or_path
    fingerprint: str = ""  # of the base's weights (fingerprint()); "" when unknown (an adapter from peft)
    rslora: bool = False  # s = alpha / √r
    fan_in_fan_out: bool = False  # the base stores its matrices [in, out] (GPT-2's Conv1D), as PEFT says it

    @property
    def scale(self) -> float:
        return self.alpha / (np.sqrt(self.rank) if self.rslora else self.rank)

    def modules(self) -> list[str]:
        """The targeted Linears' checkpoint prefixes (model.layers.i.self_attn.q_proj, ...)."""
        ends = [name for name in self.tensors if name.endswith(".lora_A.weight")]
        return sorted(name.removeprefix(PREFIX).removesuffix(".lora_A.weight") for name in ends)

    def delta(self, module: str) -> np.ndarray:
        """s·B A [out, in] (GPT-2's Conv1D: its transpose [in, out]): what the adapter adds to the
        module's weight, as the checkpoint stores it."""
        a, b = self.tensors[_key(module, "A")], self.tensors[_key(module, "B")]  # [r, in], [out, r]
        d = np.float32(self.scale) * (b @ a)  # [out, r] @ [r, in] -> [out, in]
        return d.T if self.fan_in_fan_out else d

    def stored_shape(self, module: str) -> tuple[int, int]:
        """The shape the module's weight has in the checkpoint: [out, in], or [in, out] (Conv1D)."""
        out, n_in = self.tensors[_key(module, "B")].shape[0], self.tensors[_key(module, "A")].shape[1]
        return (n_in, out) if self.fan_in_fan_out else (out, n_in)


def _key(module: str, which: str) -> str:
    return f"{PREFIX}{module}.lora_{which}.weight"


def fingerprint(embed_rows: np.ndarray, norm: np.ndarray) -> str:
    """The base's identity, cheap to compute from a folder, a GGUF file or the trainer's dict: the
    sha256 of its first 8 embedding rows [8, D] and its final norm's weight [D], as float32. A
    fine-tuned model changes both; another quantization of the same model changes them too."""
    h = hashlib.sha256(np.ascontiguousarray(embed_rows, dtype=np.float32).tobytes())
    h.update(np.ascontiguousarray(norm, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def params_fingerprint(params: Params) -> str:
    embed, norm = ("transformer.wte.weight", "transformer.ln_f.weight") if "transformer.wte.weight" in params else (
        "model.embed_tokens.weight", "model.norm.weight")  # fmt: skip
    return fingerprint(params[embed][:8], params[norm])


def new_adapter(config: ModelConfig, params: Params, rank: int, alpha: float, targets: tuple[str, ...],
                seed: int = 0, base: str = "") -> Adapter:  # fmt: skip
    """A fresh adapter for these base parameters; LoraError on a family, target or rank it cannot
    have. `targets` empty: the family's default (default_targets)."""
    targets = resolve_targets(config.family, targets)
    table, gpt2 = MODULES_OF[config.family], config.family == "gpt2"
    rng = np.random.default_rng(seed)
    tensors: Params = {}
    for i in range(config.n_layer):
        for t in targets:
            module = layer_prefix(config.family, i) + table[t]
            shape = params[module + ".weight"].shape
            n_in, out = shape if gpt2 else shape[::-1]  # Conv1D [in, out]; Linear [out, in]
            if not 0 < rank <= min(out, n_in):
                raise LoraError(f"--lora {rank} is not a rank of the {out} x {n_in} matrix {module}",
                                f"give a rank from 1 to {min(out, n_in)}")  # fmt: skip
            bound = 1.0 / np.sqrt(n_in)  # PEFT's kaiming_uniform_(a=√5)
            tensors[_key(module, "A")] = rng.uniform(-bound, bound, (rank, n_in)).astype(np.float32)  # [r, in]
            tensors[_key(module, "B")] = np.zeros((out, rank), dtype=np.float32)  # [out, r]
    return Adapter(rank, float(alpha), targets, tensors, base, params_fingerprint(params), fan_in_fan_out=gpt2)


def merged(params: Params, adapter: Adapter) -> Params:
    """The base's parameters with every target W replaced by W + s·B A (new arrays; the rest shared)."""
    out = dict(params)
    for module in adapter.modules():
        out[module + ".weight"] = params[module + ".weight"] + adapter.delta(module)  # [out, in] (Conv1D [in, out])
    return out


def adapter_grads(adapter: Adapter, grads: Params) -> Params:
    """The gradients of A and B from those of the effective weights [out, in] (see the docstring)."""
    s, out = np.float32(adapter.scale), {}
    for module in adapter.modules():
        a, b = adapter.tensors[_key(module, "A")], adapter.tensors[_key(module, "B")]
        dw = grads[module + ".weight"]  # [out, in] (Conv1D: [in, out], turned)
        dw = dw.T if adapter.fan_in_fan_out else dw
        out[_key(module, "A")] = s * (b.T @ dw)  # [r, out] @ [out, in] -> [r, in]
        out[_key(module, "B")] = s * (dw @ a.T)  # [out, in] @ [in, r] -> [out, r]
    return out


class AdapterGrads(Grads):
    """engine/grad's gradients for a LoRA step: only the adapter's A and B, each from its product's
    input x [T, in] and output gradient dy [T, out] (the columns of a fused q/k/v or gate/up
    product that are its module's); the frozen weights' gradients, and the effective weight's
    dyᵀ x [out, in], are never formed. The same as adapter_grads of that dW, at r/in of its cost:

        dB = s · dyᵀ (x Aᵀ)      [out, T] @ ([T, in] @ [in, r]) -> [out, r]
        dA = s · (dy B)ᵀ x       ([T, out] @ [out, r])ᵀ @ [T, in] -> [r, in]
    """

    def __init__(self, adapter: Adapter, config: ModelConfig):
        super().__init__()
        self.adapter, self.lora = adapter, {}
        # the product each module's weight is part of (engine/families' fused matrices), and its columns
        d_attn, d_kv, f = config.d_attn, config.d_kv, config.d_ff
        parts = {"q_proj": ("w_qkv", 0, d_attn), "k_proj": ("w_qkv", d_attn, d_attn + d_kv),
                 "v_proj": ("w_qkv", d_attn + d_kv, d_attn + 2 * d_kv), "o_proj": ("wo", 0, None),
                 "gate_proj": ("mlp.w_in", 0, f), "up_proj": ("mlp.w_in", f, 2 * f),
                 "down_proj": ("mlp.w_out", 0, None), "qkv_proj": ("w_qkv", 0, None),
                 "gate_up_proj": ("mlp.w_in", 0, None), "attn.c_attn": ("c_attn_w", 0, None),
                 "attn.c_proj": ("c_proj_w", 0, None), "mlp.c_fc": ("mlp.w_in", 0, None),
                 "mlp.c_proj": ("mlp.w_out", 0, None)}  # fmt: skip
        self.paths: dict[str, list[tuple[str, int, int | None]]] = {}
        for module in adapter.modules():
            # model.layers.{i}.self_attn.q_proj, transformer.h.{i}.attn.c_attn
            layer, name = module.split(".")[2], module.split(".", 3)[3]
            path, lo, hi = parts.get(name) or parts[name.split(".")[-1]]
            self.paths.setdefault(f"layers.{layer}.{path}", []).append((module, lo, hi))

    def wants(self, path: str) -> bool:
        return False  # the base is frozen: only products (below) give the adapter anything

    def add(self, path: str, g: np.ndarray) -> None:
        pass

    def product(self, path: str, x: np.ndarray, dy: np.ndarray) -> None:
        s = np.float32(self.adapter.scale)
        for module, lo, hi in self.paths.get(path, ()):
            a, b = self.adapter.tensors[_key(module, "A")], self.adapter.tensors[_key(module, "B")]  # [r, in], [out, r]
            d = dy[:, lo:hi]  # [T, out]
            self.lora[_key(module, "B")] = s * (d.T @ (x @ a.T))  # [out, T] @ [T, r] -> [out, r]
            self.lora[_key(module, "A")] = s * ((d @ b).T @ x)  # [r, T] @ [T, in] -> [r, in]


class LoraTrainable(Trainable):
    """The trainer's model when only an adapter learns: its `params` are the adapter's A and B; the
    base's stay frozen in `base`. Each step runs the family's forward on W + s·B A (the targeted
    matrices merged, the rest the base's own arrays) and engine/grad's backward into AdapterGrads."""

    def __init__(self, config: ModelConfig, base: Params, adapter: Adapter):
        super().__init__(config, adapter.tensors)
        self.adapter, self.base = adapter, base
        self.inner = Trainable(config, base)

    def _with_adapter(self) -> None:
        self.inner.params = merged(self.base, self.adapter)

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        self._with_adapter()
        return self.inner.loss(x, y)

    def loss_and_grads(self, x: np.ndarray, y: np.ndarray, rng=None) -> tuple[float, Params]:
        from .. import grad

        self._with_adapter()
        grads = AdapterGrads(self.adapter, self.config)
        loss, _ = grad.loss_and_grads(self.inner.build(), x, y, grads)
        return loss, grads.lora

    def logits_last(self, ids: np.ndarray) -> np.ndarray:
        self._with_adapter()
        return self.inner.logits_last(ids)


# --- PEFT's files ------------------------------------------------------------------------------


def config_bytes(adapter: Adapter) -> bytes:
    """adapter_config.json as PEFT's save_pretrained writes it (the fields its LoraConfig reads)."""
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": adapter.rank, "lora_alpha": adapter.alpha,
        "target_modules": target_modules(adapter), "lora_dropout": 0.0,
        "bias": "none", "fan_in_fan_out": adapter.fan_in_fan_out, "inference_mode": True, "use_rslora": adapter.rslora,
        "base_model_name_or_path": adapter.base, "init_lora_weights": True,
    }  # fmt: skip
    return (json.dumps(config, indent=2) + "\n").encode("utf-8")


def target_modules(adapter: Adapter) -> list[str]:
    """PEFT's target_modules: each module's name, which PEFT matches against the end of the model's
    module paths; GPT-2's two c_proj (attention's and the MLP's) keep their parent to tell them apart."""
    names = {m.split(".", 3)[3] for m in adapter.modules()}  # self_attn.q_proj, attn.c_proj ...
    return sorted(n if n.endswith("c_proj") else n.split(".")[-1] for n in names)


def weights_bytes(adapter: Adapter) -> bytes:
    from safetensors.numpy import save

    meta = {"format": "pt"} | ({BASE_KEY: adapter.fingerprint} if adapter.fingerprint else {})
    return save({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in adapter.tensors.items()}, metadata=meta)


def save(folder: Path, adapter: Adapter) -> None:
    """adapter_config.json and adapter_model.safetensors, as PEFT's save_pretrained writes them."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG).write_bytes(config_bytes(adapter))
    (folder / WEIGHTS).write_bytes(weights_bytes(adapter))


def read(folder: Path) -> Adapter:
    """An adapter folder as tfcli or PEFT saved it, not yet checked against a model; LoraError on
    missing or damaged files and on what tfcli cannot apply (DoRA, per-module ranks, bias training)."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is a file, not a folder"
        raise LoraError(f"the adapter {folder} {what}", f"give the folder that holds {CONFIG} and {WEIGHTS}")
    try:
        cfg = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        with safe_open(str(folder / WEIGHTS), framework="np") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k).astype(np.float32) for k in f.keys()}
        rank, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, SafetensorError) as e:
        raise LoraError(f"{folder} is not a readable LoRA adapter ({type(e).__name__}: {shown(str(e), 80)})",
                        f"it needs {CONFIG} and {WEIGHTS}, as PEFT saves them") from None  # fmt: skip
    unsupported = [k for k in ("use_dora",) if cfg.get(k)]
    unsupported += [k for k in ("rank_pattern", "alpha_pattern") if cfg.get(k)]
    if cfg.get("peft_type", "LORA") != "LORA" or cfg.get("bias", "none") != "none":
        unsupported.append(f"peft_type {cfg.get('peft_type')}, bias {cfg.get('bias')}")
    odd = [k for k in tensors if not (k.startswith(PREFIX) and k.endswith((".lora_A.weight", ".lora_B.weight")))]
    if unsupported or odd:
        what = ", ".join(unsupported) if unsupported else f"the tensor {shown(odd[0], 80)}"
        raise LoraError(f"{folder}: tfcli applies plain LoRA adapters, not one with {what}",
                        "train the adapter without it")  # fmt: skip
    if rank < 1:
        raise LoraError(f"{folder}: its rank r is {rank}", "the adapter is damaged: train it again")
    base = str(cfg.get("base_model_name_or_path") or "")
    adapter = Adapter(rank, alpha, (), tensors, base, str(meta.get(BASE_KEY, "")), bool(cfg.get("use_rslora")),
                      bool(cfg.get("fan_in_fan_out")))  # fmt: skip
    shorts = {m: t for table in MODULES_OF.values() for t, m in table.items()}  # self_attn.q_proj -> q
    adapter.targets = tuple(sorted({shorts.get(m.split(".", 3)[3], m.split(".")[-1]) for m in adapter.modules()}))
    for module in adapter.modules():
        a, b = tensors[_key(module, "A")], tensors.get(_key(module, "B"))
        if b is None or a.ndim != 2 or b.ndim != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise LoraError(f"{folder}: the matrices of {shown(module, 80)} are not a rank-{rank} pair",
                            "the adapter is damaged: train it again")  # fmt: skip
    if not adapter.modules():
        raise LoraError(f"{folder}: {WEIGHTS} holds no LoRA matrices", "the adapter is damaged: train it again")
    return adapter


def check(adapter: Adapter, where: Path, shape_of, base_print: str, model: str) -> None:
    """The adapter fits the model whose tensors have `shape_of(name)` (None: no such tensor) and
    whose fingerprint is `base_print`; else a LoraError naming the first thing that does not fit."""
    trained_on = f" ({shown(adapter.base, 60)})" if adapter.base else ""
    hint = f"use the adapter with the model it was trained on{trained_on}"
    for module in adapter.modules():
        want, have = adapter.stored_shape(module), shape_of(module + ".weight")
        if have is None or tuple(have) != want:
            what = "has no such matrix" if have is None else f"has it {have[0]} x {have[1]}"
            mine = f"its {module} is {want[0]} x {want[1]}; {model} {what}"
            raise LoraError(f"{where} does not fit {model}: {mine}", hint)
    if adapter.fingerprint and base_print and adapter.fingerprint != base_print:
        raise LoraError(f"{where} was trained on other weights than {model}'s", hint)


def load(folder: Path, config: ModelConfig, params: Params) -> Adapter:
    """An adapter saved by tfcli or PEFT for a model of these parameters; LoraError when it does not fit them."""
    adapter = read(folder)
    shape_of = lambda name: params[name].shape if name in params else None  # noqa: E731
    check(adapter, folder, shape_of, params_fingerprint(params), "this model")
    return adapter


# --- at inference: merged at load ---------------------------------------------------------------


class AdaptedTensors:
    """A checkpoint's tensors (engine/checkpoint.py's interface) with an adapter merged in: each
    targeted W [out, in] is read as W + s·B A, in float32 (a quantized W dequantized first)."""

    def __init__(self, inner, adapter: Adapter):
        self.inner, self.adapter = inner, adapter
        self.targeted = {module + ".weight": module for module in adapter.modules()}
        # a GPT-2 saved without the "transformer." prefix (the original OpenAI conversion)
        self.targeted |= {name.removeprefix("transformer."): m for name, m in self.targeted.items()}

    def __getattr__(self, name: str):
        return getattr(self.inner, name)  # names, paths, shape, dtype, ignore, unused, used ...

    def __contains__(self, name: str) -> bool:
        return name in self.inner

    def get(self, name: str, shape: tuple[int, ...]):
        w = self.inner.get(name, shape)
        module = self.targeted.get(name)
        if module is None:
            return w
        return np.asarray(w, dtype=np.float32) + self.adapter.delta(module)  # [out, in] (Conv1D [in, out])

    def fused(self, names_rows: list[tuple[str, int]], n_in: int):
        if not any(name in self.targeted for name, _ in names_rows):
            return self.inner.fused(names_rows, n_in)
        parts = [np.asarray(self.get(name, (rows, n_in)), dtype=np.float32) for name, rows in names_rows]
        return np.concatenate(parts).T  # [in, sum out_i]


def checkpoint_fingerprint(tensors, config: ModelConfig) -> str:
    """fingerprint() of an opened checkpoint's tensors (a folder, or a GGUF run in place)."""
    embed, norm = "model.embed_tokens.weight", "model.norm.weight"
    if config.family == "gpt2":  # saved with or without the "transformer." prefix: the trainer's names have it
        p = "transformer." if "transformer.wte.weight" in tensors else ""
        embed, norm = p + "wte.weight", p + "ln_f.weight"
    if embed not in tensors or norm not in tensors:
        return ""
    table = tensors.get(embed, (config.vocab_size, config.d_model))
    rows = table.rows(np.arange(8)) if hasattr(table, "rows") else table[:8]  # [8, D]
    return fingerprint(rows, tensors.get(norm, (config.d_model,)))


def adapted(lm, folder: Path):
    """The LoadedModel `lm` with the adapter in `folder` merged into its weights (a new model built
    from its checkpoint, the tokenizer and template kept); LoraError when it does not fit."""
    from ..loader import build, read_checkpoint

    adapter = read(folder)
    ckpt = read_checkpoint(lm.path)
    tensors = ckpt.tensors

    def shape_of(name: str):
        name = name if name in tensors else name.removeprefix("transformer.")  # GPT-2 without its prefix
        return tensors.shape(name) if name in tensors else None

    check(adapter, folder, shape_of, checkpoint_fingerprint(tensors, ckpt.config), lm.name)
    ckpt.tensors = AdaptedTensors(tensors, adapter)
    lm.model = build(ckpt)
    return lm


# --- merged into a folder (tfcli convert --merge-lora) -------------------------------------------


def merged_folder_files(source: Path, adapter_folder: Path) -> dict[str, bytes]:
    """The files of a model folder whose weights are the base's with the adapter merged (what
    peft's merge_and_unload gives, saved), float32, under the checkpoint's names; the base's
    config, tokenizer, sampling defaults and chat template kept. LoraError when it does not fit."""
    from ..files import TEMPLATE_BYTES, TOKENIZER_BYTES, read_small
    from . import folder

    cfg, raw, params = folder.load_params(Path(source))
    adapter = load(adapter_folder, cfg, params)
    files = {
        folder.WEIGHTS: folder.safetensors_bytes(merged(params, adapter)),
        "config.json": folder.json_bytes(folder.hf_config(cfg, raw)),
        "tokenizer.json": read_small(Path(source) / "tokenizer.json", TOKENIZER_BYTES, LoraError),
    }
    if (Path(source) / "tokenizer_config.json").is_file():
        files["tokenizer_config.json"] = read_small(Path(source) / "tokenizer_config.json", TEMPLATE_BYTES, LoraError)
    return files | folder.companions(Path(source))
