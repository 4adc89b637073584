"""LoRA (Hu et al. 2021): train two thin matrices beside a frozen weight, in PEFT's format.

A target Linear W [out, in] (the checkpoint's layout) runs as W + s·B A, with A [r, in], B [out, r]
and s = alpha / r. A starts random (PEFT's kaiming-uniform: U(-1/√in, 1/√in)), B at zero, so that
the adapted model starts as the base. The effective weight enters the pass linearly, so its
gradient dW (engine/grad, under the checkpoint's names) gives the adapter's exactly:

    dB = s · dW Aᵀ      [out, in] @ [in, r] -> [out, r]
    dA = s · Bᵀ dW      [r, out] @ [out, in] -> [r, in]

Saved as PEFT saves them (adapter_config.json, adapter_model.safetensors with
`base_model.model.{module}.lora_A.weight` [r, in] and `.lora_B.weight` [out, r]), so peft and
transformers load them; `merged` writes W + s·B A into a copy of the base's weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import ModelConfig
from ..errors import TfcliError, shown
from .model import Params, Trainable

# The short names --targets takes and the Linear each means, for families with separate projections.
MODULES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
           "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}  # fmt: skip
FAMILIES = ("llama", "qwen2", "qwen3", "gemma3")  # Phi-3 and GPT-2 fuse their projections: not yet
CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


class LoraError(TfcliError):
    """An adapter that cannot be made, read or applied."""


@dataclass
class Adapter:
    rank: int
    alpha: float
    targets: tuple[str, ...]  # short names (MODULES)
    tensors: Params  # PEFT's names -> A [r, in] or B [out, r]
    base: str = ""  # base_model_name_or_path

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def modules(self) -> list[str]:
        """The targeted Linears' checkpoint prefixes (model.layers.i.self_attn.q_proj, ...)."""
        return sorted({name.removeprefix("base_model.model.").removesuffix(".lora_A.weight") for name in self.tensors if name.endswith("lora_A.weight")})


def _key(module: str, which: str) -> str:
    return f"base_model.model.{module}.lora_{which}.weight"


def new_adapter(config: ModelConfig, params: Params, rank: int, alpha: float, targets: tuple[str, ...], seed: int = 0, base: str = "") -> Adapter:
    """A fresh adapter for these base parameters; LoraError on a family, target or rank it cannot have."""
    if config.family not in FAMILIES:
        raise LoraError(f"LoRA is not available for {config.family} models yet", f"it adapts {', '.join(FAMILIES)} models")
    unknown = [t for t in targets if t not in MODULES]
    if unknown or not targets:
        raise LoraError(f"--targets {shown(','.join(unknown) or '')} is not a projection of a {config.family} block", f"choose from {','.join(MODULES)}")
    rng = np.random.default_rng(seed)
    tensors: Params = {}
    for i in range(config.n_layer):
        for t in targets:
            module = f"model.layers.{i}.{MODULES[t]}"
            out, n_in = params[module + ".weight"].shape
            if not 0 < rank <= min(out, n_in):
                raise LoraError(f"--lora {rank} is not a rank of the {out} x {n_in} matrix {module}", f"give a rank from 1 to {min(out, n_in)}")
            bound = 1.0 / np.sqrt(n_in)  # PEFT's kaiming_uniform_(a=√5)
            tensors[_key(module, "A")] = rng.uniform(-bound, bound, (rank, n_in)).astype(np.float32)  # [r, in]
            tensors[_key(module, "B")] = np.zeros((out, rank), dtype=np.float32)  # [out, r]
    return Adapter(rank, float(alpha), tuple(targets), tensors, base)


def merged(params: Params, adapter: Adapter) -> Params:
    """The base's parameters with every target W replaced by W + s·B A (new arrays; the rest shared)."""
    out = dict(params)
    s = np.float32(adapter.scale)
    for module in adapter.modules():
        a, b = adapter.tensors[_key(module, "A")], adapter.tensors[_key(module, "B")]  # [r, in], [out, r]
        out[module + ".weight"] = params[module + ".weight"] + s * (b @ a)  # [out, r] @ [r, in] -> [out, in]
    return out


def adapter_grads(adapter: Adapter, grads: Params) -> Params:
    """The gradients of A and B from those of the effective weights [out, in] (see the docstring)."""
    s, out = np.float32(adapter.scale), {}
    for module in adapter.modules():
        a, b = adapter.tensors[_key(module, "A")], adapter.tensors[_key(module, "B")]
        dw = grads[module + ".weight"]  # [out, in]
        out[_key(module, "A")] = s * (b.T @ dw)  # [r, out] @ [out, in] -> [r, in]
        out[_key(module, "B")] = s * (dw @ a.T)  # [out, in] @ [in, r] -> [out, r]
    return out


class LoraTrainable(Trainable):
    """The trainer's model when only an adapter learns: its `params` are the adapter's A and B; the
    base's stay frozen in `base`."""

    def __init__(self, config: ModelConfig, base: Params, adapter: Adapter):
        from .family import FamilyTrainable

        super().__init__(config, adapter.tensors)
        self.adapter, self.base = adapter, base
        self.inner = FamilyTrainable(config, base)

    def _with_adapter(self) -> None:
        self.inner.params = merged(self.base, self.adapter)

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        self._with_adapter()
        return self.inner.loss(x, y)

    def loss_and_grads(self, x: np.ndarray, y: np.ndarray, rng=None) -> tuple[float, Params]:
        self._with_adapter()
        loss, grads = self.inner.loss_and_grads(x, y)
        return loss, adapter_grads(self.adapter, grads)

    def logits_last(self, ids: np.ndarray) -> np.ndarray:
        self._with_adapter()
        return self.inner.logits_last(ids)


# --- PEFT's files ------------------------------------------------------------------------------


def save(folder: Path, adapter: Adapter) -> None:
    """adapter_config.json and adapter_model.safetensors, as PEFT's save_pretrained writes them."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": adapter.rank, "lora_alpha": adapter.alpha,
        "target_modules": sorted({MODULES[t].split(".")[-1] for t in adapter.targets}), "lora_dropout": 0.0, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "base_model_name_or_path": adapter.base, "init_lora_weights": True,
    }  # fmt: skip
    (folder / CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_file({k: np.ascontiguousarray(v) for k, v in adapter.tensors.items()}, str(folder / WEIGHTS), metadata={"format": "pt"})


def load(folder: Path, config: ModelConfig, params: Params) -> Adapter:
    """An adapter saved by tfcli or PEFT for a model of these parameters; LoraError when it does not fit them."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    folder = Path(folder)
    try:
        cfg = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        tensors = {k: v.astype(np.float32) for k, v in load_file(str(folder / WEIGHTS)).items()}
        rank, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as e:
        raise LoraError(f"{folder} is not a readable LoRA adapter ({type(e).__name__}: {shown(str(e), 80)})", f"it needs {CONFIG} and {WEIGHTS}") from None
    names = {m.split(".")[-1]: t for t, m in MODULES.items()}
    targets = tuple(names[m] for m in cfg.get("target_modules", ()) if m in names)
    adapter = Adapter(rank, alpha, targets, tensors, str(cfg.get("base_model_name_or_path", "")))
    for module in adapter.modules():
        w = params.get(module + ".weight")
        a, b = tensors.get(_key(module, "A")), tensors.get(_key(module, "B"))
        if w is None or a is None or b is None or a.shape != (rank, w.shape[1]) or b.shape != (w.shape[0], rank):
            raise LoraError(f"{folder}: its {module} does not fit this model", "use the adapter with the model it was trained on")
    return adapter
