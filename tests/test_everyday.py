"""The conventions scripts and users rely on: --version, completion, a bare `tfcli`, flags shown as
flags, the environment documented; and model management (show, rm)."""

from __future__ import annotations

import re

import pytest

import tfcli


def test_version(cli):
    for flag in ("--version", "-V"):
        r = cli(flag)
        assert r.exit_code == 0 and r.stdout.strip() == f"tfcli {tfcli.__version__}"


def test_bare_tfcli_prints_the_help_and_succeeds(cli):
    r = cli()
    assert r.exit_code == 0, r.stderr
    assert "Usage: tfcli" in r.stdout and "generate" in r.stdout and r.stderr == ""


def test_completion_options(cli):
    r = cli("--help")
    assert "--install-completion" in r.stdout and "--show-completion" in r.stdout
    r = cli("--show-completion", "bash")
    assert r.exit_code == 0 and "complete" in r.stdout and "_TFCLI_COMPLETE" in r.stdout


def test_environment_variables_are_documented(cli):
    text = cli("--help").stdout
    for name in ("TFCLI_HOME", "TFCLI_THREADS", "TFCLI_FONT", "NO_COLOR", "XDG_CACHE_HOME"):
        assert name in text


def _commands():
    from tfcli.cli import app
    import typer.main

    return sorted(typer.main.get_group(app).commands)


@pytest.mark.parametrize("command", [None, *_commands()])
def test_flags_are_shown_as_flags(cli, command):
    r = cli(*([command] if command else []), "--help")
    assert r.exit_code == 0, r.stderr
    assert "<bool>" not in r.stdout
    # and options that take a value still say what it is
    if command == "generate":
        assert re.search(r"--max-tokens\s+-n\s+<int>", r.stdout)


def test_bad_values_keep_one_line_messages(cli):
    r = cli("generate", "--top-k", "x")
    assert r.exit_code == 2 and "'x' is not a valid integer" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("generate", "-t", "warm")
    assert r.exit_code == 2 and "'warm' is not a valid float" in r.stderr and len(r.stderr.strip().splitlines()) == 1  # -t takes a list
    r = cli("params", "--mlp", "relu")
    assert r.exit_code == 2 and "'relu' is not one of 'gelu', 'swiglu'" in r.stderr


def test_values_are_converted(cli):
    r = cli("generate", "-n", "3", "-t", "0", "--top-k", "5", "--stop", "x", "--stop", "y", "To be")
    assert r.exit_code == 0, r.stderr
    r = cli("params", "--preset", "gpt2", "--mlp", "swiglu")
    assert r.exit_code == 0, r.stderr


# ---------------------------------------------------------------------------------------------
# tfcli show and tfcli rm


import json
import shutil
import sys
from pathlib import Path

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


# ---------------------------------------------------------------------------------------------
# tfcli bench: its stages, and defaults that fit the model


def test_bench_with_no_arguments_fits_the_default_model_and_shows_its_stages(cli):
    r = cli("bench", "--runs", "1", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["model"] == "shakespeare" and doc["prompts"] == [16, 128, 256] and doc["new_tokens"] == 128
    stages = [line for line in r.stderr.splitlines() if line.startswith("[")]
    assert [s.split("] ", 1)[1] for s in stages] == [
        "loading the model",
        "prompt pass, 16 tokens (run 1 of 1)",
        "prompt pass, 128 tokens (run 1 of 1)",
        "prompt pass, 256 tokens (run 1 of 1)",
        "decoding 128 tokens (run 1 of 1)",
        "memory read bandwidth",
    ]


def test_bench_defaults_for_a_short_context(cli):
    doc = json.loads(cli("bench", "-m", "tang", "--runs", "1", "--json").stdout)
    assert doc["prompts"] == [16, 128] and doc["new_tokens"] == 112  # 16 + 112 = tang's 128


def test_bench_refuses_sizes_that_do_not_fit(cli):
    r = cli("bench", "-m", "tang", "--prompts", "512")
    assert r.exit_code == 2 and "context is 128 tokens" in r.stderr


def test_completion_completes_commands_and_options(tmp_path):
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TFCLI_HOME=str(tmp_path), _TFCLI_COMPLETE="complete_bash")
    words = {"tfcli sh": "1", "tfcli generate --te": "2"}
    got = {w: subprocess.run([sys.executable, "-m", "tfcli"], env=env | {"COMP_WORDS": w, "COMP_CWORD": c}, capture_output=True, text=True).stdout.split() for w, c in words.items()}
    assert got == {"tfcli sh": ["show"], "tfcli generate --te": ["--temperature", "--temp", "--template"]}


# ---------------------------------------------------------------------------------------------
# the Tang model continues a verse (issue 17, item 8)


def test_tang_continues_a_bare_first_line_as_verse(cli):
    han = "[\u4e00-\u9fff]"
    verse = re.compile(rf"^(?:{han}{{5}}|{han}{{7}})，(?:{han}{{5}}|{han}{{7}})[。？！]$")
    with_verse = 0
    for seed in range(10):
        r = cli("generate", "-m", "tang", "床前明月光", "-s", str(seed), "-n", "40", "-q")
        assert r.exit_code == 0, r.stderr
        lines = r.stdout.split("\n")  # the first line completes the prompt's own
        with_verse += any(verse.match(line) for line in lines[1:])
    assert with_verse >= 8
