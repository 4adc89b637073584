"""The environment tfcli runs in: thread counts (TFCLI_THREADS, OPENBLAS_NUM_THREADS, --threads)
far past the cores or past what a C int holds, and terminal widths (COLUMNS) that are no width."""

from __future__ import annotations

import pytest

from badinput import run_tfcli_each, subprocess_env
from conftest import TINY_GPT2

GEN = ["generate", "-m", TINY_GPT2, "Hi", "-n", "2", "-s", "0"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The commands' runs under one environment variable's value, made once for this file's tests: each
    value in a fresh process of its own (BLAS reads its thread count as it loads, tfcli's consoles
    COLUMNS as they are made), where the commands of that value then run one after another, each
    through the real entry point (badinput.run_tfcli_each)."""
    made: dict = {}

    def run(var: str, value: str, commands: list[list]) -> dict[str, object]:
        if (var, value) not in made:
            tmp = tmp_path_factory.mktemp("env")
            done = run_tfcli_each(tmp, commands, env=subprocess_env(tmp, **{var: value}))
            made[var, value] = {" ".join(map(str, c)): r for c, r in zip(commands, done)}
        return made[var, value]

    return run


THREAD_COMMANDS = [GEN, ["attn", "-m", TINY_GPT2, "Hi"], ["score", "-m", TINY_GPT2, "Hello there"]]


@pytest.mark.parametrize(
    "var, value",
    [("TFCLI_THREADS", str(10**20)), ("OPENBLAS_NUM_THREADS", str(10**20)), ("OMP_NUM_THREADS", str(2**64)), ("TFCLI_THREADS", "9" * 5000),
     ("TFCLI_THREADS", "4096"), ("TFCLI_THREADS", "²"), ("TFCLI_THREADS", "-3"), ("TFCLI_THREADS", "lots"), ("TFCLI_THREADS", "0")],
    ids=["tfcli-10^20", "openblas-10^20", "omp-2^64", "5000-digits", "4096", "superscript", "negative", "text", "zero"],
)  # fmt: skip
@pytest.mark.parametrize("args", THREAD_COMMANDS, ids=["generate", "attn", "score"])
def test_a_thread_count_in_the_environment_never_breaks_a_run(runs, var, value, args):
    r = runs(var, value, THREAD_COMMANDS)[" ".join(map(str, args))]
    err = r.stderr.decode()
    assert r.returncode == 0 and "Traceback" not in err, err
    assert all(line.startswith(("warning: ", "2 prompt", "[", " ")) or "tok/s" in line or not line for line in err.splitlines()) or "warning" not in err
    if value.isascii() and value.isdigit() and int(value[:30] or 0) > 4096:
        assert f"warning: {var}=" in err and "using " in err and len(err.splitlines()[0]) < 200, err


def test_more_threads_than_cores_are_brought_down_with_a_warning(cli, monkeypatch):
    from tfcli.engine import threads

    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    r = cli(*GEN, "--threads", "4096")
    assert r.exit_code == 0, r.stderr
    assert "warning: --threads 4,096 is more than the 2 cores" in r.stderr and "2 threads" in r.stderr


WIDTH_COMMANDS = [["params", "--preset", "gpt2"], ["tokenize", "-m", TINY_GPT2, "Hello"], ["lens", "-m", TINY_GPT2, "Hello there"],
                  ["attn", "-m", TINY_GPT2, "Hello"], ["--help"]]  # fmt: skip


@pytest.mark.parametrize("columns", ["0", "-1", "abc", "00", ""])
@pytest.mark.parametrize("args", WIDTH_COMMANDS, ids=["params", "tokenize", "lens", "attn", "help"])
def test_a_width_that_is_no_width_is_ignored(runs, columns, args):
    r = runs("COLUMNS", columns, WIDTH_COMMANDS)[" ".join(map(str, args))]
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 50 and b"Traceback" not in r.stderr
