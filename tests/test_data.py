"""tfcli data: the recipes' corpora listed, pulled into $TFCLI_HOME/data with a pinned sha256 (from a
mirror here: the files of ../shared/data served over a local HTTP server, never copied into the
repository), refused when the bytes differ, and found by `tfcli data path` for --file."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from conftest import one_line_error

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_corpora = pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").is_file(), reason="../shared/data is not here")


@pytest.fixture
def serve():
    """serve(folder) -> the base URL of an HTTP server that serves `folder`, for the test's length."""
    servers = []

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # the test's stderr is tfcli's alone
            pass

    def start(folder: Path) -> str:
        handler = functools.partial(Quiet, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_the_listing_says_source_licence_size_and_presence(cli):
    r = cli("data")
    assert r.exit_code == 0, r.stderr
    assert "shakespeare" in r.stdout and "public domain" in r.stdout and "1.12 MB" in r.stdout
    assert "no file to download" in r.stdout  # the Tang poems: said plainly
    doc = json.loads(cli("data", "--json").stdout)
    names = {c["name"]: c for c in doc["corpora"]}
    assert set(names) == {"shakespeare", "tang-traditional", "tang"} and not any(c["present"] for c in names.values())
    assert names["shakespeare"]["url"].startswith("https://") and names["tang"]["url"] is None
    assert "OpenCC" in names["tang"]["derived"]
    assert cli("data", "list").stdout == r.stdout and json.loads(cli("data", "list", "--json").stdout) == doc


def test_path_before_a_pull_says_how_to_pull(cli):
    one_line_error(cli("data", "path", "shakespeare"), 1, "tfcli data pull shakespeare")
    one_line_error(cli("data", "path", "shakespear"), 1, "did you mean 'shakespeare'?")


@needs_corpora
def test_pull_from_a_mirror_then_path_for_file(cli, serve, monkeypatch, tmp_path):
    monkeypatch.setenv("TFCLI_DATA_URL", serve(SHARED))
    r = cli("data", "pull", "shakespeare")
    assert r.exit_code == 0, r.stderr
    path = Path(cli("data", "path", "shakespeare").stdout.strip())
    assert path == tmp_path / "tfcli-home" / "data" / "tinyshakespeare.txt"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256((SHARED / "tinyshakespeare.txt").read_bytes()).hexdigest()
    assert {c["name"]: c["present"] for c in json.loads(cli("data", "--json").stdout)["corpora"]}["shakespeare"]
    r = cli("tokenize", "--file", str(path))  # what --file "$(tfcli data path shakespeare)" reads
    assert r.exit_code == 0 and "1115394 tokens, 1115394 characters" in r.stdout


@needs_corpora
def test_a_mirror_with_other_bytes_is_refused_and_leaves_nothing(cli, serve, monkeypatch, tmp_path):
    bad = tmp_path / "mirror"
    bad.mkdir()
    (bad / "tinyshakespeare.txt").write_text("not the corpus\n")
    monkeypatch.setenv("TFCLI_DATA_URL", serve(bad))
    one_line_error(cli("data", "pull", "shakespeare"), 1, "is not the tinyshakespeare.txt the recipes use")
    data = tmp_path / "tfcli-home" / "data"
    assert not data.exists() or not any(data.iterdir())  # no half-written or wrong file stays
    monkeypatch.setenv("TFCLI_DATA_URL", serve(tmp_path / "empty"))
    one_line_error(cli("data", "pull", "shakespeare"), 1, "HTTP 404")


@needs_corpora
def test_a_corpus_with_no_public_file_takes_a_local_copy(cli, monkeypatch):
    monkeypatch.delenv("TFCLI_DATA_URL", raising=False)
    one_line_error(cli("data", "pull", "tang"), 1, "has no public download", "OpenCC", "--from FILE")
    r = cli("data", "pull", "tang", "--from", SHARED / "tang_poems_simplified.txt")
    assert r.exit_code == 0, r.stderr
    assert Path(cli("data", "path", "tang").stdout.strip()).stat().st_size == 12_664_857
    one_line_error(cli("data", "pull", "tang-traditional", "--from", SHARED / "tinyshakespeare.txt"), 1, "is not the tang_poems.txt")


def test_the_recipes_read_their_corpus_through_tfcli_data():
    """README.md and docs/ name a corpus as "$(tfcli data path NAME)" of a corpus `tfcli data` knows,
    after a `tfcli data pull NAME`, never as a bare file the reader does not have."""
    import re

    from tfcli.store.corpora import CORPORA

    root = Path(__file__).resolve().parents[1]
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            commands = [line for line in block.splitlines() if line.startswith("tfcli ")]
            for line in commands:
                assert not re.search(r"(?<![\w/$(])(tinyshakespeare|tang_poems\w*)\.txt", line), (page.name, line)
                for name in re.findall(r"tfcli data path ([\w-]+)", line):
                    assert name in CORPORA, (page.name, line)
                    assert f"tfcli data pull {name}" in text, (page.name, name)  # pulled first, on the same page
