"""Bad prompts: empty, longer than the context, not UTF-8 (from argv, stdin, a chat line), and
--max-tokens that cannot fit. Each ends in one error line (exit 2); --truncate warns and goes on."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time

import pytest

from badinput import ROOT, Cases, Env, assert_error, gen, run_case, subprocess_env, tfcli_command
from conftest import TINY_GPT2, TINY_LLAMA

CASES = Cases()


# prompts


@CASES.case(2, "the prompt is empty", "give some text")
def prompt_empty(env):
    return gen(TINY_GPT2, prompt="")


@CASES.case(2, "the prompt is 2000 tokens but tiny-gpt2's context is 128", "use --truncate to keep its last tokens")
def prompt_longer_than_the_context(env):
    return gen(TINY_GPT2, prompt="word " * 400)


@CASES.case(2, "the prompt is not valid UTF-8 (byte 0xff at character 2)", "set the terminal to UTF-8")
def prompt_invalid_utf8(env):
    return gen(TINY_GPT2, prompt="ab\udcff")


@CASES.case(2, "the text is not valid UTF-8 (byte 0xfe at character 0)", "set the terminal to UTF-8")
def tokenize_invalid_utf8(env):
    return ["tokenize", "-m", TINY_GPT2, "\udcfe"]


@CASES.case(2, "the text is not valid UTF-8 (byte 0xc3 at character 3)", "set the terminal to UTF-8")
def attn_invalid_utf8(env):
    return ["attn", "-m", TINY_GPT2, "caf\udcc3"]


@CASES.case(2, "the text is empty", "give some text to tokenize")
def tokenize_empty(env):
    return ["tokenize", "-m", TINY_GPT2, ""]


@CASES.case(2, "--max-tokens 1000 does not fit: the context holds 128 tokens and the prompt uses 2", "use --max-tokens 127 or fewer, or --slide")
def max_tokens_beyond_the_context(env):
    return gen(TINY_GPT2, "-n", "1000")


@CASES.case(2, "does not fit", "or fewer")
def max_tokens_of_a_googol(env):
    return gen(TINY_GPT2, "-n", str(10**100))


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


def test_truncate_says_in_one_line_what_it_dropped_and_prints_the_prompt_it_used(cli):
    """--truncate: one line on stderr says how many tokens went from which end, and stdout shows
    the prompt as the model read it (its kept end), then the continuation, as --json does."""
    import json

    from tfcli.engine.tokenizer import Tokenizer

    prompt = "".join(f"w{i} " for i in range(300))
    ids = Tokenizer(TINY_GPT2 / "tokenizer.json").prompt(prompt)
    r = cli(*gen(TINY_GPT2, "--truncate", "-n", "4", "-t", "0", prompt=prompt))
    assert r.exit_code == 0, r.stderr
    warning = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warning == [f"warning: --truncate dropped the prompt's first {len(ids) - 125:,} of {len(ids):,} tokens, keeping 125 and room for 4 new "
                       "in the context of 128; the prompt printed is the part used"], r.stderr  # fmt: skip
    kept = Tokenizer(TINY_GPT2 / "tokenizer.json").decode(ids[-125:])
    assert prompt.endswith(kept) and not kept.startswith("w0 ")
    doc = json.loads(cli(*gen(TINY_GPT2, "--truncate", "-n", "4", "-t", "0", "--json", prompt=prompt)).stdout)
    assert doc["prompt"] == kept and r.stdout == kept + doc["text"] + "\n"


def test_truncate_cuts_only_a_prompt_that_does_not_fit(cli):
    """As the README and --help say: without -n, a prompt the context holds is kept whole (the
    context then bounds the new tokens); with -n N, one that leaves no room for N is cut."""
    from tfcli.engine.tokenizer import Tokenizer

    prompt = "".join(f"w{i} " for i in range(30))
    n = len(Tokenizer(TINY_GPT2 / "tokenizer.json").prompt(prompt))
    assert 29 < n <= 128  # a context of 128 holds it
    r = cli(*gen(TINY_GPT2, "--truncate", "-t", "0", prompt=prompt))
    assert r.exit_code == 0 and "warning" not in r.stderr and r.stdout.startswith(prompt), r.stderr
    r = cli(*gen(TINY_GPT2, "--truncate", "-n", "100", "-t", "0", prompt=prompt))
    assert r.exit_code == 0 and f"dropped the prompt's first {n - 29} of {n} tokens, keeping 29 and room for 100 new" in r.stderr, r.stderr


def test_truncate_counts_a_huge_prompts_untokenised_start_in_characters(cli):
    prompt = "".join(f"w{i} " for i in range(20_000))
    r = cli(*gen(TINY_GPT2, "--truncate", "-n", "4", "-t", "0", prompt=prompt))
    assert r.exit_code == 0, r.stderr
    kept = r.stdout[: r.stdout.index(prompt[-20:]) + 20]  # the prompt printed: its end, as used
    assert prompt.endswith(kept) and len(kept) < 1000
    assert f"dropped the prompt's start, its first {len(prompt) - len(kept):,} of {len(prompt):,} characters, keeping its last 125 tokens" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "args, what",
    [
        (["generate", "-m", TINY_GPT2, b"ab\xff\xfe", "-n", "3"], b"the prompt is not valid UTF-8 (byte 0xff at character 2)"),
        (["tokenize", "-m", TINY_GPT2, b"\xc3("], b"the text is not valid UTF-8 (byte 0xc3 at character 0)"),
        (["attn", "-m", TINY_GPT2, b"x\x80"], b"the text is not valid UTF-8 (byte 0x80 at character 1)"),
    ],
    ids=["generate", "tokenize", "attn"],
)
def test_invalid_utf8_from_the_shell(tmp_path, args, what):
    """Bytes that are not UTF-8 in argv, as a shell passes them (Python sees lone surrogates)."""
    r = subprocess.run(tfcli_command(*args), capture_output=True, env=subprocess_env(tmp_path, LC_ALL="C.UTF-8"), cwd=ROOT, timeout=60)
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.startswith(b"error: " + what) and r.stderr.count(b"\n") == 1, r.stderr


def test_invalid_utf8_on_stdin(cli):
    r = cli("generate", "-m", TINY_GPT2, "-", input=b"ab\xffcd")
    assert_error(r, 2, "stdin is not valid UTF-8 (byte 0xff at offset 2)", "convert the text to UTF-8")


@pytest.mark.parametrize(
    "stdin_errors, what",
    [("", b"the message is not valid UTF-8 (byte 0xe9 at character 3)"), ("utf-8:strict", b"the message is not valid UTF-8 (byte 0xe9)")],
    ids=["surrogateescape", "strict"],
)
def test_chat_refuses_a_line_that_is_not_utf8(tmp_path, stdin_errors, what):
    """Python's stdin hands over bytes that are not UTF-8 as lone surrogates (C and UTF-8 locales)
    or raises (a strict stdin, as PYTHONIOENCODING may set): one line either way."""
    m = Env(tmp_path, None).model(TINY_LLAMA)
    (m / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}\n{% endfor %}")
    env = subprocess_env(tmp_path, PYTHONIOENCODING=stdin_errors) if stdin_errors else subprocess_env(tmp_path)
    r = subprocess.run(tfcli_command("chat", "-m", m, "-n", "3"), input=b"caf\xe9\n", capture_output=True, env=env, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    assert r.stderr.startswith(b"error: " + what) and r.stderr.count(b"\n") == 1, r.stderr


def test_interactive_chat_skips_a_line_that_is_not_utf8(tmp_path):
    """At a terminal, a line that is not UTF-8 (a typing slip) gets a warning and the conversation
    goes on; piped, it ends the chat with one error line (above)."""
    m = Env(tmp_path, None).model(TINY_LLAMA)
    (m / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}\n{% endfor %}")
    leader, follower = pty.openpty()
    p = subprocess.Popen(tfcli_command("chat", "-m", m, "-n", "3", "-t", "0"), stdin=follower, stdout=follower, stderr=follower, env=subprocess_env(tmp_path), cwd=ROOT)
    os.close(follower)
    seen = b""

    def read_until(*markers: bytes, times: int = 1) -> None:
        nonlocal seen
        deadline = time.monotonic() + 60
        while not any(seen.count(marker) >= times for marker in markers):
            assert time.monotonic() < deadline, seen
            if select.select([leader], [], [], 0.5)[0]:
                seen += os.read(leader, 4096)

    try:
        read_until(b"> ")
        os.write(leader, b"caf\xe9\n")
        # Without a line editor tfcli sees the byte and warns; GNU readline (chat's line editing at
        # a terminal) drops a byte that is not UTF-8 itself, and "caf" is sent.
        read_until(b"type it again", b"new prompt tokens")
        replies = seen.count(b"new prompt tokens")
        os.write(leader, b"Hello\n")
        read_until(b"new prompt tokens", times=replies + 1)
        os.write(leader, b"/exit\n")
        assert p.wait(timeout=30) == 0
    finally:
        p.kill()
        os.close(leader)
    assert (b"the message is not valid UTF-8" in seen or seen.count(b"new prompt tokens") == 2) and b"Traceback" not in seen
