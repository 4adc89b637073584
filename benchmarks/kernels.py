"""The compiled quantized products (tfcli/engine/fast/kernels.py) against NumPy float32, one thread.

    python benchmarks/kernels.py                 # every compiled type, T = 1, 4, 16
    python benchmarks/kernels.py --types Q4_1 Q8_0 --rounds 30

For each type, the matrices of one SmolLM2-135M block whose row length is a multiple of the type's
block (q, k, v, o [576 wide], gate, up, down; the k-quants, whose blocks are 256 wide, only have
down [576 x 1536], so Gemma 3 270M's down [640 x 2048] is added), random weights. Per round, the
kernels' product and NumPy's `x @ W.T` on the dequantized float32 weights (BLAS on one thread) run
one after the other, so both see the same machine; the median over rounds is printed, and the
ratio kernels / NumPy (below 1: the kernels are faster). "T4/T1" is what 4 rows of x cost against
one (the few-row kernels read each weight row once for all rows). No timed assertion: the figures
go to benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from tfcli.engine import formats
from tfcli.engine.fast.load import kernels

SMOLLM2 = {"q": (576, 576), "k": (192, 576), "v": (192, 576), "o": (576, 576), "gate": (1536, 576), "up": (1536, 576), "down": (576, 1536)}
GEMMA_DOWN = (640, 2048)
SCALES = {3: 4, 7: 4, 12: 4, 13: 4}  # bytes of float16 scale at the start of a block (the rest: 2); Q6_K's is at its end


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.processor())
    except OSError:
        return platform.processor()


def random_rows(type_id: int, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[n, row bytes] uint8 of random blocks whose float16 scales are small and finite (F32: float32 [n, k])."""
    if type_id == 0:
        return rng.standard_normal((n, k)).astype(np.float32)
    bt = formats.BLOCK_TYPES[type_id]
    if type_id == 1:
        return (rng.standard_normal((n, k)) * 0.05).astype(np.float16).view(np.uint8)
    if type_id == 30:
        return ((rng.standard_normal((n, k)) * 0.05).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    blocks = rng.integers(0, 256, (n * k // bt.weights, bt.nbytes), dtype=np.uint8)  # [blocks, nbytes]
    at = slice(208, 210) if type_id == 14 else slice(0, SCALES.get(type_id, 2))
    blocks[:, at] = (rng.random((len(blocks), (at.stop - at.start) // 2)) * 0.01).astype(np.float16).view(np.uint8)
    return blocks.reshape(n, -1)


def shapes(type_id: int) -> dict[str, tuple[int, int]]:
    block = formats.BLOCK_TYPES[type_id].weights
    chosen = {name: s for name, s in SMOLLM2.items() if s[1] % block == 0}
    return chosen | ({"gemma down": GEMMA_DOWN} if block == 256 else {})


def median_times(type_id: int, T: int, rounds: int, layers: int, rng: np.random.Generator) -> tuple[float, float]:
    """(kernels, NumPy) seconds for the products with every matrix of shapes(type_id), `layers` copies of
    each (so that the weights stream from memory as in a decode step), median over rounds."""
    mats = []
    for n, k in [s for s in shapes(type_id).values() for _ in range(layers)]:
        rows = random_rows(type_id, n, k, rng)
        w = formats.dequantize(rows.view(np.uint8), type_id, (n, k))  # [n, k] float32, for NumPy
        mats.append((rows, w, rng.standard_normal((T, k)).astype(np.float32), np.empty((T, n), np.float32)))
    ours, theirs = [], []
    with threadpool_limits(1):
        for _ in range(rounds):
            t0 = time.perf_counter()
            for rows, _w, x, out in mats:
                kernels.product(x, rows, type_id, out, 0, len(out[0]))
            t1 = time.perf_counter()
            for _rows, w, x, _out in mats:
                x @ w.T  # [T, k] @ [k, n] -> [T, n]
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            theirs.append(t2 - t1)
    return statistics.median(ours), statistics.median(theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", nargs="*", default=None, help="type names (default: every compiled type)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--layers", type=int, default=1, help="copies of each matrix (SmolLM2 has 30 blocks: 30 streams from memory)")
    args = parser.parse_args()
    import numba

    t0 = time.perf_counter()
    kernels.load()
    print(f"CPU: {cpu_name()}; numba {numba.__version__}; kernels loaded in {time.perf_counter() - t0:.2f} s; {args.layers} layer(s)")
    ids = sorted(kernels.SUPPORTED, key=lambda t: formats.BLOCK_TYPES[t].name)
    if args.types:
        ids = [t for t in ids if formats.BLOCK_TYPES[t].name in args.types]
    rng = np.random.default_rng(0)
    print(f"{'type':6} {'matrices':28} " + " ".join(f"{f'T={T} ms (NumPy)':>18} {'ratio':>6}" for T in (1, 4, 16)) + "  T4/T1")
    for t in ids:
        row, per_t = [], {}
        for T in (1, 4, 16):
            ours, theirs = median_times(t, T, args.rounds, args.layers, rng)
            per_t[T] = ours
            row.append(f"{ours * 1e3:7.3f} ({theirs * 1e3:7.3f}) {ours / theirs:6.2f}")
        print(f"{formats.BLOCK_TYPES[t].name:6} {'+'.join(shapes(t)):28} " + " ".join(row) + f"  {per_t[4] / per_t[1]:5.2f}")


if __name__ == "__main__":
    main()
