"""The tfcli inference engine: pure NumPy, no printing, no exiting; errors are TfcliErrors.

Importing this package is free: `load` and friends are looked up on first use, so that commands
which only need `tfcli.engine.errors` (tfcli params, tfcli --help) never import NumPy.
"""

from __future__ import annotations

_LAZY = {
    "LoadedModel": "loader",
    "load_folder": "loader",
    "build": "loader",
    "ModelConfig": "config",
    "Transformer": "model",
    "Tokenizer": "tokenizer",
    "TfcliError": "errors",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
