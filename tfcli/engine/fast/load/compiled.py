"""Where the compiled kernels live: the on-disk folder of their machine code (build.py writes it,
kernels.py loads it), keyed to the sources, the compiler's versions and the CPU. Imports nothing heavy."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
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
    """<home>/kernels/<key>: one folder per version of the kernels' sources (every file of fast/source/,
    and fast/arguments.py), of numba and llvmlite, and CPU, so that a folder holding the `ready` marker
    holds machine code for these sources on this machine."""
    from importlib.metadata import PackageNotFoundError, version

    fast = Path(__file__).resolve().parents[1]
    key = hashlib.sha256()
    for path in [*sorted((fast / "source").rglob("*.py")), fast / "arguments.py"]:  # blocks32/, k_quants/ too
        key.update(path.read_bytes())  # their bytes: a fresh checkout of the same sources finds its kernels
    for package in ("numba", "llvmlite"):
        try:
            key.update(version(package).encode())
        except PackageNotFoundError:
            pass
    key.update(cpu_name().encode() + os.environ.get("TFCLI_KERNEL_FEATURES", "host").encode())
    base = os.environ.get("TFCLI_KERNEL_CACHE") or home_dir() / "kernels"  # the test suite shares one across its homes
    return Path(base) / key.hexdigest()[:16]


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


KEEP = 3  # compiled folders kept for this CPU: the newest (a few versions of tfcli may share a home)
KEY = re.compile(r"[0-9a-f]{16}")  # a key folder's name: cache_dir()'s last part
MARKER = "tfcli kernels"  # the first words of a `ready` file tfcli wrote (build.py), then tfcli's version


def marker() -> str:
    """What build.py writes into `ready`, last of all: whose folder this is, and for what."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("tfcli")
    except PackageNotFoundError:
        mine = "source"
    return f"{MARKER} {mine}\n{cpu_name()}\n"


def read_regular(path: Path, limit: int) -> bytes:
    """files.read_small for the cache's own files (a link refused too: tfcli writes none there); an
    OSError when `path` is not a regular file of at most `limit` bytes. Never blocks on a FIFO."""
    from ...errors import TfcliError
    from ...files import read_small

    try:
        return read_small(path, limit, follow=False)
    except TfcliError as e:
        raise OSError(str(e)) from None


def ours(folder: Path) -> bool:
    """Whether `folder` is a complete folder of compiled kernels that tfcli wrote: a real folder (not a
    link) named like a key, holding a regular `index.json` and a `ready` marker that says so. Nothing
    else in a cache folder is tfcli's to load, replace or remove: a user may point TFCLI_KERNEL_CACHE
    at a folder of their own things."""
    try:
        if not KEY.fullmatch(folder.name) or not stat.S_ISDIR(os.lstat(folder).st_mode):
            return False
        if not stat.S_ISREG(os.lstat(folder / "index.json").st_mode):
            return False
        return read_regular(folder / "ready", 1 << 16).decode("utf-8", "replace").startswith(MARKER + " ")
    except OSError:
        return False


def remove_stale(folder: Path) -> None:
    """Remove the folders older sources compiled for this CPU beyond the newest KEEP. Only folders
    tfcli wrote are considered (ours()): anything else beside them is left as it is, and so are
    folders for other CPUs (a home shared among machines)."""
    mine = []
    try:
        others = list(folder.parent.iterdir())
    except OSError:
        return
    for other in others:
        try:
            if other == folder or not ours(other):
                continue
            if cpu_name() in read_regular(other / "ready", 1 << 16).decode("utf-8", "replace"):
                mine.append((os.lstat(other / "ready").st_mtime, other))
        except OSError:
            continue
    for _, other in sorted(mine, reverse=True)[KEEP - 1 :]:  # KEEP - 1 besides `folder`, the newest
        if ours(other):  # checked again just before: another process may have changed it meanwhile
            shutil.rmtree(other, ignore_errors=True)


def key_taken(folder: Path) -> str | None:
    """Why the key's path `folder` cannot take a new compile, or None: something tfcli did not write
    is there (a file, a link, a FIFO, a folder of someone's files). An empty folder is taken over."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot look at the kernel cache folder {folder} ({e.strerror})"
    if stat.S_ISDIR(st.st_mode):
        try:
            folder.rmdir()  # empty: nothing of anyone's is lost
            return None
        except OSError:
            pass
    what = "a file"
    if stat.S_ISDIR(st.st_mode):
        what = "a folder tfcli did not write"
    elif stat.S_ISLNK(st.st_mode):
        what = "a link"
    return (
        f"{folder} is {what}, where tfcli keeps its compiled kernels: "
        "move it away, or set TFCLI_KERNEL_CACHE to another folder"
    )


def orphan_guard() -> str:
    """Python lines the compiling child runs first: it asks Linux for SIGKILL when its parent dies
    (prctl PR_SET_PDEATHSIG = 1), then checks its parent is still the one that started it (which may
    have died before the request). Elsewhere an exception in the parent's wait kills the child."""
    return f"""import os, sys
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)
except (OSError, AttributeError):
    pass
if os.getppid() != {os.getpid()}:
    sys.exit("the process that started the compile has ended")
"""
