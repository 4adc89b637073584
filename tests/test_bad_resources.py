"""Memory: a model or a request larger than the machine is refused up front, with the size it
would need; absurd sizes in config.json fail before any large allocation; every big array (a
text's tokens, logits of all positions, lens grids, geometry samples) is checked the same way,
and what a message echoes is capped."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from badinput import ROOT, Env, assert_error, assert_one_line, edit_config, gen, run_tfcli, subprocess_env, tfcli_command
from conftest import TINY_GPT2, TINY_LLAMA

# --- memory: refused up front, with the size it would need ---------------------------------------------


def _low_memory(monkeypatch, nbytes: int) -> None:
    from tfcli.engine import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: nbytes)


def test_kv_cache_larger_than_memory_is_refused_with_its_size(cli, tmp_path, monkeypatch):
    m = edit_config(Env(tmp_path, monkeypatch).model(TINY_LLAMA), max_position_embeddings=262_144)
    _low_memory(monkeypatch, 100_000_000)
    r = cli(*gen(m, "-n", "262000"))
    # 2 (K, V) x 3 layers x 2 kv heads x 262,001 positions x 16 dims x 4 bytes = 201 MB
    assert_error(r, 1, "a KV cache of 262,001 positions would need 201 MB but only 100 MB of memory is available", "fewer --max-tokens")


def test_an_absurd_context_costs_only_the_positions_used(cli, tmp_path, monkeypatch):
    """A Llama's context is only a limit (its positions come from RoPE, not from weights): a config
    claiming 16M positions runs a short generation in little memory, because the RoPE tables and the
    KV cache are built for the positions used; asking for more than the machine holds is refused
    up front with the size it would need."""
    m = edit_config(Env(tmp_path, monkeypatch).model(TINY_LLAMA), max_position_embeddings=1 << 24)
    tracemalloc.start()
    try:
        r = cli(*gen(m, "-n", "20", "--seed", "0"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 0, r.stderr
    assert peak < 50_000_000
    _low_memory(monkeypatch, 2_000_000_000)
    assert_error(cli(*gen(m, "-n", str(1 << 23))), 1, "would need", "GB")


@pytest.mark.parametrize(
    "changes",
    [{"n_positions": 1 << 24}, {"vocab_size": 1 << 24}, {"n_layer": 1 << 24}, {"n_inner": 1 << 24}, {"n_embd": 1 << 22, "n_head": 1}],
    ids=lambda c: "-".join(c),
)
def test_absurd_sizes_fail_before_any_large_allocation(cli, tmp_path, monkeypatch, changes):
    m = edit_config(Env(tmp_path, monkeypatch).model(), **changes)
    tracemalloc.start()
    try:
        r = cli(*gen(m))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 1 and r.stderr.startswith("error: "), r.stderr
    assert peak < 50_000_000, f"{peak / 1e6:.0f} MB allocated before the error"


# --- the real limit: ulimit -v, a control group's memory.max -----------------------------------------


def _limited(limit: int):
    def set_limit():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return set_limit


@pytest.fixture(scope="module")
def huge_context_llama(tmp_path_factory):
    """The tiny Llama claiming a 16M-token context, with a chat template."""
    m = tmp_path_factory.mktemp("huge") / "huge-llama"
    shutil.copytree(TINY_LLAMA, m)
    (m / "chat_template.jinja").write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<assistant>")
    return edit_config(m, max_position_embeddings=1 << 24)


@pytest.mark.parametrize(
    "args",
    [["generate", "-n", "8000000"], ["generate", "-n", "4000000", "--threads", "2"]],
    ids=["kv-cache", "kv-cache-two-threads"],
)
def test_an_address_space_limit_is_seen(tmp_path, huge_context_llama, args):
    """Under `ulimit -v` a large KV cache is refused with one line naming the limit, not a NumPy
    MemoryError traceback (MemAvailable alone said there was room)."""
    command = [args[0], "-m", huge_context_llama, "Hello", *args[1:]]
    r = run_tfcli(tmp_path, *command, preexec_fn=_limited(3 << 30))
    assert_one_line(r.stderr, r.returncode, 1, b"of memory is available under the address-space limit (ulimit -v)", b"fewer --max-tokens")


def _fake_cgroup(tmp_path, monkeypatch, version: int, limit: int, used: int) -> None:
    from tfcli.engine import memory

    proc = tmp_path / "proc"
    proc.mkdir()
    root = tmp_path / "cgroup"
    if version == 2:
        (proc / "cgroup").write_text("0::/user.slice/job\n")
        group, files = root / "user.slice" / "job", ("memory.max", "memory.current")
        (root / "user.slice").mkdir(parents=True)
        (root / "user.slice" / "memory.max").write_text("max\n")  # the parent sets no limit
    else:
        (proc / "cgroup").write_text("4:memory:/docker/abc\n0::/\n")
        group, files = root / "memory" / "docker" / "abc", ("memory.limit_in_bytes", "memory.usage_in_bytes")
    group.mkdir(parents=True, exist_ok=True)
    (group / files[0]).write_text(f"{limit}\n")
    (group / files[1]).write_text(f"{used}\n")
    monkeypatch.setattr(memory, "PROC_SELF", proc)
    monkeypatch.setattr(memory, "CGROUP_ROOT", root)


@pytest.mark.parametrize("version", [2, 1])
def test_a_control_group_limit_is_seen(cli, tmp_path, monkeypatch, huge_context_llama, version):
    _fake_cgroup(tmp_path, monkeypatch, version, 300_000_000, 200_000_000)
    r = cli(*gen(huge_context_llama, "-n", "262000"))
    assert_error(r, 1, "would need 201 MB but only 100 MB of memory is available under the control group's memory limit", "fewer --max-tokens")
    assert cli(*gen(huge_context_llama, "-n", "20", "-q")).exit_code == 0  # what fits still runs


def test_a_parent_control_group_limit_binds_too(cli, tmp_path, monkeypatch, huge_context_llama):
    from tfcli.engine import memory

    _fake_cgroup(tmp_path, monkeypatch, 2, 10**12, 0)
    (tmp_path / "cgroup" / "user.slice" / "memory.max").write_text("150000000\n")
    (tmp_path / "cgroup" / "user.slice" / "memory.current").write_text("50000000\n")
    assert memory.available_bytes() == 100_000_000
    assert_error(cli(*gen(huge_context_llama, "-n", "262000")), 1, "under the control group's memory limit")


_PEAK = """
import resource, sys
from tfcli.cli import app
try:
    app(sys.argv[1:], prog_name="tfcli")
except SystemExit as e:
    code = e.code
print(f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}", file=sys.stderr)
sys.exit(code)
"""


def _peak_rss(tmp_path, model, command: str) -> int:
    import subprocess
    import sys

    from badinput import ROOT, subprocess_env

    common = ["-m", str(model), "-n", "20", "--threads", "1"]
    args = ["chat", *common] if command == "chat" else ["generate", *common, "Hello"]
    r = subprocess.run([sys.executable, "-c", _PEAK, *args], input=b"Hello\n", capture_output=True, env=subprocess_env(tmp_path), cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return int(r.stderr.decode().strip().splitlines()[-1].split()[-1])


@pytest.mark.parametrize("command", ["chat", "generate"])
def test_a_16m_token_context_commits_little_for_a_few_tokens(tmp_path, huge_context_llama, command):
    """The KV cache grows with the positions written: a chat (whose cache may reach the whole
    16M-token context) makes a few tokens in the memory of a few tokens, as with the model's own
    context. The cache allocated at full size was committed row by row by transparent huge pages
    (200 MB more here, gigabytes for a real model)."""
    normal = Env(tmp_path, None).chat_model()
    extra = _peak_rss(tmp_path, huge_context_llama, command) - _peak_rss(tmp_path, normal, command)
    assert extra < 40_000_000, f"{extra / 1e6:.0f} MB more resident than with the model's own context"


def test_the_cache_grows_and_keeps_what_it_holds():
    """Growing copies every position written so far; a pass split over threads writes it the same."""
    import numpy as np

    from tfcli.engine import kvcache
    from tfcli.engine.families import load_config

    config = load_config(TINY_LLAMA / "config.json")
    cache = kvcache.KVCache(config, 5000)
    assert cache.room == kvcache.FIRST_ROOM
    rng = np.random.default_rng(0)
    written = []
    for start, t in [(0, 200), (200, 100), (300, 1000), (1300, 1)]:
        k = rng.normal(size=(t, config.n_kv_head, config.head_dim)).astype(np.float32)
        for layer in range(config.n_layer):
            keys, values = cache.store(layer, start, k, -k)
        written.append(k)
    allk = np.concatenate(written)  # [1301, Hkv, Dh]
    assert cache.room == 2600 and keys.shape == (config.n_kv_head, config.head_dim, 1301)
    np.testing.assert_array_equal(keys, allk.transpose(1, 2, 0))
    np.testing.assert_array_equal(values, -allk.transpose(1, 0, 2))


# --- every big array is checked before it is made (round 3) ------------------------------------------

_SIXTY_MB = 60_000_000


@pytest.fixture(scope="module")
def sixty_mb_prompt(tmp_path_factory) -> Path:
    """60 MB of English, under the 64 MB bound of stdin: 9 GB to tokenize."""
    path = tmp_path_factory.mktemp("big") / "60mb.txt"
    path.write_bytes((b"hello world, this is some text. " * (_SIXTY_MB // 32 + 1))[:_SIXTY_MB])
    return path


@pytest.mark.parametrize(
    "args", [["generate", "-m", TINY_GPT2, "-", "-n", "2"], ["score", "-m", TINY_GPT2, "-"], ["tokenize", "-m", TINY_GPT2, "-", "--json"], ["chat", "-m", "CHAT", "-n", "2"]],
    ids=["generate", "score", "tokenize-json", "chat"],
)  # fmt: skip
def test_a_60mb_prompt_under_a_3gb_limit_is_one_line(tmp_path, sixty_mb_prompt, args):
    """The tokenizers library aborts the process (SIGABRT, no message) when its allocation fails:
    the size is checked before it is called."""
    args = [Env(tmp_path, None).chat_model() if a == "CHAT" else a for a in args]
    with open(sixty_mb_prompt, "rb") as stdin:
        r = run_tfcli(tmp_path, *args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_limited(3 << 30), timeout=120)
    assert_one_line(r.stderr, r.returncode, 1, b"tokenizing 60,0", b"under the address-space limit (ulimit -v)", b"give a shorter text")


def test_the_tokenizer_check_is_not_asked_for_ordinary_texts(monkeypatch):
    from tfcli.engine import memory, tokenizer

    asked = []
    monkeypatch.setattr(memory, "check_allocation", lambda *a, **kw: asked.append(a))
    tokenizer.check_encode_memory("x" * 999_999)
    assert asked == []
    tokenizer.check_encode_memory("é" * 1_000_000)
    assert asked and asked[0][0] == 2_000_000 * tokenizer.ENCODE_BYTES_PER_BYTE  # UTF-8 bytes, not characters


@pytest.mark.parametrize("kind", ["dev-zero", "folder", "too-large", "dev-urandom"])
def test_score_file_is_read_with_a_bound(cli, tmp_path, kind):
    target = {"dev-zero": "/dev/zero", "dev-urandom": "/dev/urandom", "folder": str(tmp_path)}.get(kind)
    if kind == "too-large":
        target = tmp_path / "sparse.txt"
        with open(target, "wb") as f:
            f.truncate(10**10)  # 10 GB, sparse: nothing written
    r = cli("score", "-m", TINY_GPT2, "--file", target)
    assert r.exit_code in (1, 2) and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_score_file_from_a_pipe_still_works(tmp_path):
    r = subprocess.run(["/bin/bash", "-c", 'exec "$@" --file <(echo "Hello there, friend")', "bash", *map(os.fsdecode, tfcli_command("score", "-m", TINY_GPT2))],
                       capture_output=True, env=subprocess_env(tmp_path), cwd=ROOT, timeout=60)  # fmt: skip
    assert r.returncode == 0 and b"tokens scored" in r.stdout, r.stderr


def test_a_300kb_text_as_a_table_finishes_and_says_what_it_left_out(tmp_path):
    text = b"hello world " * 25_000
    start = time.monotonic()
    r = run_tfcli(tmp_path, "tokenize", "-m", TINY_GPT2, "-", input=text, timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"the first 2,000 of" in r.stderr and b"--json lists them all" in r.stderr
    assert time.monotonic() - start < 100


def test_geometry_past_the_memory_is_one_line(tmp_path):
    r = run_tfcli(tmp_path, "geometry", "-m", TINY_GPT2, "--sample", "5000", "--dims", "100000", preexec_fn=_limited(3 << 30), timeout=120)
    assert_one_line(r.stderr, r.returncode, 1, b"--sample 5,000 vectors in 100,000 dimensions would need", b"smaller --sample")


def test_lens_compare_takes_at_most_26_texts(cli):
    r = cli("lens", "-m", TINY_GPT2, "--compare", *[f"text {i}" for i in range(27)])
    assert r.exit_code == 2 and "--compare takes at most 26 texts, not 27" in r.stderr, r.stderr
    r = cli("lens", "-m", TINY_GPT2, "--compare", *[f" word{i}" for i in range(26)], "--json")
    assert r.exit_code == 0, r.stderr


def test_pairwise_cosines_need_no_c_c_d_array():
    """Trajectory.pairwise by a matrix product equals the cosine of every pair."""
    from tfcli.analysis.lens import Trajectory, cosine

    rng = np.random.default_rng(0)
    states = rng.standard_normal((5, 4, 16)).astype(np.float32)  # [C, L+1, D]
    states[2, 1] = 0  # a zero state: cosine 0, as cosine() says
    t = Trajectory(states, rng.standard_normal((5, 16)))
    s = states.transpose(1, 0, 2)
    np.testing.assert_allclose(t.pairwise, cosine(s[:, :, None, :], s[:, None, :, :]), atol=1e-12)


def test_the_lens_of_a_long_text_goes_by_rows_not_by_texts(monkeypatch):
    """logit_lens in chunks of CHUNK_ROWS rows whatever T is (a [4001, V] block was asked for), the same figures."""
    from tfcli.analysis import lens
    from tfcli.store import load

    lm = load(str(TINY_GPT2))
    ids = list(range(1, 100))
    hidden = lens.residual_stream(lm.model, ids)
    widths = []
    real = lm.model.unembed

    def watched(x, *a, **kw):
        widths.append(len(x))
        return real(x, *a, **kw)

    monkeypatch.setattr(lens, "CHUNK_ROWS", 7)
    monkeypatch.setattr(lm.model, "unembed", watched)
    small = lens.logit_lens(lm.model, hidden, k=3)
    assert max(widths) <= 7
    monkeypatch.setattr(lens, "CHUNK_ROWS", 10_000)
    whole = lens.logit_lens(lm.model, hidden, k=3)
    np.testing.assert_array_equal(small.ids, whole.ids)
    np.testing.assert_allclose(small.probs, whole.probs, rtol=1e-5)


def test_a_50kb_word_is_not_echoed_whole(cli):
    word = "ab" * 25_000
    r = cli("embed", "-m", TINY_GPT2, "neighbors", word)
    assert len(r.stderr) < 3_000, len(r.stderr)
    assert "characters" in r.stderr


def test_every_message_line_is_capped():
    from tfcli.cli.console import MESSAGE_CHARS, capped

    text = "start " + "x" * 100_000 + " (the hint)"
    short = capped(text)
    assert len(short) <= MESSAGE_CHARS and short.startswith("start ") and short.endswith("(the hint)")
