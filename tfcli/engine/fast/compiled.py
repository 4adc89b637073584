"""Where the compiled kernels (kernels.py) live and which threads run them: the on-disk cache of
numba's machine code, keyed to the sources, the library versions and the CPU, and numba's OpenMP
threading layer. Imports nothing heavy: numba is imported by kernels.load() and given to
parallel_layer()."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def home_dir() -> Path:
    """$TFCLI_HOME, else $XDG_CACHE_HOME/tfcli, else ~/.cache/tfcli (store/registry.py's rule; the engine
    may not import the store)."""
    if os.environ.get("TFCLI_HOME"):
        return Path(os.path.expanduser(os.environ["TFCLI_HOME"]))
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfcli"


def cpu_name() -> str:
    """The CPU's name and feature flags: compiled code is for the machine that compiled it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f.read(65536).splitlines() if ln.startswith(("model name", "flags", "Features"))]
        return "\n".join(dict.fromkeys(lines))
    except OSError:
        import platform

        return platform.machine() + " " + platform.processor()


def cache_dir() -> Path:
    """<home>/kernels/<key>: one folder per version of the kernels' sources (kernels.py, llvm.py), of
    numba and llvmlite, and CPU, so that a folder holding the `ready` marker is one whose kernels
    numba will load without compiling (numba itself would only notice a change of kernels.py)."""
    from importlib.metadata import PackageNotFoundError, version

    key = hashlib.sha256()
    for source in (Path(__file__).with_name("kernels.py"), Path(__file__).with_name("llvm.py")):
        key.update(source.read_bytes() + str(source.stat().st_mtime_ns).encode())
    for package in ("numba", "llvmlite"):
        try:
            key.update(version(package).encode())
        except PackageNotFoundError:
            pass
    key.update(cpu_name().encode())
    base = os.environ.get("TFCLI_KERNEL_CACHE") or home_dir() / "kernels"  # the test suite shares one across its homes
    return Path(base) / key.hexdigest()[:16]


def renamed(f, name: str):
    """The same Python function under another name (its code, globals and defaults)."""
    import types

    g = types.FunctionType(f.__code__.replace(co_name=name, co_qualname=name), f.__globals__, name, f.__defaults__)
    g.__qualname__ = name
    return g


def parallel_layer(numba) -> bool:
    """Whether numba's OpenMP threading layer loads here (libgomp). Its threads wait for the next
    parallel loop spinning a short while before they sleep, as llama.cpp's do, so that the 200-odd
    products of a decode step hand over in microseconds; numba's own thread pool (workqueue) sleeps
    at once and measured slower on two threads than one. Without OpenMP, products run on one thread."""
    try:
        numba.config.THREADING_LAYER = "omp"
        from numba.np.ufunc import omppool  # noqa: F401
    except ImportError:
        return False
    return True


def writable(folder: Path) -> bool:
    """Whether files can be made in `folder` (made if missing): where compiled code can be cached."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False
