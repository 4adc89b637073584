"""Every file tfcli reads, from its own folders or given on the command line, is opened without
blocking (O_NONBLOCK, then fstat of what was opened: tfcli.engine.files.open_regular): a named
pipe in its place is refused in one line, never waited on, and left where it is. Each command
runs in a process of its own under a timeout (a hang fails the test). The model folders' own
files (config.json, tokenizer.json, ...) are covered by tests/test_bad_files.py."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import numpy as np
import pytest

from badinput import Env, assert_one_line, gen, run_tfcli, subprocess_env
from conftest import TINY_GPT2

PIPE = b"is a named pipe, not a file"


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)
    return path


def _refused(r, path: Path, start: float, code: int = 1) -> None:
    lines = r.stderr.decode("utf-8", "replace").strip().splitlines()
    assert r.returncode == code and lines and lines[-1].startswith("error: "), r.stderr
    assert PIPE in r.stderr and b"Traceback" not in r.stderr, r.stderr
    assert time.monotonic() - start < 45
    assert stat.S_ISFIFO(os.lstat(path).st_mode)  # left as it was


def _sae(folder: Path) -> Path:
    from tfcli.engine.train.sae import init_params
    from tfcli.engine.train.saefolder import sae_config, write_sae

    write_sae(folder, init_params(64, 16, "relu", np.random.default_rng(0)), sae_config(64, 16, "relu", 0, "tiny", 1, "resid_post", 128, {"block": 1}))
    return folder


def test_a_gguf_that_is_a_named_pipe_is_refused_by_generate_and_convert(tmp_path):
    path = _fifo(tmp_path / "x.gguf")
    start = time.monotonic()
    _refused(run_tfcli(tmp_path, *gen(path, "-n", "2"), timeout=60), path, start)
    _refused(run_tfcli(tmp_path, "convert", path, tmp_path / "out", timeout=60), path, start)
    assert not (tmp_path / "out").exists()


def test_the_remembered_gguf_hashes_as_a_named_pipe(tmp_path, monkeypatch):
    """$TFCLI_HOME/models/.gguf-hashes.json: refused when read, never replaced (tfcli did not put it there)."""
    path = Env(tmp_path, monkeypatch).gguf()
    hashes = _fifo(tmp_path / "home" / "models" / ".gguf-hashes.json")
    start = time.monotonic()
    r = run_tfcli(tmp_path, *gen(path, "-n", "2"), timeout=60)  # refused before any kernel is compiled
    _refused(r, hashes, start)
    assert b"remove it" in r.stderr


def test_a_cache_entry_s_index_as_a_named_pipe(tmp_path, monkeypatch):
    """The index of a GGUF in the cache (gguf.json) and the entry's manifest: refused, never waited on."""
    path = Env(tmp_path, monkeypatch).gguf()
    r = run_tfcli(tmp_path, *gen(path, "-n", "2"), timeout=400)
    assert r.returncode == 0, r.stderr
    (entry,) = [p for p in (tmp_path / "home" / "models").iterdir() if p.is_dir()]
    for name in ("gguf.json", "tfcli-manifest.json"):
        kept = (entry / name).read_bytes()
        pipe = _fifo(entry / name)
        start = time.monotonic()
        r = run_tfcli(tmp_path, *gen(path, "-n", "2"), timeout=60)
        assert r.returncode == 1 and b"Traceback" not in r.stderr and time.monotonic() - start < 45, r.stderr
        assert name.encode() in r.stderr, r.stderr
        pipe.unlink()
        (entry / name).write_bytes(kept)


@pytest.mark.parametrize(
    "where",
    ["train-text", "features-train-text", "features-top-text", "features-quality-text", "activations", "sae-cfg", "sae-weights",
     "template-file", "steering-vector"],
)  # fmt: skip
def test_a_named_pipe_given_or_in_a_folder_is_refused(tmp_path, where):
    sae = _sae(tmp_path / "sae")
    text = tmp_path / "text.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 20)
    pipe = {"sae-cfg": sae / "cfg.json", "sae-weights": sae / "sae.safetensors"}.get(where, tmp_path / "pipe")
    _fifo(pipe)
    args = {
        "train-text": ["train", pipe, "-o", tmp_path / "out", "--steps", "1"],
        "features-train-text": ["features", "train", "-m", TINY_GPT2, pipe, "-o", tmp_path / "out"],
        "features-top-text": ["features", "top", sae, pipe, "-m", TINY_GPT2, "--any-model"],
        "features-quality-text": ["features", "quality", sae, pipe, "-m", TINY_GPT2, "--any-model"],
        "activations": ["features", "train", "--activations", pipe, "-o", tmp_path / "out"],
        "sae-cfg": ["features", "show", sae, "To be", "-m", TINY_GPT2, "--any-model"],
        "sae-weights": ["features", "show", sae, "To be", "-m", TINY_GPT2, "--any-model"],
        "template-file": [*gen(TINY_GPT2, "-n", "2"), "--chat", "--template", pipe],
        "steering-vector": [*gen(TINY_GPT2, "-n", "2"), "--steer", pipe],
    }[where]
    start = time.monotonic()
    r = run_tfcli(tmp_path, *args, timeout=60)
    if where == "sae-cfg" or where == "sae-weights":
        # an SAE folder without a regular cfg.json or weights is not an SAE folder: said as such
        assert r.returncode == 1 and b"Traceback" not in r.stderr and time.monotonic() - start < 45, r.stderr
        assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
        return
    _refused(r, pipe, start, code=2 if where in ("activations", "steering-vector") else 1)  # a file given to a flag: a bad flag value, as its other errors


def test_a_model_card_that_is_a_named_pipe_is_skipped_by_show(tmp_path, monkeypatch):
    """show reads README.md for a licence line: a named pipe there is passed over, not waited on."""
    m = Env(tmp_path, monkeypatch).model()
    pipe = _fifo(m / "README.md")
    start = time.monotonic()
    r = run_tfcli(tmp_path, "show", m, timeout=60)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    assert time.monotonic() - start < 45 and stat.S_ISFIFO(os.lstat(pipe).st_mode)


def test_the_helper_refuses_every_kind_that_is_not_a_regular_file(tmp_path):
    """tfcli.engine.files.open_regular, the one way tfcli opens what it reads."""
    from tfcli.engine.errors import TfcliError
    from tfcli.engine.files import open_file, open_regular, read_small

    pipe = _fifo(tmp_path / "pipe")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    for path, words in ((pipe, "named pipe"), (tmp_path / "folder", "a folder"), (Path("/dev/zero"), "character device"),
                        (tmp_path / "missing", "is missing")):  # fmt: skip
        with pytest.raises(TfcliError, match=words):
            open_regular(path)
    with pytest.raises(TfcliError, match="symbolic link"):
        read_small(tmp_path / "link", 100, follow=False)
    with open_file(tmp_path / "link") as f:
        assert f.read() == b"abc"
    assert os.get_blocking(open_regular(tmp_path / "file"))  # a regular file reads as usual


def test_the_home_is_untouched_by_a_refused_read(tmp_path, monkeypatch):
    """Nothing is written or removed beside a named pipe that was refused."""
    hashes = _fifo(tmp_path / "home" / "models" / ".gguf-hashes.json")
    before = sorted(p.name for p in hashes.parent.iterdir())
    pipe = _fifo(tmp_path / "x.gguf")
    r = run_tfcli(tmp_path, *gen(pipe, "-n", "2"), timeout=60, env=subprocess_env(tmp_path))
    assert r.returncode == 1
    assert sorted(p.name for p in hashes.parent.iterdir()) == before
