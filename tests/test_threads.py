"""BLAS threads: only the idle cores by default, the environment or --threads when given."""

from __future__ import annotations

from tfcli.engine import threads


def test_busy_cores_are_left_alone(monkeypatch):
    for var in ("TFCLI_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(threads, "available_cpus", lambda: 4)
    monkeypatch.setattr(threads, "busy_cpus", lambda: 1)
    assert threads.auto_threads() == 3
    monkeypatch.setattr(threads, "busy_cpus", lambda: 9)
    assert threads.auto_threads() == 1  # never fewer than one
    monkeypatch.setattr(threads, "busy_cpus", lambda: None)  # not Linux: all cores
    assert threads.auto_threads() == 4


def test_environment_wins(monkeypatch):
    monkeypatch.setattr(threads, "busy_cpus", lambda: 3)
    monkeypatch.setenv("TFCLI_THREADS", "2")
    assert threads.auto_threads() == 2


def test_threads_flag_sets_blas(cli, monkeypatch):
    from threadpoolctl import threadpool_info

    from conftest import TINY_GPT2

    r = cli("generate", "-m", TINY_GPT2, "Hi", "-n", "3", "--threads", "1")
    assert r.exit_code == 0 and "1 thread ·" in r.stderr
    assert all(p["num_threads"] == 1 for p in threadpool_info() if p["user_api"] == "blas")
    r = cli("generate", "-m", TINY_GPT2, "Hi", "--threads", "0")
    assert r.exit_code == 2 and "--threads must be at least 1" in r.stderr
