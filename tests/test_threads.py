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


def test_own_threads_are_not_taken_for_busy_cores(monkeypatch):
    """/proc/loadavg counts this process's running threads too (OpenBLAS's workers spin for a
    moment after NumPy is imported): only the others' are busy cores."""
    import io
    import os
    import threading
    import time

    import numpy as np
    import pytest

    if not os.path.isdir("/proc/self/task"):
        pytest.skip("Linux only")
    stop = threading.Event()

    def spin():  # a thread of ours that keeps a core, outside the GIL
        a = np.ones(1 << 20, dtype=np.float32)
        while not stop.is_set():
            np.exp(a, out=a)
            a.fill(1.0)

    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.05)
        # Sampled a few times: at a given instant the spinning thread may be waiting for the GIL.
        assert max(threads._own_running_threads() for _ in range(20)) >= 2
    finally:
        stop.set()
        t.join()
    # 3 running tasks, 2 of them ours: one busy core.
    monkeypatch.setattr(threads, "open", lambda path: io.StringIO("0.50 0.40 0.30 3/120 4242\n"), raising=False)
    monkeypatch.setattr(threads, "_own_running_threads", lambda: 2)
    assert threads.busy_cpus() == 1


def test_the_thread_count_holds_when_set_before_numpy_is_loaded():
    """tfcli's commands set the BLAS threads before anything has imported NumPy; threadpoolctl
    only sees a BLAS library once it is loaded, so --threads 1 once left BLAS on every core."""
    import subprocess
    import sys

    code = (
        "import sys; from tfcli.cli.options import apply_threads; assert 'numpy' not in sys.modules; apply_threads(1); "
        "from threadpoolctl import threadpool_info; print(sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[1]"
