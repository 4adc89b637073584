"""A GGUF run in place is known by its content hash, not by its name or folder: moved, copied or
renamed it runs, reusing the cache entry (the index of its tensors) made for the same bytes; any
byte sequence a POSIX file name may hold is shown escaped and written safely into the manifests.
The GGUF files themselves are never changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from badinput import Env, raw_control

NAMES = {
    "latin-1": b"caf\xe9.gguf",
    "newline-and-escape": b"a\nb\x1b[31m.gguf",
    "invalid-utf8-only": b"\xff\xfe.gguf",
    "spaces-and-quotes": b"my 'model' \"v2\".gguf",
}


def _run(cli, path: Path):
    r = cli("generate", "-m", path, "Hi", "-n", "2", "-t", "0")
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert "--force" not in r.stderr and "Traceback" not in r.stderr
    assert not raw_control(r.stderr), repr(r.stderr)
    return r


def _entries(tmp_path: Path) -> list[Path]:
    models = tmp_path / "tfcli-home" / "models"
    return sorted(p for p in models.iterdir() if p.is_dir()) if models.is_dir() else []


def _indexed_file(entry: Path) -> str:
    return json.loads((entry / "gguf.json").read_text(encoding="utf-8"))["file"]


def _untouched(path: Path, before: tuple[bytes, int]) -> None:
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.fixture
def gguf(tmp_path, monkeypatch):
    path = Env(tmp_path, monkeypatch).gguf()
    return path, (path.read_bytes(), path.stat().st_mtime_ns)


def test_a_moved_file_runs_and_its_entry_follows_it(cli, tmp_path, gguf):
    path, before = gguf
    first = _run(cli, path).stdout
    (tmp_path / "elsewhere").mkdir()
    moved = tmp_path / "elsewhere" / path.name
    shutil.move(path, moved)
    assert _run(cli, moved).stdout == first
    (entry,) = _entries(tmp_path)
    assert _indexed_file(entry) == str(moved.resolve())
    _untouched(moved, before)
    assert _run(cli, moved).stdout == first  # and again, from the index now made


def test_a_copy_elsewhere_reuses_the_index_of_the_same_bytes(cli, tmp_path, gguf):
    path, before = gguf
    first = _run(cli, path).stdout
    (tmp_path / "copy").mkdir()
    copy = tmp_path / "copy" / path.name
    shutil.copy2(path, copy)
    (entry,) = _entries(tmp_path)
    index = (entry / "gguf.json").read_bytes()
    assert _run(cli, copy).stdout == first
    assert _entries(tmp_path) == [entry] and (entry / "gguf.json").read_bytes() == index  # the index reused as it is
    assert _run(cli, path).stdout == first  # the first one still runs
    _untouched(path, before)
    _untouched(copy, before)


def test_a_renamed_file_reuses_the_entry_of_its_bytes(cli, tmp_path, gguf):
    path, before = gguf
    first = _run(cli, path).stdout
    renamed = path.with_name("renamed.Q8_0.gguf")
    path.rename(renamed)
    assert _run(cli, renamed).stdout == first
    (entry,) = _entries(tmp_path)
    assert _indexed_file(entry) == str(renamed.resolve())
    _untouched(renamed, before)


def test_a_copy_whose_original_changed_gets_the_entry(cli, tmp_path, gguf):
    """The entry's file no longer holds those bytes: the entry is made again for the copy given."""
    path, before = gguf
    first = _run(cli, path).stdout
    copy = tmp_path / "copy.gguf"
    shutil.copy2(path, copy)
    with open(path, "ab") as f:  # the original changed (grown): another file now
        f.write(b"\0" * 32)
    assert _run(cli, copy).stdout == first
    (entry,) = _entries(tmp_path)  # the original's bytes are another file's now: the entry serves the copy
    assert _indexed_file(entry) == str(copy.resolve()) and entry.name.endswith(hashlib.sha256(before[0]).hexdigest()[:12])
    _untouched(copy, before)


@pytest.mark.parametrize("raw", list(NAMES.values()), ids=list(NAMES))
def test_any_posix_name_runs_is_shown_escaped_and_written_safely(cli, tmp_path, gguf, raw):
    path, before = gguf
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/" + raw))
    path.rename(odd)
    r = _run(cli, odd)
    (entry,) = _entries(tmp_path)
    for name in ("gguf.json", "tfcli-manifest.json"):
        text = (entry / name).read_bytes().decode("utf-8")  # valid UTF-8, whatever the name's bytes
        json.loads(text)
    assert os.fsencode(_indexed_file(entry)) == bytes(tmp_path) + b"/" + raw  # names the same bytes
    manifest = json.loads((entry / "tfcli-manifest.json").read_text(encoding="utf-8"))
    assert os.fsencode(manifest["source"]["file"]) == raw
    listing = cli("models")
    assert listing.exit_code == 0 and not raw_control(listing.stdout), repr(listing.stdout)
    assert "Traceback" not in r.stderr + listing.stderr
    _untouched(odd, before)
    moved = tmp_path / "moved.gguf"  # and moved again from there
    odd.rename(moved)
    _run(cli, moved)


def test_the_remembered_hashes_hold_odd_names(cli, tmp_path, gguf):
    """.gguf-hashes.json keeps a name's bytes that are not UTF-8 as \\udcXX escapes: read back, the
    file is not hashed again (its size and time match)."""
    from tfcli.store.gguf import cached

    path, _ = gguf
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.gguf"))
    path.rename(odd)
    _run(cli, odd)
    hashes = tmp_path / "tfcli-home" / "models" / ".gguf-hashes.json"
    assert str(odd.resolve()) in json.loads(hashes.read_text(encoding="ascii"))
    calls = []
    real = cached.sha256_file
    cached.sha256_file = lambda p: calls.append(p) or real(p)
    try:
        _run(cli, odd)
    finally:
        cached.sha256_file = real
    assert calls == []
