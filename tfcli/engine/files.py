"""Opening the files tfcli reads (a model's files, a GGUF, its caches and indexes, training data,
SAE folders) as untrusted input: one helper, `open_regular` (a descriptor) or `open_file` (a file
object), and `read_small` for the small ones (configs, tokenizers, templates, indexes).

Only regular files are read: a named pipe would block the open or the read forever, and a device
such as /dev/urandom never ends. The file is opened without blocking and checked with fstat (one
open, so that what is checked is what is read), and a small file's size is bounded before a byte
is read: a config.json of 3 GB is refused with one line, not read into memory.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import CheckpointError, TfcliError, printable

# Bounds far above any real file of the kind (a large vocabulary's tokenizer.json is tens of MB).
CONFIG_BYTES = 16_000_000  # config.json, generation_config.json, the shard index
TOKENIZER_BYTES = 256_000_000  # tokenizer.json
TEMPLATE_BYTES = 64_000_000  # tokenizer_config.json (its added tokens and chat template), chat_template.jinja


def kind_of(mode: int) -> str | None:
    """What a file that is not a regular file is, for a message; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    for test, name in kinds:
        if test(mode):
            return name
    return "not a regular file"


MISSING = ("is missing", "the model folder is incomplete; fetch or save it again")


def open_regular(path: Path, error: type[TfcliError] = CheckpointError, follow: bool = True,
                 missing: tuple[str, str] = MISSING) -> int:  # fmt: skip
    """A read-only descriptor of `path`, refused with one line unless it is a regular file: the one
    way tfcli opens a file it reads (a model's files, a GGUF, its caches and indexes, data, SAEs).
    O_NONBLOCK: opening a named pipe with no writer returns at once instead of waiting for one, and
    fstat of what was opened (not a stat of the name before) decides, so nothing can be swapped in
    between. follow=False: a symbolic link is refused too (O_NOFOLLOW), for files tfcli itself keeps.
    `missing`: what a missing file is said to be, and the fix."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{printable(str(path))} {missing[0]}", missing[1]) from None
    except PermissionError:
        raise error(
            f"{printable(str(path))} cannot be read (permission denied)", "check the file's permissions"
        ) from None
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise error(f"{printable(str(path))} is a symbolic link, not a file", "put the file itself there") from None
        raise error(
            f"cannot open {printable(str(path))}: {e.strerror or e}", "check that it is a readable file"
        ) from None
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise error(f"{printable(str(path))} is {kind}, not a file", "put the file itself there")
        os.set_blocking(fd, True)  # a regular file: ordinary reads from here on
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: Path, error: type[TfcliError] = CheckpointError, follow: bool = True,
              missing: tuple[str, str] = MISSING) -> BinaryIO:  # fmt: skip
    """open_regular as a binary file object (`with open_file(p) as f:`)."""
    return os.fdopen(open_regular(Path(path), error, follow, missing), "rb")


def read_small(path: Path, limit: int, error: type[TfcliError] = CheckpointError, follow: bool = True,
               missing: tuple[str, str] = MISSING) -> bytes:  # fmt: skip
    """The bytes of the regular file `path`, refused with one line when it holds more than `limit`."""
    path = Path(path)
    fd = open_regular(path, error, follow, missing)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise error(
                f"{printable(str(path))} is {size:,} bytes, more than the {limit:,} a {path.name} may hold",
                "the file is corrupt or not what its name says; fetch or save it again",
            )
        chunks, total = [], 0
        while total <= limit:  # read to the end even if the file grew since fstat, but never past the bound
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise error(
                f"{printable(str(path))} holds more than the {limit:,} bytes a {path.name} may hold",
                "the file is corrupt or still growing; fetch or save it again",
            )
        return b"".join(chunks)
    except OSError as e:
        raise error(
            f"cannot read {printable(str(path))}: {e.strerror or e}", "check that it is a readable file"
        ) from None
    finally:
        os.close(fd)


def read_small_text(path: Path, limit: int, error: type[TfcliError] = CheckpointError) -> str:
    """Like read_small, decoded as UTF-8 (one line when it is not)."""
    data = read_small(path, limit, error)
    check_utf8_file(path, data, error)
    return data.decode("utf-8")


def check_utf8_file(path: Path, data: bytes, error: type[TfcliError] = CheckpointError) -> None:
    """One line when the bytes of a text file are not UTF-8. Decoded a megabyte at a time: the whole
    file as one str would take up to 4 bytes a character (a 16 MB tokenizer.json, 64 MB)."""
    import codecs

    decoder, step = codecs.getincrementaldecoder("utf-8")(), 1 << 20
    for start in range(0, max(len(data), 1), step):
        pending = len(decoder.getstate()[0])  # bytes of a character the last chunk cut, decoded with this one
        try:
            decoder.decode(data[start : start + step], final=start + step >= len(data))
        except UnicodeDecodeError as e:
            at = start - pending + e.start
            raise error(
                f"{printable(str(path))} is not UTF-8 text (byte {at:,})", f"save {Path(path).name} as UTF-8"
            ) from None


def read_at(path: Path, offset: int, out) -> None:
    """Fill the buffer `out` (a C-contiguous array) with the bytes of `path` from `offset`, read with
    preadv rather than through a memory map: a copy a model keeps (a fused matrix) then never
    counts twice in resident memory, once as the copy and once as the mapped pages it came from."""
    view = memoryview(out.reshape(-1)).cast("B")
    with open_file(path) as f:
        done = 0
        while done < len(view):
            n = os.preadv(f.fileno(), [view[done:]], offset + done)
            if n <= 0:
                raise CheckpointError(
                    f"{Path(path).name} ended while reading it", "the file is truncated; fetch or save it again"
                )
            done += n


def json_text(doc, indent: int | None = 2) -> str:
    """`doc` as JSON text that any file can hold: UTF-8 as it is, except the lone surrogates by which
    Python spells a file name's bytes that are not UTF-8 (`caf\\xe9.gguf` is 'caf\\udce9.gguf'),
    written as \\udcXX escapes (a UnicodeEncodeError otherwise). json.loads reads them back to the
    same string, so the name names the same file."""
    import json

    text = json.dumps(doc, indent=indent, ensure_ascii=False)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # only surrogates fail to encode
