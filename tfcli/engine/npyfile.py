""".npy arrays and .npz archives from a user, read only after their headers are checked.

np.load trusts a header: one declaring 10^12 elements allocates (or fails to) before a byte of data
is read, and a damaged zip raises whatever zipfile raises. Here the header is read first (numpy's
own format.read_magic / read_array_header), and its shape, dtype and size are checked against
what the caller expects and against the bytes really there, each problem one line.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

from .errors import TfcliError
from .files import open_regular


def _header(f, what: str, error: type[TfcliError]) -> tuple[tuple[int, ...], np.dtype, bool]:
    try:
        version = npformat.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = npformat.read_array_header_1_0(f, max_header_size=100_000)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npformat.read_array_header_2_0(f, max_header_size=100_000)
        else:
            raise ValueError(f"version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as e:
        raise error(
            f"{what} is not a NumPy array file ({str(e).splitlines()[0][:80] if str(e) else type(e).__name__})",
            "save it with numpy.save",
        ) from None
    if dtype.hasobject or dtype.kind not in "fiuU":  # U: a short text (the model a file was made on)
        raise error(f"{what} holds {dtype} values, not numbers", "save a float32 array")
    return tuple(int(n) for n in shape), dtype, fortran


def check_shape(what: str, shape: tuple[int, ...], ndim: int, limit: int, error: type[TfcliError]) -> int:
    """The number of elements, refused when the shape is not ndim-dimensional or holds more than limit."""
    if len(shape) != ndim:
        raise error(
            f"{what} is an array of shape {list(shape)}; {'a vector' if ndim == 1 else f'a {ndim}-dimensional array'} "
            "is needed"
        )
    n = 1
    for s in shape:
        n *= s
    if n > limit:
        raise error(
            f"{what} declares {n:,} elements ({list(shape)}), more than the {limit:,} it may hold",
            "the file is damaged or not the one meant",
        )
    return n


def open_npy(path: Path, error: type[TfcliError], limit: int) -> np.ndarray:
    """A 2-D .npy file, memory-mapped (read lazily: memory stays flat), its header checked first."""
    path = Path(path)
    fd = open_regular(path, error)
    with os.fdopen(fd, "rb") as f:
        shape, dtype, fortran = _header(f, str(path), error)
        offset = f.tell()
        size = os.fstat(f.fileno()).st_size
        n = check_shape(str(path), shape, 2, limit, error)
        if dtype.kind not in "fiu":
            raise error(f"{path} holds {dtype} values, not numbers", "save a float32 array")
        if n * dtype.itemsize > size - offset:
            raise error(
                f"{path} is truncated: its header declares {list(shape)} ({n * dtype.itemsize:,} bytes), the file "
                f"holds {size - offset:,}",
                "save it again",
            )
        if n == 0:
            raise error(f"{path} holds no vectors ({list(shape)})", "give an [N, D] array with N, D > 0")
        # the file checked is the file mapped (the map outlives the descriptor), not one put at the path since
        return np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def read_npz(path: Path, expect: dict[str, tuple[int, int]], error: type[TfcliError]) -> dict[str, np.ndarray]:
    """The members named in expect ({name: (ndim, element limit)}) of a .npz, each header checked
    before its data is read; a damaged zip, a missing member or a wrong shape is one line."""
    path = Path(path)
    fd = open_regular(path, error)
    out = {}
    try:
        with os.fdopen(fd, "rb") as raw, zipfile.ZipFile(raw) as z:
            for name, (ndim, limit) in expect.items():
                try:
                    member = z.open(name + ".npy")
                except KeyError:
                    raise error(f"{path} has no {name!r} array", "save the file again") from None
                with member as f:
                    shape, dtype, fortran = _header(f, f"{path}:{name}", error)
                    n = check_shape(f"{path}:{name}", shape, ndim, limit, error)
                    data = f.read(n * dtype.itemsize + 1)
                if len(data) != n * dtype.itemsize:
                    raise error(
                        f"{path}:{name} holds {len(data):,} bytes, its header declares {n * dtype.itemsize:,}",
                        "save the file again",
                    )
                out[name] = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, NotImplementedError) as e:
        raise error(f"{path} is not a readable .npz archive ({type(e).__name__})", "save the file again") from None
    return out
