"""A sparse autoencoder's folder, as SAELens writes one: sae.safetensors and cfg.json.

    sae.safetensors   W_enc [D, N], b_enc [N], W_dec [N, D], b_dec [D]   (float32)
    cfg.json          SAELens's keys (d_in, d_sae, hook_name "blocks.B.hook_resid_post", hook_layer,
                      architecture, activation_fn_str, apply_b_dec_to_input, model_name, ...) and a
                      "tfcli" object: the model's identity (engine/identity.py), block, site, kind,
                      k, the training settings and the quality measured at the end of training.

Reading checks everything before any number is used: the header (engine/weightfile.py), the four
names, their shapes against each other and against cfg.json, finite values.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, TfcliError, shown, shown_number
from ..files import CONFIG_BYTES, read_small_text
from .folder import json_bytes, safetensors_bytes, write_files
from .model import Params

WEIGHTS, CONFIG = "sae.safetensors", "cfg.json"
NAMES = ("W_enc", "b_enc", "W_dec", "b_dec")
# tfcli's site names as TransformerLens (and so SAELens) name its hook points.
HOOKS = {"resid_pre": "hook_resid_pre", "resid_mid": "hook_resid_mid", "resid_post": "hook_resid_post",
         "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out"}  # fmt: skip


# What a cfg.json's numbers may be: far above any real SAE, far below what would exhaust memory or
# overflow an index (a width of 2^20 floats is 4 MB a vector; 2^26 features of width 1 is 256 MB).
MAX_WIDTH, MAX_FEATURES, MAX_COUNT = 1 << 20, 1 << 26, 1 << 40
MAX_SEED = (1 << 63) - 1  # seeds run from 0 to 2^63-1, as everywhere in tfcli


def _whole(cfg: dict, key: str, low: int, high: int, folder: Path, name: str | None = None) -> int:
    """cfg[key] as a whole number from low to high, refused in one line otherwise (a float such as
    Infinity or 3.5, a string, a bool, a number out of range), before anything is made of it."""
    name = name or key
    value = cfg.get(key)
    if isinstance(value, float) and value.is_integer() and low <= value <= high:
        value = int(value)  # 768.0: a whole number written by a tool that writes floats
    if isinstance(value, bool) or not isinstance(value, int):
        what = "missing" if key not in cfg else f"{shown(value, 40)}, not a whole number"
        raise SAEError(f"{folder}/{CONFIG}: {name} is {what}", "train the SAE again")
    if not low <= value <= high:
        raise SAEError(f"{folder}/{CONFIG}: {name} is {shown_number(value)}, not between {low:,} and {high:,}",
                       "train the SAE again")
    return value


class SAEError(TfcliError):
    """An SAE folder that cannot be read, or one that does not fit the model it is used with."""


def hook_name(site: str, block: int | None) -> str | None:
    return (
        None if block is None else f"blocks.{block}.{HOOKS[site]}"
    )  # None: vectors of no recorded block (--activations)


def sae_config(d: int, n: int, kind: str, k: int, model_name: str, block: int, site: str, context: int,
               tfcli: dict) -> dict:  # fmt: skip
    return {
        "architecture": "topk" if kind == "topk" else "standard",
        "d_in": d,
        "d_sae": n,
        "dtype": "float32",
        "device": "cpu",
        "model_name": model_name,
        "hook_name": hook_name(site, block),
        "hook_layer": block,
        "hook_head_index": None,
        "activation_fn_str": kind,
        "activation_fn_kwargs": {"k": k} if kind == "topk" else {},
        "apply_b_dec_to_input": True,
        "finetuning_scaling_factor": False,
        "normalize_activations": "none",  # the scale used in training is folded into the weights
        "context_size": context,
        "prepend_bos": False,
        "tfcli": tfcli,
    }


def write_sae(folder: Path, params: Params, cfg: dict) -> None:
    write_files(Path(folder), {WEIGHTS: safetensors_bytes({k: params[k] for k in NAMES}), CONFIG: json_bytes(cfg)})


def read_sae(folder: Path) -> tuple[dict, Params]:
    """(cfg.json, the four arrays as float32 copies), each checked; one line for any problem."""
    from ..weightfile import WeightFile

    folder = Path(folder)
    what = f"{folder} is not an SAE folder"
    hint = "give the folder 'tfcli features train -o' wrote"
    if not folder.is_dir():
        raise SAEError(f"{what} ({'it does not exist' if not folder.exists() else 'it is a file'})", hint)
    if not (folder / CONFIG).is_file() or not (folder / WEIGHTS).is_file():
        raise SAEError(f"{what} (it has no {CONFIG if not (folder / CONFIG).is_file() else WEIGHTS})", hint)
    try:
        cfg = json.loads(read_small_text(folder / CONFIG, CONFIG_BYTES, SAEError))
    except (ValueError, RecursionError) as e:
        raise SAEError(f"{folder}/{CONFIG} is not valid JSON ({type(e).__name__})", "train the SAE again") from None
    if not isinstance(cfg, dict):
        raise SAEError(f"{folder}/{CONFIG} is not a JSON object", "train the SAE again")
    d = _whole(cfg, "d_in", 1, MAX_WIDTH, folder)
    n = _whole(cfg, "d_sae", 1, MAX_FEATURES, folder)
    kind = cfg.get("activation_fn_str", "relu")
    if kind not in ("relu", "topk"):
        raise SAEError(f"{folder}/{CONFIG}: activation {shown(kind, 40)} is not one tfcli runs",
                       "tfcli runs relu and topk SAEs")
    kwargs = cfg.get("activation_fn_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise SAEError(f"{folder}/{CONFIG}: activation_fn_kwargs is not an object", "train the SAE again")
    k = _whole(kwargs, "k", 1, n, folder, "activation_fn_kwargs.k") if kind == "topk" else 0
    for key in ("hook_layer", "context_size"):  # read by the model checks (hook_layer) or only shown
        if cfg.get(key) is not None:
            _whole(cfg, key, 0, MAX_COUNT, folder)
    t = cfg.get("tfcli")
    if isinstance(t, dict):
        for key in ("block", "n", "k", "steps", "batch_size", "seed", "tokens"):
            if t.get(key) is not None:
                _whole(t, key, 0, MAX_SEED if key == "seed" else MAX_COUNT, folder, f"tfcli.{key}")
    fn_kwargs = {**kwargs, "k": k} if kind == "topk" else kwargs
    cfg = {**cfg, "d_in": d, "d_sae": n, "activation_fn_str": kind, "activation_fn_kwargs": fn_kwargs}
    try:
        wf = WeightFile(folder / WEIGHTS)
    except CheckpointError as e:
        raise SAEError(f"{folder}/{WEIGHTS} is corrupt: {e.message}", "train the SAE again") from None
    want = {"W_enc": (d, n), "b_enc": (n,), "W_dec": (n, d), "b_dec": (d,)}
    params: Params = {}
    for name, shape in want.items():
        info = wf.tensors.get(name)
        if info is None:
            raise SAEError(f"{folder}/{WEIGHTS} has no tensor {name}", "train the SAE again")
        if tuple(info.shape) != shape:
            raise SAEError(f"{folder}/{WEIGHTS}: {name} is {list(info.shape)}, cfg.json says {list(shape)}",
                           "train the SAE again")
        try:
            params[name] = np.array(wf.float32(name), dtype=np.float32)
        except CheckpointError as e:
            raise SAEError(f"{folder}/{WEIGHTS}: {e.message}", "train the SAE again") from None
        if not np.isfinite(params[name]).all():
            raise SAEError(f"{folder}/{WEIGHTS}: {name} holds NaN or infinite values", "train the SAE again")
    return cfg, params
