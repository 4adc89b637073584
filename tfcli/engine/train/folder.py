"""Checkpoints: a Hugging Face model folder in, a Hugging Face model folder out.

A checkpoint is what `save_pretrained` writes (config.json, model.safetensors with transformers'
names, tokenizer.json), plus a model card README.md, and the two files --resume needs:
trainer_state.json (the step, the settings, the losses) and optimizer.safetensors (AdamW's m, v).

Saving never leaves a half-written checkpoint: every file is first written beside its final name
(`.name.tmp-PID`), and only when all are complete are they renamed over the old ones (a rename
needs no space). A full disk then fails while the old checkpoint is still whole. Files tfcli did
not write are never touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..config import ModelConfig
from ..loader import read_checkpoint
from . import TrainError, shapes
from .model import Params

STATE = "trainer_state.json"
OPTIMIZER = "optimizer.safetensors"
WEIGHTS = "model.safetensors"


def load_params(folder: Path) -> tuple[ModelConfig, dict, Params]:
    """A model folder's config (parsed and as raw JSON) and its weights as float32 copies, under
    the names the trainer uses (GPT-2's with the 'transformer.' prefix, as save_pretrained writes)."""
    ckpt = read_checkpoint(folder)
    cfg, tensors = ckpt.config, ckpt.tensors
    if cfg.mlp_bias and cfg.family != "gpt2":
        raise TrainError(f"{folder}: MLP biases in a {cfg.family} model are not supported", "tfcli trains Llama MLPs without biases")
    params = {}
    for name, shape in shapes(cfg).items():
        stored = name
        if name not in tensors and name.startswith("transformer.") and name[12:] in tensors:
            stored = name[12:]  # a GPT-2 saved without the prefix (the original OpenAI conversion)
        params[name] = np.array(tensors.get(stored, shape), dtype=np.float32)  # a copy: the mapped file stays read-only
    raw = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    return cfg, raw, params


def read_state(folder: Path) -> tuple[dict, Params]:
    """trainer_state.json and the optimizer's arrays of a checkpoint, for --resume."""
    from safetensors.numpy import load_file

    path = Path(folder) / STATE
    if not path.is_file():
        raise TrainError(f"{folder} holds no {STATE}", "--resume continues a run saved by tfcli train; start one without --resume")
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TrainError(f"{path} cannot be read ({type(e).__name__})", "start the run again without --resume") from None
    opt = Path(folder) / OPTIMIZER
    return state, (load_file(str(opt)) if opt.is_file() else {})


def check_output(folder: Path, force: bool, resume: bool) -> None:
    """-o FOLDER may be new, or empty; an existing one only with --force (written into, never
    emptied) or --resume (its own run)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise TrainError(f"{folder} is a file, not a folder", "give -o a folder name")
    if resume or not folder.exists() or not any(folder.iterdir()):
        return
    if not force:
        raise TrainError(f"{folder} already exists", "give another -o, --force to write the checkpoint into it, or --resume to continue its run")


COMPANIONS = ("generation_config.json", "special_tokens_map.json", "chat_template.jinja")


def companions(source: Path) -> dict[str, bytes]:
    """The files of a model folder that a continued model keeps as they are: its sampling
    defaults and its chat template (the weights, config and tokenizer are written anew)."""
    return {name: (Path(source) / name).read_bytes() for name in COMPANIONS if (Path(source) / name).is_file()}


def safetensors_bytes(arrays: Params) -> bytes:
    from safetensors.numpy import save

    # transformers reads the format from the metadata; "pt" is what save_pretrained writes.
    return save({k: np.ascontiguousarray(a, dtype=np.float32) for k, a in arrays.items()}, metadata={"format": "pt"})


def write_files(folder: Path, files: dict[str, bytes]) -> None:
    """Write every file completely under a temporary name, then rename them all into place."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    temps: list[tuple[Path, Path]] = []
    try:
        for name, data in files.items():
            tmp = folder / f".{name}.tmp-{os.getpid()}"
            temps.append((tmp, folder / name))
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename, so a crash cannot leave an empty file under the real name
    except BaseException:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, final in temps:
        os.replace(tmp, final)


def json_bytes(doc) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def hf_config(cfg: ModelConfig, raw: dict | None) -> dict:
    """config.json: the source's own (--from), or a new GPT-2's, as transformers' GPT2Config writes it."""
    if raw is not None:
        return {**raw, "dtype": "float32"} | ({"torch_dtype": "float32"} if "torch_dtype" in raw else {})
    eot = cfg.bos_token_id
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.0,
        "bos_token_id": eot,
        "dtype": "float32",
        "embd_pdrop": 0.0,
        "eos_token_id": eot,
        "layer_norm_epsilon": cfg.norm_eps,
        "model_type": "gpt2",
        "n_embd": cfg.d_model,
        "n_head": cfg.n_head,
        "n_inner": None,
        "n_layer": cfg.n_layer,
        "n_positions": cfg.n_ctx,
        "resid_pdrop": 0.0,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "tie_word_embeddings": cfg.tie_embeddings,
        "vocab_size": cfg.vocab_size,
    }
