"""Memory: a model or a request larger than the machine is refused up front, with the size it
would need; absurd sizes in config.json fail before any large allocation."""

from __future__ import annotations

import tracemalloc

import pytest

from badinput import Env, assert_error, edit_config, gen
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
