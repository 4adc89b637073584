"""The compiled kernels (tfcli/engine/fast/kernels.py) equal their textbook twins.

- product(): within c * eps32 * (|x_q| @ |W|.T) of the exact product of the quantized activations
  (activations.py, the NumPy twin) with formats' dequantized weights, computed in float64;
- dequantize_rows(): bit for bit formats.BLOCK_TYPES[t].dequantize;
- the compiled activation quantizer: bit for bit activations.quantize.

Weights are random bytes with finite float16 scales plus the edge cases (a zero and a subnormal
scale, nibbles all 0 or all 15, Q6_K's q -32 and 31, 6-bit scales 0 and 63), and real quantized
data where gguf-py can quantize the type. The kernels compile once per session into a temporary
tfcli home.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from tfcli.engine import formats
from tfcli.engine.fast.run import activations

EPS = np.finfo(np.float32).eps
C = 16  # the products may differ from the float64 reference by C float32 roundings of |x_q| @ |W|.T
QUANTIZED = [2, 3, 6, 7, 8, 12, 13, 14]
FLOATS = [0, 1, 30]
HALF_FIELDS = {2: [0], 3: [0, 2], 6: [0], 7: [0, 2], 8: [0], 10: [80, 82], 11: [108], 12: [0, 2], 13: [0, 2], 14: [208]}
PAYLOAD = {2: (2, 18), 3: (4, 20), 6: (2, 22), 7: (4, 24), 8: (2, 34), 10: (16, 80), 11: (0, 96), 12: (16, 144), 13: (16, 176), 14: (0, 192)}
SIX_BIT_SCALES = {12: (4, 16), 13: (4, 16), 11: (96, 108)}


def name(t: int) -> str:
    return formats.BLOCK_TYPES[t].name


def random_rows(t: int, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Read-only rows of type t: [n, row bytes] uint8 (F32: [n, k] float32), random with edge cases."""
    if t == 0:
        return frozen(rng.standard_normal((n, k)).astype(np.float32))
    if t in (1, 30):
        w = rng.standard_normal((n, k)).astype(np.float32)
        w.flat[::7] = 0.0
        halves = w.astype(np.float16).view(np.uint8) if t == 1 else (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        return frozen(halves.reshape(n, -1))
    bt = formats.BLOCK_TYPES[t]
    blocks = rng.integers(0, 256, (n * k // bt.weights, bt.nbytes), dtype=np.uint8)  # [B, nbytes]
    start, stop = PAYLOAD[t]
    blocks[1::4, start:stop] = 0x00  # nibbles 0, Q6_K's q -32, Q8_0's 0
    blocks[2::4, start:stop] = 0xFF  # nibbles 15, Q6_K's q 31, Q8_0's -1
    if t in SIX_BIT_SCALES:
        a, b = SIX_BIT_SCALES[t]
        blocks[3::5, a:b], blocks[4::5, a:b] = 0xFF, 0x00  # 6-bit scales and mins 63, then 0
    for at in HALF_FIELDS[t]:
        scales = (rng.standard_normal(len(blocks)) * 0.02).astype(np.float16)  # [B]
        scales[5::7] = 0.0
        scales[6::7] = np.array([0x0001], np.uint16).view(np.float16)[0]  # the smallest subnormal
        scales[3::11] = np.array([0x03FF], np.uint16).view(np.float16)[0]  # the largest subnormal
        blocks[:, at : at + 2] = scales.view(np.uint8).reshape(-1, 2)
    return frozen(blocks.reshape(n, -1))


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only copy over bytes, as rows read from a mapped file are."""
    return np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)


def weights(rows: np.ndarray, t: int, n: int, k: int) -> np.ndarray:
    return formats.dequantize(rows.view(np.uint8), t, (n, k))  # [n, k] float32


def reference(x: np.ndarray, w: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x as the kernel multiplies it [T, K], the exact product [T, N] float64, its bound scale |x_q| @ |W|.T)."""
    xq = x if t in FLOATS else activations.dequantize(*activations.quantize(x, t)[:2])  # [T, K]
    exact = xq.astype(np.float64) @ w.astype(np.float64).T  # [T, N]
    return xq, exact, np.abs(xq).astype(np.float64) @ np.abs(w).astype(np.float64).T


def row_length(t: int, blocks: int) -> int:
    return formats.BLOCK_TYPES[t].weights * blocks if t not in FLOATS else 32 * blocks + 7


@pytest.mark.parametrize("t", QUANTIZED + FLOATS, ids=name)
def test_product_equals_the_textbook(kernels, t):
    rng = np.random.default_rng(t)
    n, k = 37, row_length(t, 3)
    rows = random_rows(t, n, k, rng)
    w = weights(rows, t, n, k)
    for T in (1, 2, 3, 4, 5, 8, 16, 17):
        x = rng.standard_normal((T, k)).astype(np.float32)
        x[0, : k // 3] = 0.0  # a block of x that is all zeros (scale 0)
        _, exact, scale = reference(x, w, t)
        out = np.full((T, n), np.nan, np.float32)
        kernels.product(x, rows, t, out, 0, n)
        err = np.abs(out - exact)
        assert (err <= C * EPS * scale).all(), (T, (err / np.maximum(scale * EPS, 1e-300)).max())


@pytest.mark.parametrize("t", QUANTIZED + FLOATS, ids=name)
def test_product_writes_only_its_rows_of_a_column_slice(kernels, t):
    rng = np.random.default_rng(100 + t)
    n, k, T = 29, row_length(t, 2), 5
    rows = random_rows(t, n, k, rng)
    x = rng.standard_normal((T, k)).astype(np.float32)
    _, exact, scale = reference(x, weights(rows, t, n, k), t)
    parent = np.full((T, n + 9), 7.0, np.float32)
    out = parent[:, 4 : 4 + n]  # [T, n], strided
    kernels.product(x, rows, t, out, 3, 20)
    assert (np.abs(out[:, 3:20] - exact[:, 3:20]) <= C * EPS * scale[:, 3:20]).all()
    untouched = np.ones(parent.shape, bool)
    untouched[:, 4 + 3 : 4 + 20] = False
    assert (parent[untouched] == 7.0).all()


@pytest.mark.parametrize("t", [8, 3, 12, 14, 0, 1], ids=name)
def test_writable_and_read_only_rows_give_the_same_product(kernels, t):
    rng = np.random.default_rng(200 + t)
    n, k, T = 11, row_length(t, 2), 3
    rows = random_rows(t, n, k, rng)
    x = rng.standard_normal((T, k)).astype(np.float32)
    a, b = np.empty((T, n), np.float32), np.empty((T, n), np.float32)
    kernels.product(x, rows, t, a, 0, n)
    kernels.product(np.array(x), np.array(rows), t, b, 0, n)  # writable copies
    assert not rows.flags.writeable and np.array_equal(a, b)


@pytest.mark.parametrize("t", [2, 3, 6, 7, 8, 1, 30], ids=name)
def test_real_quantized_weights(kernels, t):
    """Weights quantized by gguf-py (the types it can quantize); also reports the error against float32 x."""
    from gguf import GGMLQuantizationType, quants

    rng = np.random.default_rng(300 + t)
    n, k, T = 64, 576, 4
    w32 = rng.standard_normal((n, k)).astype(np.float32)
    rows = frozen(quants.quantize(w32, GGMLQuantizationType(t)).view(np.uint8).reshape(n, -1))
    w = weights(rows, t, n, k)
    x = rng.standard_normal((T, k)).astype(np.float32)
    _, exact, scale = reference(x, w, t)
    out = np.empty((T, n), np.float32)
    kernels.product(x, rows, t, out, 0, n)
    assert (np.abs(out - exact) <= C * EPS * scale).all()
    vs_float = np.abs(out - x.astype(np.float64) @ w.astype(np.float64).T).max() / np.abs(x @ w.T).max()
    print(f"{name(t)}: max error against float32 activations, relative to the largest output: {vs_float:.2e}")
    assert vs_float < 1e-2  # 8-bit activations: each value within 1/254 of its block's largest (5.5e-3 measured for Q4_0)


def test_two_threads_on_two_halves(kernels):
    rng = np.random.default_rng(7)
    for t in (3, 12, 0):
        n, k, T = 2048, row_length(t, 4), 4
        rows = random_rows(t, n, k, rng)
        x = rng.standard_normal((T, k)).astype(np.float32)
        whole, halves = np.empty((T, n), np.float32), np.empty((T, n), np.float32)
        kernels.product(x, rows, t, whole, 0, n)
        threads = [threading.Thread(target=kernels.product, args=(x, rows, t, halves, a, b)) for a, b in ((0, 1000), (1000, n))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert np.array_equal(whole, halves), name(t)


@pytest.mark.parametrize("t", QUANTIZED + FLOATS + [10, 11], ids=name)
def test_dequantize_rows_is_bit_for_bit_the_textbook(kernels, t):
    rng = np.random.default_rng(400 + t)
    n, k = 23, row_length(t, 3)
    rows = random_rows(t, n, k, rng)
    w = weights(rows, t, n, k)  # [n, k]
    out = np.full((n, k), 7.0, np.float32)
    kernels.dequantize_rows(rows, t, out, 2, 19)
    np.testing.assert_array_equal(out[2:19], w[2:19])
    assert (out[:2] == 7.0).all() and (out[19:] == 7.0).all()


@pytest.mark.parametrize("t", [8, 12], ids=["Q8_0-style", "Q8_K-style"])
def test_the_compiled_activation_quantizer_is_its_twin(kernels, t):
    rng = np.random.default_rng(500 + t)
    x = (rng.standard_normal((9, 512)) * np.logspace(-30, 10, 9)[:, None]).astype(np.float32)
    x[1] = 0.0
    x[2, :300] = np.float32(0.5) * np.arange(300) / 32767  # many values halfway between two q
    x[3, 7] = 1e-45  # a subnormal alone in its block
    got, want = kernels.quantize_activations(x, t), activations.quantize(x, t)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_importing_the_kernels_does_not_import_numba():
    code = "import sys, tfcli.engine.fast.load.kernels as k; k.will_compile(); assert 'numba' not in sys.modules, 'numba'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_compiling_process_imports_this_tfcli_whatever_the_working_directory(tmp_path, monkeypatch):
    """The compile runs in a process of its own, whose kernels go in a folder keyed to this tfcli's
    sources: it must import this tfcli, not one in the directory it is started from (a checkout of
    another version), whose code would then be loaded under this version's key. The real command
    line, its build code swapped for a report of where tfcli came from."""
    import tfcli
    from tfcli.engine.fast.load import kernels

    (tmp_path / "tfcli").mkdir()
    (tmp_path / "tfcli" / "__init__.py").write_text("raise SystemExit('the tfcli of the working directory')\n")
    monkeypatch.chdir(tmp_path)
    seen, real_run = {}, subprocess.run

    def run(argv, **kw):
        swap = "import tfcli; print(tfcli.__file__)"  # the build line, after the guard against orphans
        argv = [a if "from tfcli.engine.fast.source.build import build" not in a else a[: a.index("from pathlib")] + swap for a in argv]
        seen["r"] = real_run(argv, **kw)
        return seen["r"]

    monkeypatch.setattr(kernels.subprocess, "run", run)
    kernels._build(tmp_path / "out")
    assert seen["r"].returncode == 0, seen["r"].stderr
    assert seen["r"].stdout.strip() == tfcli.__file__


def test_a_process_that_multiplies_holds_no_compiler(kernels):
    """The kernels run as machine code loaded from the cache: numba and LLVM (130 MB once they have
    compiled anything) are imported only by the process that compiles them, once per machine."""
    code = ZERO_PRODUCT + "held = sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite'))\nassert not held, held\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(kernels), timeout=600)
    assert r.returncode == 0, r.stderr


# A product in a process of its own: 3 rows of x against 5 Q4_1 rows whose scales are 0, on 2 threads.
ZERO_PRODUCT = (
    "import sys, numpy as np\n"
    "from tfcli.engine.fast.load import kernels\n"
    "x, rows, out = np.ones((3, 64), np.float32), np.zeros((5, 40), np.uint8), np.empty((3, 5), np.float32)\n"
    "kernels.product(x, rows, 3, out, 0, 5, threads=2)\n"
    "assert (out == 0).all(), out\n"
)


def _env(kernels) -> dict:
    """This process's environment, with the kernel cache the fixture loaded from."""
    import os

    return dict(os.environ, TFCLI_KERNEL_CACHE=str(kernels.cache_dir().parent))


def test_will_compile_is_honest(kernels, tmp_path, monkeypatch):
    assert not kernels.will_compile()  # loaded in this process
    assert (kernels.cache_dir() / "ready").exists() or not kernels.writable(kernels.cache_dir())
    monkeypatch.setenv("TFCLI_HOME", str(tmp_path))
    monkeypatch.delenv("TFCLI_KERNEL_CACHE", raising=False)  # the suite's shared cache (conftest.py): a fresh home has none
    code = "import tfcli.engine.fast.load.kernels as k; print(k.will_compile())"
    fresh = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert fresh.stdout.strip() == "True"


@pytest.mark.parametrize("t", QUANTIZED + FLOATS, ids=name)
def test_the_rows_on_two_threads_are_the_rows_on_one(kernels, t):
    """threads=2 cuts the weight rows in two chunks, one on each of numba's OpenMP threads: each
    output is computed as on one thread, bit for bit (lo, hi and N not multiples of anything)."""
    rng = np.random.default_rng(500 + t)
    n, k = 203, row_length(t, 2)
    rows = random_rows(t, n, k, rng)
    for T in (1, 4, 7):
        x = rng.standard_normal((T, k)).astype(np.float32)
        one, two = np.full((T, n), np.nan, np.float32), np.full((T, n), np.nan, np.float32)
        kernels.product(x, rows, t, one, 5, 198)
        kernels.product(x, rows, t, two, 5, 198, threads=2)
        assert np.array_equal(one, two, equal_nan=True), (name(t), T)


@pytest.mark.parametrize("t", QUANTIZED + FLOATS, ids=name)
def test_each_row_of_x_is_its_product_alone(kernels, t):
    """Batch invariance (what a server's decode step needs, engine/slots.py): row t of a product of
    T rows of x equals, bit for bit, the product of that row alone, whatever T."""
    rng = np.random.default_rng(600 + t)
    n, k = 64, row_length(t, 2)
    rows = random_rows(t, n, k, rng)
    x = rng.standard_normal((9, k)).astype(np.float32)
    together = np.empty((9, n), np.float32)
    kernels.product(x, rows, t, together, 0, n)
    for i in range(9):
        alone = np.empty((1, n), np.float32)
        kernels.product(x[i : i + 1], rows, t, alone, 0, n)
        assert np.array_equal(together[i], alone[0]), (name(t), i)


@pytest.mark.parametrize(
    "args",
    [["--help"], ["params", "--preset", "gpt3"], ["attn", "--show-mask", "abc"], ["generate", "ROMEO:", "-n", "3", "-s", "1"]],
    ids=["help", "params", "show-mask", "float32-model"],
)
def test_commands_without_a_quantized_product_never_import_numba(args, tmp_path):
    """Nobody pays who does not use it: the JIT is imported when a quantized product first runs."""
    code = f"import sys, runpy; sys.argv = ['tfcli', *{args!r}]\ntry:\n    runpy.run_module('tfcli', run_name='__main__')\nexcept SystemExit:\n    pass\nassert 'numba' not in sys.modules and 'tfcli.engine.fast.load.kernels' not in sys.modules, sorted(m for m in sys.modules if 'numba' in m or 'kernels' in m)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**__import__("os").environ, "TFCLI_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]


# What product() of quantized rows runs: the activation quantizer and the quantized product. A variant
# compiles these alone, about a third of a whole compile: what this test compares runs nothing else.
VARIANT_JOBS = ("quantize", "product_quantized")

# In a process of its own: the kernels compiled as for a CPU of TFCLI_KERNEL_FEATURES, VARIANT_JOBS alone,
# into their key's folder (kept between runs in pytest's cache where there is one), then loaded.
COMPILE_VARIANT = (
    "import shutil\n"
    "from tfcli.engine.fast.load import compiled, kernels\n"
    "from tfcli.engine.fast.source import attention_job, block_job, build, jobs\n"
    "attention_job.JOBS = block_job.JOBS = ()\n"
    f"jobs.JOBS = {VARIANT_JOBS!r}\n"
    "folder = kernels.cache_dir()\n"
    "if not compiled.ours(folder):\n"
    "    partial = folder.with_name(folder.name + '.partial')\n"
    "    shutil.rmtree(partial, ignore_errors=True)\n"
    "    partial.mkdir(parents=True)\n"
    "    build.build(partial)\n"
    "    shutil.rmtree(folder, ignore_errors=True)\n"
    "    partial.rename(folder)\n"
    "kernels.load()\n"
    "assert sorted(kernels._k['jobs']) == sorted(jobs.JOBS), kernels._k['jobs']\n"
)


ROUTES = (
    "from tfcli.engine.fast.source import llvm\n"
    "from tfcli.engine.fast.source.blocks32 import dot\n"
    "print('avx2' in llvm._FEATURES, llvm._VNNI, dot.WIDE)\n"
)


def _routes(features: list[str] | None) -> str:
    """Which instructions the kernels' sources pick for a feature set (None: this CPU's), as they decide
    it at import: vpmaddubsw/vpmaddwd by name (AVX2), vpdpbusd (VNNI), two groups at once (512-bit VNNI).
    In a process of its own: the sources import numba."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "TFCLI_KERNEL_FEATURES"}
    if features is not None:
        env["TFCLI_KERNEL_FEATURES"] = ",".join(features)
    return subprocess.run([sys.executable, "-c", ROUTES], capture_output=True, text=True, env=env, check=True).stdout.strip()


@pytest.fixture(scope="module")
def host_routes():
    return _routes(None)


@pytest.mark.parametrize("features", [["avx2"], []], ids=["avx2", "generic"])
def test_other_cpus_compute_the_same_bits(kernels, features, host_routes, tmp_path, request):
    """vpmaddwd is asked for by name on AVX-512 (llvm._madd), as two halves on AVX2, and written as
    the generic even/odd pattern elsewhere: kernels compiled as for those CPUs (in a process of
    their own, cached apart) give this machine's products bit for bit, 1 and 5 rows of x. A feature
    set that picks this machine's own instructions compiles what the suite's kernels are: nothing to
    compare."""
    import json
    import os

    if _routes(features) == host_routes:
        pytest.skip(f"compiled as for {json.dumps(features)}, the kernels pick this CPU's instructions: the suite's own")
    rng = np.random.default_rng(700)
    cases = {}
    for t in QUANTIZED:
        n, k = 40, row_length(t, 2)
        rows, x = random_rows(t, n, k, rng), rng.standard_normal((5, k)).astype(np.float32)
        np.save(tmp_path / f"rows{t}.npy", rows), np.save(tmp_path / f"x{t}.npy", x)
        cases[t] = [np.empty((T, n), np.float32) for T in (1, 5)]
        for out in cases[t]:
            kernels.product(x[: len(out)], rows, t, out, 0, n)
    code = COMPILE_VARIANT + (
        "import numpy as np\n"
        f"folder = {str(tmp_path)!r}\n"
        f"for t in {QUANTIZED!r}:\n"
        "    rows, x = np.load(f'{folder}/rows{t}.npy'), np.load(f'{folder}/x{t}.npy')\n"
        "    for T in (1, 5):\n"
        "        out = np.empty((T, len(rows)), np.float32)\n"
        "        kernels.product(np.ascontiguousarray(x[:T]), rows, t, out, 0, len(rows))\n"
        "        np.save(f'{folder}/out{t}-{T}.npy', out)\n"
    )
    cache = getattr(request.config, "cache", None)
    variants = cache.mkdir("tfcli-kernel-variants") if cache is not None else tmp_path / "kernels"
    env = dict(os.environ, TFCLI_KERNEL_CACHE=str(variants), TFCLI_KERNEL_FEATURES=",".join(features))  # compiled as for that CPU
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    for t, outs in cases.items():
        for out in outs:
            other = np.load(tmp_path / f"out{t}-{len(out)}.npy")
            assert np.array_equal(other, out, equal_nan=True), (name(t), len(out), json.dumps(features))


@pytest.mark.parametrize("types", [[12, 14, 12], [3, 2, 8], [0, 1, 30]], ids=["Q4_K+Q6_K", "Q4_1+Q4_0+Q8_0", "floats"])
def test_parts_in_one_call_are_each_part_alone(kernels, types):
    """A fused matrix (Q, K and V; gate and up) is read in place as parts, maybe of different types:
    product_parts gives each part's columns bit for bit what product() gives that part alone, on
    one thread and on two, x quantized once for all."""
    rng = np.random.default_rng(800 + types[0])
    k = row_length(types[0], 2)
    parts, first = [], 0
    for i, t in enumerate(types):
        rows = random_rows(t, 37 + 20 * i, k, rng)
        parts.append((rows, t, first))
        first += len(rows)
    for T in (1, 5):
        x = rng.standard_normal((T, k)).astype(np.float32)
        alone = np.concatenate([_product(kernels, x, rows, t) for rows, t, _ in parts], axis=1)
        for threads in (1, 2):
            together = np.full((T, first), np.nan, np.float32)
            kernels.product_parts(x, kernels.PartTable(parts), together, threads)
            assert np.array_equal(together, alone), (T, threads)


def _product(kernels, x, rows, t):
    out = np.empty((len(x), len(rows)), np.float32)
    kernels.product(x, rows, t, out, 0, len(rows))
    return out


@pytest.mark.parametrize("shape", [(3, 3, 64, 540), (1, 4, 256, 100), (1, 4, 256, 300), (2, 5, 96, 37), (4, 7, 40, 3)], ids=str)
def test_decode_attention_is_the_numpy_attention(kernels, shape):
    """kernels.attention (a decode step of a quantized model: attention_job.attention) against the NumPy
    attention it stands in for, on the caches' own layout (views of a larger room, keys and values
    kept [Hkv, room, Dh]), with key and column counts that are not multiples of 16 and head sizes
    that are not (the keys' dot products without the 16-wide kernel): within a few float32 steps of
    the largest output, the same bits on one thread and on two, and each key/value head the same
    whatever the others; keys given as a contiguous [Hkv, Dh, S] array, the same numbers."""
    from tfcli.engine.fast.run import dense_ops as ops

    n_kv, group, head_dim, s_len = shape
    rng = np.random.default_rng(sum(shape))
    keys = rng.standard_normal((n_kv, s_len + 19, head_dim)).astype(np.float32)  # [Hkv, room, Dh]
    values = rng.standard_normal((n_kv, s_len + 19, head_dim)).astype(np.float32)  # [Hkv, room, Dh]
    q = (rng.standard_normal((n_kv, group, 1, head_dim)) * 3).astype(np.float32)
    k, v = keys[:, :s_len].transpose(0, 2, 1), values[:, :s_len]  # [Hkv, Dh, S] as KVCache.held gives them
    want, _ = ops._attention_block(q, k, v, False)
    one, two = kernels.attention(q, k, v, 1), kernels.attention(q, k, v, 2)
    assert np.array_equal(one, two)
    assert np.abs(one - want).max() <= 16 * EPS * np.abs(want).max(), np.abs(one - want).max()
    alone = kernels.attention(q[:1], k[:1], v[:1], 1)
    assert np.array_equal(alone, one[:1])
    assert np.array_equal(kernels.attention(q, np.ascontiguousarray(k), v, 1), one)


def test_a_damaged_cache_is_compiled_again(kernels, tmp_path):
    """A cached object file cut short (a full disk, a killed copy) fails its sha256: the folder is
    removed and the kernels compiled again, once, and the product runs, in a process of its own.
    The compile there is kernels._build's product without its minutes: the suite's compiled files
    copied into the folder it is given (the real compile is the suite's first, and
    test_the_compiling_process_imports_this_tfcli_whatever_the_working_directory's command line)."""
    import shutil

    cached = kernels.cache_dir()
    copy = tmp_path / cached.name
    shutil.copytree(cached, copy)
    damaged = copy / "product_quantized.o"
    damaged.write_bytes(damaged.read_bytes()[:1000])
    builds = tmp_path / "builds.txt"
    compile_by_copy = (
        "import shutil\n"
        "from tfcli.engine.fast.load import kernels\n"
        "def _build(folder):\n"
        f"    open({str(builds)!r}, 'a').write(str(folder) + '\\n')\n"
        f"    shutil.copytree({str(cached)!r}, folder, dirs_exist_ok=True)\n"
        "kernels._build = _build\n"
    )
    env = dict(_env(kernels), TFCLI_KERNEL_CACHE=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", compile_by_copy + ZERO_PRODUCT], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert len(builds.read_text().splitlines()) == 1  # compiled again once
    assert damaged.read_bytes() == (cached / "product_quantized.o").read_bytes()  # in place
