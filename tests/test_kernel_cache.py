"""The compiled kernels' cache folder on disk: tfcli loads, replaces and removes only folders it wrote
(a key's name and its `ready` marker), never a user's things beside them; a key's path taken by
something else is refused before compiling, with the path named; a FIFO in the cache is never waited
on; and the compiling child never outlives the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tfcli.engine.fast.load import compiled, kernels
from tfcli.engine.fast.load.compiled import KEEP, cpu_name, marker, ours, remove_stale


def _key_folder(parent: Path, key: str, *, cpu: str | None = None, age: int = 0, mark: str | None = None) -> Path:
    """A folder as build.py leaves it (index.json, then `ready` with tfcli's marker), `age` seconds old."""
    f = parent / key
    f.mkdir()
    (f / "index.json").write_text("{}")
    text = mark if mark is not None else marker().replace(cpu_name(), cpu if cpu is not None else cpu_name())
    (f / "ready").write_text(text)
    os.utime(f / "ready", (1e9 + age, 1e9 + age))
    return f


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_compile_removes_only_older_folders_of_its_own_for_this_cpu(tmp_path):
    """The newest KEEP of tfcli's folders for this CPU stay; older ones go; another CPU's stay (a home
    shared among machines)."""
    mine = [_key_folder(tmp_path, f"{i:016x}", age=i) for i in range(5)]
    other_cpu = _key_folder(tmp_path, "f" * 16, cpu="another CPU")
    remove_stale(mine[-1])
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted([m.name for m in mine[-KEEP:]] + [other_cpu.name])


def test_the_sweep_never_touches_what_tfcli_did_not_write(tmp_path):
    """A cache folder shared with a user's own things: a `launch/` folder with its own `ready` note
    and no index.json (deleted by an earlier sweep), folders named like keys whose `ready` was not
    written by tfcli, an old numba-era folder, a link to a folder of tfcli's, files, a FIFO. Every
    byte of them is still there after a sweep by the newest folder."""
    user = tmp_path / "launch"
    user.mkdir()
    (user / "ready").write_text("go\n")
    (user / "plan.txt").write_text("the plan\n")
    hexname = tmp_path / ("a" * 16)
    hexname.mkdir()
    (hexname / "ready").write_text(f"numba 0.68\n{cpu_name()}\n")  # an older tfcli's marker: not provably ours
    (hexname / "index.json").write_text("{}")
    lookalike = _key_folder(tmp_path, "b" * 16, mark=f"my notes\n{cpu_name()}\n")
    fifo_ready = tmp_path / ("c" * 16)
    fifo_ready.mkdir()
    (fifo_ready / "index.json").write_text("{}")
    os.mkfifo(fifo_ready / "ready")  # read without blocking, and refused
    (tmp_path / "notes.txt").write_text("mine\n")
    os.mkfifo(tmp_path / "pipe")
    target = tmp_path / "elsewhere"
    target.mkdir()
    old = _key_folder(target, "d" * 16, age=-5)
    (tmp_path / ("e" * 16)).symlink_to(old)  # a link to a folder of tfcli's: a link is not ours
    before = {p: _tree(p) for p in (user, hexname, lookalike, target)}
    newest = [_key_folder(tmp_path, f"{i:016x}", age=i) for i in range(KEEP + 2)][-1]
    remove_stale(newest)
    for p, tree in before.items():
        assert _tree(p) == tree, p
    assert (tmp_path / "notes.txt").read_text() == "mine\n" and (tmp_path / "pipe").exists()
    assert (tmp_path / ("e" * 16)).is_symlink() and (fifo_ready / "ready").exists()
    assert not any(ours(p) for p in (user, hexname, lookalike, fifo_ready, tmp_path / ("e" * 16)))


@pytest.fixture
def no_compile(monkeypatch):
    """A compile here would take a minute: fail at once if one is started."""

    def refuse(folder):
        raise AssertionError(f"a compile was started into {folder}")

    monkeypatch.setattr(kernels, "_build", refuse)


@pytest.mark.parametrize("what", ["file", "link", "folder", "fifo"])
def test_a_key_path_taken_by_something_else_is_refused_before_compiling(tmp_path, monkeypatch, no_compile, what):
    """The key's path taken by a regular file, a link, a folder of someone's files or a FIFO: one line
    naming the real path, before any compile; nothing there changed."""
    monkeypatch.setenv("TFCLI_KERNEL_CACHE", str(tmp_path))
    key = kernels.cache_dir()
    if what == "file":
        key.write_text("not kernels\n")
    elif what == "link":
        (tmp_path / "target").write_text("x")
        key.symlink_to(tmp_path / "target")
    elif what == "folder":
        key.mkdir()
        (key / "mine.txt").write_text("keep me\n")
    else:
        os.mkfifo(key)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(kernels.KernelsUnavailable) as e:
        kernels._load()
    message = str(e.value)
    assert str(key) in message and "TFCLI_KERNEL_CACHE" in message and "\n" not in message
    assert ".tmp-" not in message
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    if what == "folder":
        assert (key / "mine.txt").read_text() == "keep me\n"


def test_a_fifo_in_a_folder_of_tfcli_is_refused_not_waited_on(tmp_path, monkeypatch, no_compile):
    """index.json (or an object file) replaced by a FIFO: the folder is not loadable and not provably
    tfcli's, so it is refused with its path, at once, and left as it is."""
    monkeypatch.setenv("TFCLI_KERNEL_CACHE", str(tmp_path))
    key = kernels.cache_dir()
    key.mkdir()
    os.mkfifo(key / "index.json")
    (key / "ready").write_text(marker())
    started = time.monotonic()
    with pytest.raises(kernels.KernelsUnavailable, match="another folder"):
        kernels._load()
    assert time.monotonic() - started < 5
    assert (key / "index.json").exists() and (key / "ready").read_text() == marker()


def test_read_regular_refuses_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "link").symlink_to(tmp_path / "big")
    for name in ("fifo", "link"):
        with pytest.raises(OSError):
            compiled.read_regular(tmp_path / name, 1000)
    with pytest.raises(OSError, match="more than"):
        compiled.read_regular(tmp_path / "big", 10)
    assert compiled.read_regular(tmp_path / "big", 100) == b"x" * 100


@pytest.mark.skipif(sys.platform != "linux", reason="the parent's death signal is Linux's")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_compiling_child_ends_with_the_process_that_started_it(tmp_path, how):
    """kernels._build's real command line, its build swapped for a long sleep that reports the child's
    pid: the parent killed, the child is gone within seconds (it was left running as an orphan)."""
    report = tmp_path / "child.pid"
    fake = tmp_path / "python"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        code="$(printf '%s\\n' "$3" | sed '$d')
        import time; open({str(report)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
        exec {sys.executable} -P -c "$code"
        """))
    fake.chmod(0o755)
    parent_code = (
        f"import sys; from pathlib import Path; sys.executable = {str(fake)!r}\n"
        f"from tfcli.engine.fast.load import kernels; kernels._build(Path({str(tmp_path / 'out')!r}))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    try:
        deadline = time.monotonic() + 60
        while not (report.exists() and report.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(report.read_text())
        assert _alive(child)
        parent.send_signal(how)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the compiling child outlived its parent"
    finally:
        parent.kill()
        if report.exists() and report.read_text() and _alive(int(report.read_text())):
            os.kill(int(report.read_text()), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_the_key_changes_with_every_file_the_kernels_are_compiled_from(monkeypatch):
    """Compiled code is found by its key: an edit to any file of the kernels' sources (fast/source and
    its rooms blocks32/ and k_quants/, fast/arguments.py) gives a new key, so a cache (a user's, the
    suite's kept between runs) never hands back the machine code of the sources before the edit."""
    from pathlib import Path as P

    fast = P(compiled.__file__).resolve().parents[1]
    sources = sorted((fast / "source").rglob("*.py")) + [fast / "arguments.py"]
    assert {"blocks32", "k_quants"} <= {p.parent.name for p in sources}
    before = compiled.cache_dir()
    real = P.read_bytes
    for source in sources:
        with monkeypatch.context() as m:
            m.setattr(P, "read_bytes", lambda self, s=source: real(self) + (b"\n# edited\n" if self == s else b""))
            assert compiled.cache_dir() != before, source.relative_to(fast)
    assert compiled.cache_dir() == before
