"""Files that are not files, or far too large: a named pipe, a device, a 3 GB config.json, a prompt
of more than the stdin bound. Only regular files are read, every small read has a size bound, and
each case ends in one error line within seconds (a read that blocks would hang: the timeout of
the subprocess fails the test)."""

from __future__ import annotations

import os
import time

import pytest

from badinput import Env, assert_error, assert_one_line, gen, run_tfcli, snapshot
from conftest import TINY_GPT2, TINY_LLAMA

# file of the model folder -> (the command that reads it, the model it belongs to)
_READERS = {
    "config.json": ("generate", TINY_GPT2),
    "model.safetensors": ("generate", TINY_GPT2),
    "tokenizer.json": ("generate", TINY_GPT2),
    "generation_config.json": ("generate", TINY_LLAMA),
    "chat_template.jinja": ("chat", TINY_LLAMA),
    "tokenizer_config.json": ("chat", TINY_LLAMA),
}


def _replace(m, name: str, how: str) -> None:
    path = m / name
    if path.exists():
        path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(how)


def _command(m, name: str) -> list:
    command, _ = _READERS[name]
    return gen(m, "-n", "2") if command == "generate" else ["chat", "-m", m, "-n", "2"]


@pytest.mark.parametrize("name", list(_READERS))
def test_a_named_pipe_in_a_model_folder_is_refused_without_blocking(tmp_path, monkeypatch, name):
    m = Env(tmp_path, monkeypatch).model(_READERS[name][1])
    if name == "chat_template.jinja":
        (m / "tokenizer_config.json").write_text("{}")
    _replace(m, name, "fifo")
    start = time.monotonic()
    r = run_tfcli(tmp_path, *_command(m, name), input=b"Hello\n", timeout=60)
    assert_one_line(r.stderr, r.returncode, 1, name.encode(), b"is a named pipe, not a file", b"put the file itself there")
    assert time.monotonic() - start < 30
    assert (m / name).exists()  # nothing deleted


@pytest.mark.parametrize("name, device", [("config.json", "/dev/urandom"), ("tokenizer.json", "/dev/zero"), ("model.safetensors", "/dev/zero"), ("chat_template.jinja", "/dev/urandom")])
def test_a_device_in_a_model_folder_is_refused_before_reading_it(tmp_path, monkeypatch, name, device):
    m = Env(tmp_path, monkeypatch).model(_READERS[name][1])
    _replace(m, name, device)
    r = run_tfcli(tmp_path, *_command(m, name), input=b"Hello\n", timeout=60)
    assert_one_line(r.stderr, r.returncode, 1, b"is a character device, not a file")


@pytest.mark.parametrize("name, size", [("config.json", 3_000_000_000), ("generation_config.json", 20_000_000), ("tokenizer.json", 300_000_000)])
def test_a_huge_small_file_is_refused_before_it_is_read(cli, tmp_path, monkeypatch, name, size):
    """A sparse file: large, but costs no disk. Refused from its size, before any byte is read."""
    import tracemalloc

    m = Env(tmp_path, monkeypatch).model(TINY_LLAMA)
    with open(m / name, "wb") as f:
        f.write(b"{")
        f.truncate(size)
    tracemalloc.start()
    try:
        r = cli(*gen(m, "-n", "2"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_error(r, 1, f"{name} is {size:,} bytes, more than the", "fetch or save it again")
    assert peak < 50_000_000


def test_models_lists_a_cache_holding_a_named_pipe_without_hanging(tmp_path):
    """A cache entry whose config.json is a named pipe once made plain `tfcli models` hang."""
    import shutil

    cache = tmp_path / "home" / "models"
    cache.mkdir(parents=True)
    shutil.copytree(TINY_GPT2, cache / "piped")
    _replace(cache / "piped", "config.json", "fifo")
    r = run_tfcli(tmp_path, "models", timeout=60)
    assert b"Traceback" not in r.stderr, r.stderr
    assert r.returncode in (0, 1)


def test_a_prompt_on_stdin_has_a_bound(cli, monkeypatch):
    from tfcli.cli import options

    monkeypatch.setattr(options, "PROMPT_BYTES", 1000)
    r = cli("generate", "-m", TINY_GPT2, "-", input=b"x" * 2000)
    assert_error(r, 2, "the prompt on stdin is more than 1,000 bytes", "give its end only")
    r = cli("tokenize", "-m", TINY_GPT2, "-", input=b"x" * 2000)
    assert_error(r, 2, "the text on stdin is more than 1,000 bytes")
    assert cli("generate", "-m", TINY_GPT2, "-", "-n", "2", input=b"x" * 60).exit_code == 0


def test_truncate_tokenises_only_the_end_of_a_long_prompt(cli, monkeypatch):
    """--truncate keeps the last tokens; only an end that surely holds them is tokenised (the same
    tokens as tokenising the whole prompt), so a prompt of millions of characters costs little."""
    from tfcli.engine import tokenizer as tokenizer_module

    seen = []
    prompt = tokenizer_module.Tokenizer.prompt
    monkeypatch.setattr(tokenizer_module.Tokenizer, "prompt", lambda self, text: seen.append(len(text)) or prompt(self, text))
    words = "".join(f"w{i} " for i in range(400_000))  # 2.7 million characters
    r = cli("generate", "-m", TINY_GPT2, "--truncate", "-n", "4", "-t", "0", "-", input=words.encode())
    assert r.exit_code == 0, r.stderr
    assert seen and max(seen) < 10_000, seen
    tok = tokenizer_module.Tokenizer(TINY_GPT2 / "tokenizer.json")
    full = tok.prompt(words[-200_000:])[-125:]
    assert tok.prompt(words[-tok.tail_chars(128) :])[-125:] == full


def test_nothing_in_the_folder_is_changed_by_a_refusal(tmp_path, monkeypatch):
    m = Env(tmp_path, monkeypatch).model()
    _replace(m, "tokenizer.json", "/dev/zero")
    before = snapshot(m)
    run_tfcli(tmp_path, *gen(m), timeout=60)
    assert snapshot(m) == before and (m / "tokenizer.json").is_symlink()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "missing", "folder"])
def test_a_steering_vector_that_is_not_a_file_is_refused_without_blocking(tmp_path, kind):
    target = {"dev-zero": "/dev/zero", "folder": str(tmp_path)}.get(kind, tmp_path / "v.npz")
    if kind == "fifo":
        os.mkfifo(target)
    r = run_tfcli(tmp_path, "generate", "-m", TINY_LLAMA, "Hi", "-n", "2", "--steer", target, timeout=60)
    assert_one_line(r.stderr, r.returncode, 2, b"is a directory" if kind == "folder" else b"is not a steering vector saved by 'tfcli steer --save'")
