"""The corpora the recipes use (features train, train, the model cards' score --file checks).

They do not travel with the package: `tfcli data pull NAME` downloads one from its public source
into $TFCLI_HOME/data, checked against a pinned sha256, as `tfcli pull` does for models; a copy on
disk can be given instead (`--from FILE`, checked the same way), and TFCLI_DATA_URL names a mirror
(a folder served over HTTP, or file://) that holds the files under their names, for offline use.

A corpus that no public file gives byte for byte (the Tang poems: extracted from many JSON files,
the simplified ones converted with OpenCC) has no download of its own: its source is described,
and a local copy or a mirror is taken. The engine never prints: progress(stage, done, total).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tfcli.engine.errors import ModelNotFoundError, PullError, UsageError

from .registry import home_dir

MIRROR = "TFCLI_DATA_URL"  # a base URL (http://, https://, file://) holding the corpora under their file names


@dataclass(frozen=True)
class Corpus:
    name: str
    file: str  # its file name, in the cache and on a mirror
    sha256: str  # of the file the shipped models were trained on
    size: int  # bytes
    what: str
    source: str  # where it comes from, one line
    licence: str
    url: str | None = None  # a public file that is exactly this corpus; None: none is (see `derived`)
    derived: str | None = None  # why no public file gives these bytes, and how they were made
    source_zh: str = ""  # `source` and `licence` in Chinese, for `tfcli data --lang zh`
    licence_zh: str = ""


CORPORA: dict[str, Corpus] = {
    c.name: c
    for c in (
        Corpus(
            "shakespeare",
            "tinyshakespeare.txt",
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            1_115_394,
            "about 40,000 lines of Shakespeare's plays (the shipped shakespeare model's corpus)",
            "karpathy/char-rnn, data/tinyshakespeare/input.txt",
            "public domain",
            url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            source_zh="karpathy/char-rnn 的 data/tinyshakespeare/input.txt",
            licence_zh="公有领域",
        ),
        Corpus(
            "tang-traditional",
            "tang_poems.txt",
            "9cc119862f7778cb77923557af53b32b32d64b4ffcbc65c41d2de62d442b0aa5",
            12_662_844,
            "57,603 poems of the Complete Tang Poems (全唐诗), traditional characters, a poem per block",
            "chinese-poetry/chinese-poetry, the poet.tang.*.json files",
            "poems public domain; collection MIT",
            derived="extracted from 58 JSON files (title line, then the lines of each poem): no single public file "
            "holds these bytes",
            source_zh="chinese-poetry/chinese-poetry 的 poet.tang.*.json 文件",
            licence_zh="诗作属公有领域；合集为 MIT",
        ),
        Corpus(
            "tang",
            "tang_poems_simplified.txt",
            "fb17315d413aaf581bc04b2ec990bda1415cf0b8d4d007c33c945b4cb890dfa6",
            12_664_857,
            "the same poems in simplified characters (the shipped tang model's corpus)",
            "tang_poems.txt converted with OpenCC's t2s table",
            "poems public domain; collection MIT",
            derived="converted from tang_poems.txt with OpenCC (t2s): the bytes depend on OpenCC's version, so no "
                    "download rebuilds them",
            source_zh="tang_poems.txt 经 OpenCC 的 t2s 表转成简体",
            licence_zh="诗作属公有领域；合集为 MIT",
        ),
    )
}


def data_dir() -> Path:
    return home_dir() / "data"


def corpus(name: str) -> Corpus:
    if name not in CORPORA:
        import difflib

        close = difflib.get_close_matches(name, list(CORPORA), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else f"the corpora: {', '.join(CORPORA)}"
        raise ModelNotFoundError(f"no corpus named {name!r}", hint)
    return CORPORA[name]


def path_of(c: Corpus) -> Path:
    return data_dir() / c.file


def is_present(c: Corpus) -> bool:
    """The corpus is in the cache, of its size (its sha256 was checked when it was put there)."""
    p = path_of(c)
    return p.is_file() and p.stat().st_size == c.size


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def where_from(c: Corpus) -> str | None:
    """The URL a pull reads: the mirror's copy when TFCLI_DATA_URL is set, else the public file (None: none)."""
    mirror = os.environ.get(MIRROR, "").strip()
    if mirror:
        return mirror.rstrip("/") + "/" + c.file
    return c.url


def pull(name: str, source: Path | None = None, force: bool = False, progress=None) -> Path:
    """Put corpus `name` in the cache (from `source`, a mirror or its public URL) and return its path.
    The file appears by a rename once its sha256 is right: complete or not at all."""
    c = corpus(name)
    if is_present(c) and not force and source is None:
        return path_of(c)
    url = None if source is not None else where_from(c)
    if source is None and url is None:
        raise PullError(
            f"{c.file} has no public download: {c.derived}",
            f"give your copy: tfcli data pull {name} --from FILE, or set {MIRROR} to a folder or URL that holds "
            f"{c.file}",
        )
    root = data_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PullError(
            f"cannot create the data folder {root}: {e.strerror}", "set TFCLI_HOME to a writable folder"
        ) from None
    fd, tmp = tempfile.mkstemp(prefix=f".{c.file}.", dir=root)
    os.close(fd)
    try:
        if source is not None:
            _copy(Path(source), Path(tmp), c, progress)
        else:
            _download(url, Path(tmp), c, progress)
        got = sha256_file(Path(tmp))
        if got != c.sha256:
            said = source if source is not None else url
            raise PullError(f"{said} is not the {c.file} the recipes use (sha256 {got[:12]}…, expected "
                            f"{c.sha256[:12]}…)",
                            "check the file or the mirror")  # fmt: skip
        os.replace(tmp, path_of(c))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path_of(c)


def _copy(source: Path, target: Path, c: Corpus, progress) -> None:
    if not source.is_file():
        raise PullError(f"{source} is not a file", "give the path of your copy of " + c.file)
    shutil.copyfile(source, target)
    if progress:
        progress("copy", c.size, c.size)


def _download(url: str, target: Path, c: Corpus, progress) -> None:
    if not url.startswith(("http://", "https://", "file://")):
        raise UsageError(f"{MIRROR}={url.rsplit('/', 1)[0]} is not a URL", "give http://, https:// or file://")
    try:
        # the scheme is checked above (S310)
        with urllib.request.urlopen(url, timeout=60) as r, open(target, "wb") as f:  # noqa: S310
            done = 0
            while block := r.read(1 << 16):
                done += len(block)
                if done > c.size:
                    raise PullError(f"{url} is larger than {c.file} ({c.size:,} bytes)", "check the URL or the mirror")
                f.write(block)
                if progress:
                    progress("download", done, c.size)
    except urllib.error.HTTPError as e:
        raise PullError(f"{url}: HTTP {e.code} {e.reason}", "check the URL, or set " + MIRROR) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        reason = getattr(e, "reason", e)
        raise PullError(f"cannot download {url}: {reason}", f"check the network, or set {MIRROR} to a mirror") from None
