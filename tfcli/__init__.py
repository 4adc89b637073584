"""tfcli: a readable NumPy transformer, and a command line that shows what it is made of.

The public Python API is what `__all__` lists, and only that: `load` a model, run it with
`run_with_cache` and hooks, and the experiments (`lens`, `patch`, `ablate`, `steer`, `heads`,
`attention`, `mask`, `features`, `params`) as functions returning results that print their text
form, draw themselves in Jupyter and save as .png, .svg or .json. Every other module
(tfcli.engine, tfcli.api, tfcli.cli ...) is private: free to change between versions.

    >>> import tfcli
    >>> model = tfcli.load("shakespeare")
    >>> logits, cache = model.run_with_cache("To be, or not to be")
    >>> cache["resid_post", 3].shape[1] == model.config.d_model
    True

Importing tfcli is cheap: NumPy and the engine are imported when a name is first used.
"""

import os

# OpenBLAS's idle threads spin for about 0.1 s after each threaded product before they sleep. A
# batch step or a lookup check runs its MLP on two threads of its own (engine/fast/run/fast_executor.py),
# and a spinning BLAS thread then takes half a core from them: a 16-token pass right after a
# decode step took 80 ms instead of 51. 2^20 cycles (under a millisecond) still keeps the threads
# awake between the products of a decode step. Read when NumPy loads OpenBLAS, so it is set here,
# before anything imports NumPy; a value already in the environment wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

__version__ = "0.1.0"

# name -> the private module that holds it, imported on first use (module __getattr__, PEP 562)
_PUBLIC = {
    "load": "tfcli.api.model",
    "Model": "tfcli.api.model",
    "ActivationCache": "tfcli.api.cache",
    "TfcliError": "tfcli.engine.errors",
    "lens": "tfcli.api.experiments",
    "patch": "tfcli.api.experiments",
    "ablate": "tfcli.api.experiments",
    "steer": "tfcli.api.experiments",
    "heads": "tfcli.api.experiments",
    "attention": "tfcli.api.experiments",
    "mask": "tfcli.api.experiments",
    "features": "tfcli.api.experiments",
    "params": "tfcli.api.experiments",
    "train_features": "tfcli.api.training",
    "explore_page": "tfcli.api.page",
    "Features": "tfcli.api.experiments",
    # what the experiments return (tfcli/api/results.py, attention.py, features.py, params.py)
    "Lens": "tfcli.api.results",
    "Patching": "tfcli.api.results",
    "Ablation": "tfcli.api.results",
    "Heads": "tfcli.api.results",
    "Steering": "tfcli.api.results",
    "Attention": "tfcli.api.attention",
    "Mask": "tfcli.api.attention",
    "FeatureShow": "tfcli.api.features",
    "FeatureCards": "tfcli.api.features",
    "Params": "tfcli.api.params",
    "Training": "tfcli.api.training",
    "ExplorePage": "tfcli.api.page",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'tfcli' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
