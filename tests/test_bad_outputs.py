"""Paths tfcli is asked to write (explore -o, attn/lens/geometry --png/--svg/--csv) that are not a
plain new file: a named pipe, a device node, a link, a folder, a socket, a full disk. Nothing tfcli
did not write is ever changed: each test looks at the target afterwards (tfcli/output.py)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from badinput import assert_error, assert_one_line, run_tfcli
from conftest import TINY_GPT2, TINY_LLAMA

# Every writer: the command line up to the output flag, and what its output starts with.
WRITERS = {
    "explore": (["explore", "-m", TINY_GPT2, "Hello there", "-o"], b"<!doctype html>"),
    "attn-png": (["attn", "-m", TINY_GPT2, "Hello there", "--png"], b"\x89PNG"),
    "attn-svg": (["attn", "-m", TINY_GPT2, "Hello there", "--svg"], b"<?xml"),
    "attn-csv": (["attn", "-m", TINY_GPT2, "Hello there", "--csv"], b"block,head"),
    "lens-svg": (["lens", "-m", TINY_GPT2, "Hello there", "--svg"], b"<?xml"),
    "lens-png": (["lens", "-m", TINY_GPT2, "Hello there", "--png"], b"\x89PNG"),
    "geometry-svg": (["geometry", "-m", TINY_GPT2, "--sample", "20", "--dims", "8", "--svg"], b"<?xml"),
    "geometry-png": (["geometry", "-m", TINY_GPT2, "--sample", "20", "--dims", "8", "--png"], b"\x89PNG"),
    "patch-svg": (["patch", "-m", TINY_GPT2, "The cat sat", "The dog sat", "--svg"], b"<?xml"),
    "ablate-png": (["ablate", "-m", TINY_GPT2, "Hello there", "--png"], b"\x89PNG"),
    "steer-save": (["steer", "-m", TINY_LLAMA, "Once", "--toward", "good day", "--away", "bad night", "--layer", "1", "-n", "2", "--save"], b"PK"),
}
FEW = ["explore", "attn-csv", "lens-svg", "geometry-png", "steer-save"]  # one of each command, for the slower cases
OLD = b"the user's own file, which tfcli must not lose\n" * 100


def _args(writer: str, path) -> list:
    return [*WRITERS[writer][0], path]


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_named_pipe_is_written_as_a_stream_and_stays_a_pipe(cli, tmp_path, writer):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = cli(*_args(writer, fifo))
    reader.join(30)
    assert r.exit_code == 0, r.stderr
    assert got and got[0].startswith(WRITERS[writer][1])
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_named_pipe_nobody_reads_is_refused_in_seconds(cli, tmp_path, monkeypatch):
    from tfcli import output

    monkeypatch.setattr(output, "PIPE_WAIT", 0.3)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    r = cli(*_args("explore", fifo))
    assert_error(r, 1, "nobody reads", "start the program that reads the pipe first")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("writer", FEW)
def test_dev_null_stays_a_character_device(tmp_path, writer):
    r = run_tfcli(tmp_path, *_args(writer, "/dev/null"))
    assert r.returncode == 0, r.stderr
    st = os.lstat("/dev/null")
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_device_node_is_written_in_place_never_replaced(cli, tmp_path, writer):
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    r = cli(*_args(writer, node))
    assert r.exit_code == 0, r.stderr
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert _leftovers(tmp_path) == []


def test_dev_full_is_one_line(cli):
    r = cli(*_args("attn-csv", "/dev/full"))
    assert_error(r, 1, "cannot write /dev/full: no space left on the device")
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


def test_dev_stdout_reaches_the_output(tmp_path):
    out = tmp_path / "page.html"
    with open(out, "wb") as f:
        r = run_tfcli(tmp_path, *_args("explore", "/dev/stdout"), stdout=f, stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes().startswith(b"<!doctype html>")


@pytest.mark.parametrize("writer", FEW)
def test_an_existing_file_survives_a_full_disk(cli, tmp_path, monkeypatch, writer):
    """The temporary file fills the disk (its descriptor writes to /dev/full): the old file is whole."""
    from tfcli import output

    real = output._temporary

    def on_a_full_disk(folder, name):
        fd, tmp = real(folder, name)
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)
        os.close(full)
        return fd, tmp

    monkeypatch.setattr(output, "_temporary", on_a_full_disk)
    target = tmp_path / "old.out"
    target.write_bytes(OLD)
    os.chmod(target, 0o640)
    r = cli(*_args(writer, target))
    assert_error(r, 1, "no space left on the device", "free some space")
    assert target.read_bytes() == OLD and stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("writer", ["attn-svg", "explore", "geometry-png"])
def test_an_existing_file_survives_a_file_size_limit(tmp_path, writer):
    """ulimit -f 4 (EFBIG once the new file passes 4 KB): the old file is whole, nothing left behind."""
    import resource

    target = tmp_path / "old.out"
    target.write_bytes(OLD[:2000])
    r = run_tfcli(tmp_path, *_args(writer, target), preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)))
    assert_one_line(r.stderr, r.returncode, 1, b"larger than allowed (ulimit -f")
    assert target.read_bytes() == OLD[:2000] and _leftovers(tmp_path) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KB tmpfs (root only; skipped where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", disk], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here")
    yield disk
    subprocess.run(["umount", "-l", disk], capture_output=True)


@pytest.mark.parametrize("writer", ["explore", "attn-svg"])
def test_an_existing_file_on_a_really_full_disk_is_kept(tmp_path, small_disk, writer):
    target = small_disk / "old.out"
    target.write_bytes(OLD)
    (small_disk / "filler").write_bytes(b"x" * (56 << 10))
    r = run_tfcli(tmp_path, *_args(writer, target))
    assert_one_line(r.stderr, r.returncode, 1, b"no space left on the device")
    assert target.read_bytes() == OLD
    assert _leftovers(small_disk) == []


@pytest.mark.parametrize("writer", FEW)
def test_a_regular_file_is_replaced_whole_keeping_its_mode(cli, tmp_path, writer):
    target = tmp_path / "old.out"
    target.write_bytes(OLD)
    os.chmod(target, 0o600)
    r = cli(*_args(writer, target))
    assert r.exit_code == 0, r.stderr
    assert target.read_bytes().startswith(WRITERS[writer][1])
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("writer", FEW)
def test_a_link_is_followed_and_stays_a_link(cli, tmp_path, writer):
    """A link to a file: the file gets the output (as `>` would do), the link is still the link."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "file.out"
    target.write_bytes(OLD)
    link = tmp_path / "link.out"
    link.symlink_to(target)
    r = cli(*_args(writer, link))
    assert r.exit_code == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes().startswith(WRITERS[writer][1])
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "real") == []


def test_a_link_to_a_pipe_writes_the_pipe(cli, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = cli(*_args("attn-svg", link))
    reader.join(30)
    assert r.exit_code == 0, r.stderr
    assert got and got[0].startswith(b"<?xml") and stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()


@pytest.mark.parametrize("writer", FEW)
def test_a_link_to_nothing_is_refused_and_nothing_created(cli, tmp_path, writer):
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere" / "x")
    r = cli(*_args(writer, link))
    assert_error(r, 1, "is a link to nothing", "remove the link")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


def _socket(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


@pytest.mark.parametrize("writer", FEW)
@pytest.mark.parametrize("kind", ["socket", "block", "folder"])
def test_what_is_neither_file_nor_stream_is_refused(cli, tmp_path, writer, kind):
    target = tmp_path / "target"
    keep = None
    if kind == "socket":
        keep = _socket(target)
    elif kind == "block":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(target, stat.S_IFBLK | 0o600, os.makedev(7, 250))
    else:
        target.mkdir()
        (target / "inside").write_text("mine")
    before = os.lstat(target)
    r = cli(*_args(writer, target))
    assert r.exit_code in (1, 2) and r.stderr.startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
    if kind == "folder":
        assert (target / "inside").read_text() == "mine"
    if keep is not None:
        keep.close()


def test_a_missing_folder_is_refused_before_the_model_runs(cli, tmp_path):
    r = cli(*_args("explore", tmp_path / "no" / "page.html"))
    assert_error(r, 1, "does not exist", "create the folder first")


# --- what the pages and tables carry -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["{{script}}", "{{data}}", "{{style}}", "{{title}}", "{{lang}}", "</title><script>alert(1)</script>", "a&b\"'<>"])
def test_a_model_name_is_text_in_the_page(cli, tmp_path, name):
    import shutil

    m = tmp_path / name.replace("/", "_")
    shutil.copytree(TINY_GPT2, m)
    page = tmp_path / "page.html"
    r = cli("explore", "-m", m, "Hello", "-o", page)
    assert r.exit_code == 0, r.stderr
    html = page.read_text(encoding="utf-8")
    title = html[html.index("<title>") : html.index("</title>")]
    assert len(title) < 200 and "<script" not in title.lower()
    assert html.count("<script>") == 1 and html.count("<style>") == 1  # the template's own, once


def test_a_name_that_is_not_utf8_is_written_escaped(tmp_path):
    import shutil
    import xml.dom.minidom

    m = tmp_path / os.fsdecode(b"m\xff\xfe")
    shutil.copytree(TINY_GPT2, m)
    out = tmp_path / "out"
    out.mkdir()
    for args in (
        ["explore", "-m", m, "Hello", "-o", out / "p.html"],
        ["attn", "-m", m, "Hello", "--svg", out / "a.svg", "--png", out / "a.png", "--csv", out / "a.csv"],
        ["lens", "-m", m, "Hello", "--svg", out / "l.svg"],
        ["geometry", "-m", m, "--sample", "20", "--dims", "8", "--svg", out / "g.svg"],
    ):
        r = run_tfcli(tmp_path, *args)
        assert r.returncode == 0, r.stderr
        assert b"Traceback" not in r.stderr
    assert "m\\xff\\xfe" in (out / "p.html").read_text(encoding="utf-8")
    for svg in ("a.svg", "l.svg", "g.svg"):
        xml.dom.minidom.parse(str(out / svg))  # well-formed, UTF-8


def test_csv_cells_that_look_like_formulas_stay_text(cli, tmp_path):
    import csv

    target = tmp_path / "w.csv"
    r = cli("attn", "-m", TINY_GPT2, '=HYPERLINK("x")+1 -2 @A1', "--csv", target)
    assert r.exit_code == 0, r.stderr
    rows = list(csv.reader(target.open(encoding="utf-8")))
    tokens = {cell for row in rows[1:] for cell in row[4:6]}
    assert any(t.startswith("'=") for t in tokens)
    for t in tokens:
        assert not t.lstrip(" ").startswith(("=", "+", "-", "@", "\t", "\r")), t


def test_one_escaping_function_per_medium():
    from tfcli.draw import escape

    assert escape.csv_cell("=1+2") == "'=1+2" and escape.csv_cell(" @SUM(A1)") == "' @SUM(A1)"
    assert escape.csv_cell("\tx") == "'\tx" and escape.csv_cell("＝1") == "'＝1" and escape.csv_cell(-1.5) == -1.5
    assert escape.csv_cell("cat") == "cat"
    assert escape.xml("a\x01<b>\ufffe\udcff&") == "a\\x01&lt;b&gt;\\ufffe\\xff&amp;"
    assert escape.html("<t \"q\">\udcfe") == "&lt;t &quot;q&quot;&gt;\\xfe"
    import json

    text = escape.json_in_html({"name": "m\udcff</script>"})
    assert "</script>" not in text and json.loads(text)["name"] == "m\\xff\\u003c/script>".replace("\\u003c", "<")
    text.encode("utf-8")


@pytest.mark.parametrize(
    "args",
    [["attn", "Hi", "--json"], ["lens", "Hi", "--json"], ["lens", "--compare", "a", "b", "--json"], ["tokenize", "Hi", "--json"], ["score", "Hello", "--json"],
     ["geometry", "--sample", "10", "--dims", "3", "--json"], ["params", "--json"], ["embed", "neighbors", "cat", "--json"], ["neurons", "Hi", "-l", "0", "--json"],
     ["generate", "Hi", "-n", "2", "--json"]],
    ids=lambda a: "-".join(a[:2]),
)  # fmt: skip
def test_json_of_a_model_named_in_bytes_that_are_not_utf8_is_valid_utf8(tmp_path, args):
    import json
    import shutil

    m = tmp_path / os.fsdecode(b"m\xff\xfe")
    shutil.copytree(TINY_GPT2, m)
    r = run_tfcli(tmp_path, *args, "-m", m)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.decode("utf-8"))  # strict UTF-8: raw \xff bytes would fail here
    assert "m\\xff\\xfe" in doc["model"]
