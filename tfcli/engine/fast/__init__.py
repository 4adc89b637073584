"""The fast room: what the executor door (engine/executor.py) opens onto. A reader may skip it.

Everything here computes what the textbook computes (engine/ops.py, engine/formats.py), faster, and
each piece has a test that holds it equal to its twin: compiled products on quantized blocks
(kernels.py, imported only when such a product first runs; their sources are jobs.py, llvm.py,
llvm_q8.py, llvm_x8.py, attention_job.py and block_job.py, compiled by build.py, loaded by
elf.py, run on pool.py's threads).

The callers that pick the fast executor (a Session, the CLI, the server) import it from here:
`from tfcli.engine.fast import FAST, Fast, RowByRow, on_kernels`, looked up on first use.
"""

from __future__ import annotations

_LAZY = {"FAST": "executor", "Fast": "executor", "RowByRow": "executor", "on_kernels": "executor"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
