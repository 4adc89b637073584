"""tfcli models, show and rm: what the model list says of each entry, what show shows, and what rm
removes (only its cache's entries, whole or not at all)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import TINY_GPT2, TINY_LLAMA


@pytest.fixture
def cached(tmp_path):
    """Put a copy of a test checkpoint into the cache that the cli fixture points TFCLI_HOME at,
    with a manifest as `tfcli convert` writes one."""
    from tfcli.store.manifest import MANIFEST_NAME, file_entry, sha256_file

    def put(name: str, source: Path = TINY_GPT2) -> Path:
        folder = tmp_path / "tfcli-home" / "models" / name
        shutil.copytree(source, folder)
        files = {p.name: file_entry(p, sha256_file(p)) for p in sorted(folder.iterdir()) if p.is_file()}
        (folder / MANIFEST_NAME).write_text(json.dumps({"format": 1, "source": {"file": "x.gguf"}, "files": files}))
        return folder

    return put


def test_show_a_shipped_model(cli):
    r = cli("show", "tang")
    assert r.exit_code == 0, r.stderr
    for fact in ("tang (shipped)", "4 blocks", "5,566,720", "model.safetensors", "Tang Poems", "Apache-2.0", "chat template", "no manifest"):
        assert fact in r.stdout, fact
    doc = json.loads(cli("show", "tang", "--json").stdout)
    assert doc["model"] == "tang" and doc["params"] == 5_566_720 and doc["shape"]["layers"] == 4
    assert sum(f["bytes"] for f in doc["files"]) == doc["bytes"] and doc["chat_template"] is None


def test_show_a_cached_model_its_template_and_damage(cli, cached):
    folder = cached("mine", TINY_LLAMA)
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    doc = json.loads(cli("show", "mine", "--json", "--verify").stdout)
    assert doc["kind"] == "pulled" and doc["checksums"]["state"] == "verified (sha256)"  # a file added is no damage
    r = cli("show", "mine", "--template")
    assert "{{ messages[0]['content'] }}" in r.stdout
    with open(folder / "config.json", "a") as f:
        f.write(" ")
    r = cli("show", "mine")
    assert r.exit_code == 0 and "damaged" in r.stdout and "config.json has" in r.stdout  # the others refuse it; show says why
    assert cli("generate", "-m", "mine").exit_code == 1


def test_show_a_pullable_model_without_pulling_it(cli):
    r = cli("show", "smollm2", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "pullable" and doc["licence"] == "Apache-2.0" and doc["checksums"]["state"] == "not pulled"


def test_show_unknown(cli):
    r = cli("show", "tnag")
    assert r.exit_code == 1 and "did you mean 'tang'" in r.stderr


def test_rm_refuses_shipped_models_with_a_reason(cli):
    from tfcli.store import registry

    r = cli("rm", "tang", "--yes")
    assert r.exit_code == 1 and "shipped with tfcli" in r.stderr
    assert (registry.shipped_dir() / "tang" / "model.safetensors").is_file()


def test_rm_refuses_paths_and_unknown_names(cli, cached):
    cached("mine")
    r = cli("rm", str(TINY_GPT2), "--yes")
    assert r.exit_code == 1 and "is a path" in r.stderr and TINY_GPT2.is_dir()
    r = cli("rm", "mien", "--yes")
    assert r.exit_code == 1 and "did you mean 'mine'" in r.stderr
    r = cli("rm", "smollm2", "--yes")
    assert r.exit_code == 1 and "not in the cache" in r.stderr


def test_rm_removes_a_cached_model(cli, cached):
    folder = cached("mine")
    r = cli("rm", "mine", "--yes")
    assert r.exit_code == 0, r.stderr
    assert "removed mine" in r.stderr
    assert not folder.exists() and list(folder.parent.iterdir()) == []  # nothing left, not even hidden
    assert "mine" not in cli("models").stdout


def test_rm_asks_and_refuses_to_guess_in_a_script(cli, cached):
    folder = cached("mine")
    r = cli("rm", "mine", input="y\n")  # not a terminal: no answer is taken from a pipe
    assert r.exit_code == 2 and "--yes" in r.stderr and folder.is_dir()


def test_rm_cut_short_leaves_no_half_removed_model(cli, cached, monkeypatch):
    from tfcli.store import remove

    folder, other = cached("mine"), cached("other")

    def crash(path, ignore_errors=False):  # the deletion stops after one file (a crash, a full disk)
        next(p for p in Path(path).iterdir() if p.is_file()).unlink()

    with monkeypatch.context() as m:
        m.setattr(remove.shutil, "rmtree", crash)
        assert cli("rm", "mine", "--yes").exit_code == 0
    assert not folder.exists()
    assert "mine" not in json.dumps(json.loads(cli("models", "--json").stdout)["models"])
    r = cli("generate", "-m", "mine", "-n", "1")
    assert r.exit_code == 1 and "unknown model" in r.stderr
    assert cli("rm", "other", "--yes").exit_code == 0
    assert list(folder.parent.iterdir()) == []  # the leftover of the first removal is cleared too


@pytest.mark.parametrize("answer, removed", [("y", True), ("n", False)])
def test_rm_at_a_terminal_asks(cached, tmp_path, answer, removed):
    import os

    pexpect = pytest.importorskip("pexpect")
    folder = cached("mine")
    env = dict(os.environ, TFCLI_HOME=str(tmp_path / "tfcli-home"), NO_COLOR="1", PYTHONPATH=os.pathsep.join(sys.path))
    child = pexpect.spawn(sys.executable, ["-m", "tfcli", "rm", "mine"], env=env, encoding="utf-8", timeout=30)
    child.expect_exact("[y/N]")
    child.sendline(answer)
    child.expect(pexpect.EOF)
    child.close()
    assert folder.exists() is not removed and child.exitstatus == (0 if removed else 1)



def test_models_says_a_gguf_entry_is_not_pulled(cli, tmp_path):
    import json

    from test_gguf import MIXED, write_gguf

    gguf = write_gguf(tmp_path / "tiny-mixed.gguf", types=MIXED, alignment=64)
    assert cli("generate", "-m", gguf, "hi", "-n", "1", "-t", "0").exit_code == 0
    r = cli("models")
    line = next(x for x in r.stdout.splitlines() if x.startswith("tiny-mixed"))
    assert "gguf" in line and "pulled" not in line
    assert f"runs {gguf} in place" in " ".join(r.stdout.split())  # however the line wraps
    rows = {m["name"]: m for m in json.loads(cli("models", "--json").stdout)["models"]}
    entry = next(m for n, m in rows.items() if n.startswith("tiny-mixed"))
    assert entry["kind"] == "pulled" and entry["gguf_file"] == str(gguf.resolve())  # the kind programs read is kept
    assert rows["shakespeare"]["gguf_file"] is None
    r = cli("show", gguf)  # show labels it as models does
    assert r.exit_code == 0 and "(gguf)" in r.stdout and "(pulled)" not in r.stdout, r.stdout
    shown = json.loads(cli("show", gguf, "--json").stdout)
    assert shown["kind"] == "pulled" and shown["gguf_file"] == str(gguf.resolve())
    assert json.loads(cli("show", "shakespeare", "--json").stdout)["gguf_file"] is None
