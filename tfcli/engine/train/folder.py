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
from ..errors import shown
from ..files import CONFIG_BYTES, TEMPLATE_BYTES, json_text, read_small
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
        raise TrainError(f"{folder}: MLP biases in a {cfg.family} model are not supported",
                         "tfcli trains Llama MLPs without biases")
    params = {}
    for name, shape in shapes(cfg).items():
        stored = name
        if name not in tensors and name.startswith("transformer.") and name[12:] in tensors:
            stored = name[12:]  # a GPT-2 saved without the prefix (the original OpenAI conversion)
        params[name] = np.array(tensors.get(stored, shape), dtype=np.float32)  # a copy: the mapped file stays read-only
    raw = json.loads(read_small(Path(folder) / "config.json", CONFIG_BYTES, TrainError))
    return cfg, raw, params


def read_state(folder: Path) -> tuple[dict, Params]:
    """trainer_state.json and the optimizer's arrays of a checkpoint, for --resume; the state is
    checked field by field (check_state), the arrays only read here (check_optimizer checks them
    against the model)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = Path(folder) / STATE
    if not path.is_file():
        raise TrainError(f"{folder} holds no {STATE}",
                         "--resume continues a run saved by tfcli train; start one without --resume")
    try:
        state = json.loads(read_small(path, STATE_BYTES, TrainError), parse_int=_bounded_int)
    except (OSError, ValueError, RecursionError) as e:
        raise TrainError(f"{path} cannot be read ({type(e).__name__}: {shown(str(e), 120)})",
                         "start the run again without --resume") from None
    check_state(state, path)
    opt = Path(folder) / OPTIMIZER
    if not opt.is_file():
        if state["settings"]["optimizer"] == "adamw" and state["step"] > 0:
            raise TrainError(
                f"{folder} holds no {OPTIMIZER}: AdamW's moments (m, v) of step {state['step']:,} are lost, "
                "and a resume would not continue the run exactly",
                "restore the file, or start the run again without --resume",
            )  # fmt: skip
        return state, {}
    try:
        return state, load_file(str(opt))
    except (SafetensorError, OSError, ValueError) as e:
        raise TrainError(f"{opt} cannot be read ({shown(str(e), 120)})",
                         "restore the file, or start the run again without --resume") from None


STATE_BYTES = 256 << 20  # trainer_state.json: the losses of 2^24 steps, written with 6 decimals


def _bounded_int(text: str):
    if len(text.lstrip("-")) > 40:
        raise ValueError(f"an integer of {len(text):,} digits")
    return int(text)


# What trainer_state.json's settings must be (run.Settings), as (type, check) by field.
_POSITIVE = (int, lambda v: 1 <= v <= 1 << 24)
SETTINGS = {
    "text": (str, None), "layers": _POSITIVE, "d_model": _POSITIVE, "heads": _POSITIVE, "context": _POSITIVE,
    "tokenizer": (str, lambda v: v in ("char", "model") or v.startswith("bpe:")),
    "from_model": ((str, type(None)), None), "dropout": (float, lambda v: 0 <= v < 1),
    "optimizer": (str, lambda v: v in ("adamw", "sgd")), "lr": (float, lambda v: 0 < v < 1e3),
    "betas": (list, lambda v: len(v) == 2 and all(_number(b) and 0 <= b < 1 for b in v)),
    "eps": (float, lambda v: 0 < v < 1),
    "weight_decay": (float, lambda v: 0 <= v < 1e3), "warmup": (int, lambda v: 0 <= v <= 1 << 24),
    "lr_schedule": (str, lambda v: v in ("cosine", "constant")), "clip": (float, lambda v: v >= 0),
    "batch_size": (int, lambda v: 1 <= v <= 1 << 16), "seq_len": _POSITIVE, "steps": _POSITIVE,
    "seed": (int, lambda v: 0 <= v < 1 << 63), "val_fraction": (float, lambda v: 0 <= v < 1),
    "data_order": (str, lambda v: v in ("random", "sequential")), "eval_every": _POSITIVE,
    "causal": (bool, None), "lora": (int, lambda v: 0 <= v <= 1 << 16), "lora_alpha": (float, lambda v: 0 <= v < 1e6),
    "lora_targets": (list, lambda v: all(isinstance(t, str) for t in v)),
}  # fmt: skip
OPTIONAL = {"causal", "lora", "lora_alpha", "lora_targets"}  # absent from checkpoints written before them


def _number(v) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_state(state, path: Path) -> None:
    """trainer_state.json as tfcli writes it, or a TrainError naming the first field that is not:
    the settings (types and ranges), a step from 0 to 2^24 with one loss per step, the losses and
    evaluations finite numbers, the seconds and the text's hash."""

    def wrong(what: str) -> TrainError:
        return TrainError(f"{path} is not a run tfcli can resume: {what}", "start the run again without --resume")

    if not isinstance(state, dict):
        raise wrong(f"it holds {type(state).__name__}, not an object")
    settings = state.get("settings")
    if not isinstance(settings, dict):
        raise wrong("'settings' is missing or not an object")
    for name, (kind, ok) in SETTINGS.items():
        if name not in settings and name in OPTIONAL:
            continue
        v = settings.get(name)
        typed = _number(v) if kind is float else (isinstance(v, kind) and not (kind is int and isinstance(v, bool)))
        if not typed or (ok is not None and not ok(v)):
            raise wrong(f"settings.{name} is {shown(v, 60)}")
    step = state.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= 1 << 24:
        raise wrong(f"'step' is {shown(step, 60)}, not a step from 0 to {1 << 24:,}")
    losses, evals = state.get("losses"), state.get("evals")
    if not isinstance(losses, list) or len(losses) != step or not all(_number(x) for x in losses):
        raise wrong(f"'losses' is not {step:,} finite numbers (one per step)")
    pair = lambda e: isinstance(e, list) and len(e) == 2 and isinstance(e[0], int)  # noqa: E731
    if not isinstance(evals, list) or not all(pair(e) and 0 <= e[0] <= step and _number(e[1]) for e in evals):
        raise wrong("'evals' is not a list of [step, loss] pairs")
    if not _number(state.get("seconds")) or not 0 <= state["seconds"] < 1e10:
        raise wrong(f"'seconds' is {shown(state.get('seconds'), 60)}")
    commands = state.get("commands", [])
    if not isinstance(commands, list) or not all(pair(c) and isinstance(c[1], str) for c in commands):
        raise wrong("'commands' is not a list of [step, command] pairs")
    if not isinstance(state.get("text_sha256"), str):
        raise wrong("'text_sha256' is missing")
    threads = state.get("threads", 1)  # absent from checkpoints written before it was kept
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 1 << 16:
        raise wrong(f"'threads' is {shown(threads, 60)}, not a thread count")


def check_optimizer(arrays: Params, params: Params, optimizer: str, out: Path, step: int) -> None:
    """AdamW's m and v for exactly the model's parameters, each of its shape, finite and v >= 0
    (SGD keeps nothing, nor does a run saved before its first step); else a TrainError naming the
    first array that is wrong."""
    if optimizer != "adamw" or (step == 0 and not arrays):
        return
    where = Path(out) / OPTIMIZER
    expected = {f"{k}.{name}": p.shape for name, p in params.items() for k in ("m", "v")}
    missing, extra = sorted(set(expected) - set(arrays)), sorted(set(arrays) - set(expected))
    if missing or extra:
        what = f"no {missing[0]}" if missing else f"an array {shown(extra[0], 80)} the model has no parameter for"
        raise TrainError(f"{where} does not belong to this model: it has {what}",
                         "restore the file, or start the run again without --resume")
    for name, shape in expected.items():
        a = arrays[name]
        if a.shape != shape or a.dtype != np.float32:
            raise TrainError(f"{where}: {name} is {a.dtype} {list(a.shape)}, the model needs float32 {list(shape)}",
                             "restore the file, or start the run again without --resume")
        if not np.isfinite(a).all() or (name.startswith("v.") and (a < 0).any()):
            raise TrainError(f"{where}: {name} holds values no run writes (not finite, or a negative v)",
                             "restore the file, or start the run again without --resume")


def check_output(folder: Path, force: bool, resume: bool) -> None:
    """-o FOLDER may be new, or empty; an existing one only with --force (written into, never
    emptied) or --resume (its own run)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise TrainError(f"{folder} is a file, not a folder", "give -o a folder name")
    if resume or not folder.exists() or not any(folder.iterdir()):
        return
    if not force:
        raise TrainError(f"{folder} already exists",
                         "give another -o, --force to write the checkpoint into it, or --resume to continue its run")


COMPANIONS = ("generation_config.json", "special_tokens_map.json", "chat_template.jinja")


def companions(source: Path) -> dict[str, bytes]:
    """The files of a model folder that a continued model keeps as they are: its sampling
    defaults and its chat template (the weights, config and tokenizer are written anew)."""
    present = [name for name in COMPANIONS if (Path(source) / name).is_file()]
    return {name: read_small(Path(source) / name, TEMPLATE_BYTES, TrainError) for name in present}


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
                # on disk before the rename, so a crash cannot leave an empty file under the real name
                os.fsync(f.fileno())
    except BaseException:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, final in temps:
        os.replace(tmp, final)


def json_bytes(doc) -> bytes:
    return (json_text(doc) + "\n").encode("utf-8")  # a data file's name may hold bytes that are not UTF-8


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
