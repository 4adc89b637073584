"""Memory: a model or a request larger than the machine is refused up front, with the size it
would need; absurd sizes in config.json fail before any large allocation."""

from __future__ import annotations

import shutil
import tracemalloc

import pytest

from badinput import Env, assert_error, assert_one_line, edit_config, gen, run_tfcli
from conftest import TINY_LLAMA

# --- memory: refused up front, with the size it would need ---------------------------------------------


def _low_memory(monkeypatch, nbytes: int) -> None:
    from tfcli.engine import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: nbytes)


def test_kv_cache_larger_than_memory_is_refused_with_its_size(cli, tmp_path, monkeypatch):
    m = edit_config(Env(tmp_path, monkeypatch).model(TINY_LLAMA), max_position_embeddings=262_144)
    _low_memory(monkeypatch, 100_000_000)
    r = cli(*gen(m, "-n", "262000"))
    # 2 (K, V) x 3 layers x 2 kv heads x 262,001 positions x 16 dims x 4 bytes = 201 MB
    assert_error(r, 1, "a KV cache of 262,001 positions would need 201.2 MB but only 100.0 MB of memory is available", "fewer --max-tokens")


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
    assert_error(r, 1, "would need 201.2 MB but only 100.0 MB of memory is available under the control group's memory limit", "fewer --max-tokens")
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
