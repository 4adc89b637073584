"""The fast room: what the executor door (engine/executor.py) opens onto. A reader may skip it.

Everything here computes what the textbook computes (engine/ops.py, engine/formats.py), faster, and
each piece has a test that holds it equal to its twin. Three rooms, by kind:

    run/       run-time Python: the fast executor (run/fast_executor.py), products and attention,
               the compiled blocks' driver, prompt parts, activations, interleaved rows
    source/    the kernels' sources, build-time: numba jobs and LLVM vector code, the thread pool's
               IR, and build.py that compiles them in a process of its own (the only numba imports)
    load/      where the compiled code lives (compiled.py), the ELF loader (elf.py), the caller of
               the loaded kernels (load/kernels.py, imported only when a product first runs), pages
    arguments.py   what each compiled job takes, read by both sides

The callers that pick the fast executor (a Session, the CLI, the server) import it from here:
`from tfcli.engine.fast import FAST, Fast, RowByRow, on_kernels` (and `prepare`, which compiles or
loads the kernels ahead of a first product), looked up on first use.
"""

from __future__ import annotations

_LAZY = {**{name: "run.fast_executor" for name in ("FAST", "Fast", "RowByRow", "on_kernels")},
         "prepare": "run.kernel_products"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
