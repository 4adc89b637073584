"""Model names and paths that lead nowhere, or would lead outside weights/ and the cache."""

from __future__ import annotations

import shutil

import pytest

from badinput import Cases, assert_error, gen, run_case
from conftest import TINY_GPT2

CASES = Cases()


# model names


@CASES.case(1, "unknown model 'smolm2'", "did you mean 'smollm2'?")
def name_misspelt(env):
    return gen("smolm2")


@CASES.case(1, "unknown model 'tiny'", "to use the folder tiny, write -m ./tiny")
def name_of_a_folder_in_the_current_directory(env):
    shutil.copytree(TINY_GPT2, env.tmp / "tiny")
    env.monkeypatch.chdir(env.tmp)
    return gen("tiny")


@CASES.case(1, "no such folder: ./nope", "check the path")
def path_that_does_not_exist(env):
    env.monkeypatch.chdir(env.tmp)
    return gen("./nope")


@CASES.case(1, "no such folder: ~nobody-here/model (no home folder for ~nobody-here)", "check the path")
def path_in_the_home_of_an_unknown_user(env):
    return gen("~nobody-here/model")


@CASES.case(1, "unknown model 'a b;c'", "known models:")
def name_with_spaces_and_punctuation(env):
    return gen("a b;c")


@CASES.case(1, "a file name is too long for the file system", "use a shorter model name or path")
def name_of_300_characters(env):
    return gen("a" * 300)


@CASES.case(1, "a file name is too long for the file system", "use a shorter model name or path")
def path_with_a_300_character_folder(env):
    return gen("./" + "b" * 300 + "/model")


@CASES.case(1, "a file name is too long for the file system", "use a shorter model name or path")
def tokenize_with_a_300_character_name(env):
    return ["tokenize", "-m", "c" * 300, "Hello"]


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


# --- names are names ------------------------------------------------------------------------------------


def test_a_name_never_resolves_outside_weights_or_the_cache(cli, tmp_path, monkeypatch):
    """A model folder next to the cache, in the current directory or one level up is not found by
    its bare name; given as a path, it is used."""
    from tfcli.store import registry
    from tfcli.engine.errors import ModelNotFoundError

    home = tmp_path / "tfcli-home"  # the cli fixture's TFCLI_HOME; the cache is home/models
    for where in (home / "decoy", tmp_path / "work" / "decoy", tmp_path / "decoy2"):
        shutil.copytree(TINY_GPT2, where)
    monkeypatch.chdir(tmp_path / "work")
    for name in ("decoy", "decoy2", "models", "tfcli-home", "work"):
        r = cli(*gen(name))
        assert_error(r, 1, f"unknown model {name!r}")
    assert cli(*gen("./decoy", "-n", "2", "-q")).exit_code == 0
    assert cli(*gen("../decoy2", "-n", "2", "-q")).exit_code == 0
    monkeypatch.setenv("TFCLI_HOME", str(home))
    (registry.cache_dir()).mkdir(parents=True, exist_ok=True)
    shutil.copytree(TINY_GPT2, registry.cache_dir() / "mine")
    assert registry.resolve("mine") == registry.cache_dir() / "mine"
    with pytest.raises(ModelNotFoundError):
        registry.resolve("decoy")


def test_resolve_of_any_name_stays_inside_the_roots(tmp_path, monkeypatch):
    """Property: whatever string is given, resolve() either refuses it, treats it as the path the
    user typed (it contains a slash or starts with '.' or '~'), or returns a folder directly inside
    weights/ or the cache."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tfcli.store import registry
    from tfcli.engine.errors import TfcliError

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "home"))
    registry.cache_dir().mkdir(parents=True)
    shutil.copytree(TINY_GPT2, registry.cache_dir() / "cached")
    shutil.copytree(TINY_GPT2, tmp_path / "outside")
    monkeypatch.chdir(tmp_path)
    roots = {registry.shipped_dir().resolve(), registry.cache_dir().resolve()}
    names = st.one_of(
        st.text(max_size=80),
        st.sampled_from(["cached", "outside", "home", "models", "..", ".", "~", "~0", "~nobody-here/x", "cached/..", "..\\outside", "cached\x00", "CACHED"]),
        st.builds(lambda a, b: a + b, st.sampled_from(["", ".", "..", "cached", "outside"]), st.text(max_size=8)),
    )

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(names)
    def check(name):
        try:
            path = registry.resolve(name)
        except TfcliError:
            return
        if not registry.looks_like_path(name):
            assert path.parent.resolve() in roots, (name, path)

    check()
