"""Prompt passes on the integer kernels: products of many rows of x (more than one tile of
jobs.X_TILE rows, and more than kernel_products.KERNEL_ROWS) on weight rows interleaved 8 at a time.

- within the 8-bit activations' bound of the textbook: C float32 roundings of |x_q| @ |W|.T from the
  exact product (float64) of the quantized activations (activations.py) with formats' dequantized
  weights, as tests/test_kernels.py states it; x_q itself is within 1/254 of each block's largest |x|;
- each row of x the same bits whatever rows a call covers (one row, a tile, a tile and a rest), on one
  thread or two;
- kernel_products.product runs the kernels at any row count for the types of ALL_ROWS (the same bits
  as the rows one at a time), and dequantized tiles with BLAS beyond KERNEL_ROWS for the others.
"""

from __future__ import annotations

import numpy as np
import pytest

from tfcli.engine import formats
from tfcli.engine.formats import GGMLType
from tfcli.engine.quantized import Part, Quantized

from test_kernels import C, EPS, name, random_rows, reference, weights

ROWS32 = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0]
K_QUANTS = [GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]


def _k(t: int, blocks: int) -> int:
    """K of `blocks` blocks of type t (32 or 256 weights each)."""
    return formats.BLOCK_TYPES[t].weights * blocks
T_LONG = 133  # a tile of 128 rows of x (jobs.X_TILE), 4 more in the tile's loop, then 1 alone


@pytest.mark.parametrize("t", ROWS32 + K_QUANTS, ids=name)
def test_many_rows_equal_the_textbook_within_the_8_bit_bound(kernels, t):
    rng = np.random.default_rng(900 + t)
    n, k = 45, _k(t, 5 if t in ROWS32 else 2)
    rows = random_rows(t, n, k, rng)
    x = rng.standard_normal((T_LONG, k)).astype(np.float32)
    x[7, :32] = 0.0  # a block of x that is all zeros (scale 0)
    _, exact, scale = reference(x, weights(rows, t, n, k), t)
    out = np.full((T_LONG, n), np.nan, np.float32)
    kernels.product(x, rows, t, out, 0, n)
    err = np.abs(out - exact)
    assert (err <= C * EPS * scale).all(), (err / np.maximum(scale * EPS, 1e-300)).max()


@pytest.mark.parametrize("t", ROWS32 + K_QUANTS, ids=name)
def test_each_row_has_the_same_bits_whatever_rows_a_call_covers(kernels, t):
    rng = np.random.default_rng(950 + t)
    n, k = 37, _k(t, 3 if t in ROWS32 else 1)
    rows = random_rows(t, n, k, rng)
    x = rng.standard_normal((T_LONG, k)).astype(np.float32)
    together = np.full((T_LONG, n), np.nan, np.float32)
    kernels.product(x, rows, t, together, 0, n)
    two = np.full((T_LONG, n), np.nan, np.float32)
    kernels.product(x, rows, t, two, 0, n, threads=2)
    assert np.array_equal(together, two)
    for first, end in [(0, 1), (127, 128), (128, 133), (3, 70), (132, 133)]:
        part = np.full((end - first, n), np.nan, np.float32)
        kernels.product(np.ascontiguousarray(x[first:end]), rows, t, part, 0, n)
        assert np.array_equal(together[first:end], part), (first, end)


def _quantized(t: int, n: int, k: int, rng) -> Quantized:
    """A family's [in, out] weight of n rows of type t, as a GGUF file holds it."""
    return Quantized((Part(t, random_rows(t, n, k, rng)),), k).T


@pytest.mark.parametrize("t", [GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K], ids=name)
def test_a_long_prompt_product_is_the_kernels_one_row_at_a_time(kernels, t, monkeypatch):
    from tfcli.engine.fast.run import kernel_products

    monkeypatch.setattr(kernel_products, "ALL_ROWS", kernel_products.VNNI_ROWS)  # as on a CPU with VNNI
    rng = np.random.default_rng(990 + t)
    n, k = 52, _k(t, 4 if t in ROWS32 else 1)
    w = _quantized(t, n, k, rng)
    x = rng.standard_normal((kernel_products.KERNEL_ROWS + 13, k)).astype(np.float32)  # [T, K]
    y = kernel_products.product(x, w, threads=2)  # [T, N]
    for i in (0, 5, len(x) - 1):
        assert np.array_equal(y[i], kernel_products.product(x[i : i + 1], w)[0]), i


def test_the_other_types_run_tiles_beyond_kernel_rows(kernels, monkeypatch):
    """The types outside ALL_ROWS (every type on an AVX-512 CPU without VNNI, Q8_0 on AVX2 without VNNI)
    multiply a long prompt as dequantized float32 tiles (BLAS): within float32's rounding of the float32
    weights' product, far inside the 8-bit activations' error (about 1/254 of a block's largest |x|)."""
    from tfcli.engine.fast.run import kernel_products

    monkeypatch.setattr(kernel_products, "ALL_ROWS", frozenset())
    rng = np.random.default_rng(999)
    cases = [(GGMLType.Q8_0, 64), (GGMLType.Q4_K, 256), (GGMLType.Q6_K, 256), (GGMLType.Q4_1, 64)]
    for t, k in cases:
        w = _quantized(t, 24, k, rng)
        x = rng.standard_normal((kernel_products.KERNEL_ROWS + 1, k)).astype(np.float32)  # [T, K]
        dense = formats.dequantize(w.parts[0].data, t, (24, k))  # [N, K]
        exact = x.astype(np.float64) @ dense.astype(np.float64).T  # [T, N]
        bound = np.abs(x).astype(np.float64) @ np.abs(dense).astype(np.float64).T
        y = kernel_products.product(x, w)
        assert (np.abs(y - exact) <= 4 * k * EPS * bound).all(), name(t)  # float32 sums of k terms


def test_a_matrix_of_two_types_multiplies_each_part_its_own_way(kernels, monkeypatch):
    """A fused matrix (Gemma 3's Q/K/V: Q5_0 beside Q8_0) past KERNEL_ROWS on AVX2 without VNNI: the part of a
    type of ALL_ROWS on the integer kernels (its columns the bits of that part's product alone), the other on
    float32 tiles."""
    from tfcli.engine.fast.run import kernel_products

    monkeypatch.setattr(kernel_products, "ALL_ROWS", kernel_products.AVX2_ROWS)
    rng = np.random.default_rng(1001)
    k = 64
    a, b = random_rows(GGMLType.Q5_0, 40, k, rng), random_rows(GGMLType.Q8_0, 16, k, rng)
    w = Quantized((Part(GGMLType.Q5_0, a), Part(GGMLType.Q8_0, b, np.arange(16)[::-1].copy())), k).T
    x = rng.standard_normal((kernel_products.KERNEL_ROWS + 3, k)).astype(np.float32)  # [T, K]
    y = kernel_products.product(x, w, threads=2)  # [T, 56]
    alone = np.empty((len(x), 40), np.float32)
    kernels.product(x, a, GGMLType.Q5_0, alone, 0, 40)
    assert np.array_equal(y[:, :40], alone)
    dense = formats.dequantize(b, GGMLType.Q8_0, (16, k))[::-1]  # [16, K], the model's order
    exact = x.astype(np.float64) @ dense.astype(np.float64).T  # [T, 16]
    bound = np.abs(x).astype(np.float64) @ np.abs(dense).astype(np.float64).T
    assert (np.abs(y[:, 40:] - exact) <= 4 * k * EPS * bound).all()


def test_which_types_run_every_row_count_on_the_integers_follows_the_cpu():
    """VNNI: every type (Q8_0 too); AVX2 alone: all but Q8_0; AVX-512 without VNNI, or no AVX2: none."""
    from tfcli.engine.fast.run.kernel_products import AVX2_ROWS, VNNI_ROWS, all_rows_for

    assert all_rows_for({"avx2", "avx512f", "avx512_vnni"}) == VNNI_ROWS
    assert all_rows_for({"avx2", "avx_vnni"}) == VNNI_ROWS
    assert all_rows_for({"avx2", "fma"}) == AVX2_ROWS
    assert GGMLType.Q8_0 in VNNI_ROWS and GGMLType.Q8_0 not in AVX2_ROWS
    assert all_rows_for({"avx2", "avx512f"}) == all_rows_for({"sse4_2"}) == frozenset()


@pytest.mark.parametrize("t", [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1], ids=name)
def test_the_largest_sums_do_not_overflow_16_bits(kernels, t):
    """Every weight's q at its largest (15, or 31 with the fifth bit) against x whose 8-bit q are all 127
    or all -127: the int16 sums of blocks32.RUN16 reach their bound (8 x 3,810 = 30,480 for 4-bit q,
    4 x 7,874 = 31,496 for 5-bit) and stay exact, for 1, 4 and 9 rows of x."""
    from test_kernels import PAYLOAD

    bt = formats.BLOCK_TYPES[t]
    n, k = 16, 32 * 4
    blocks = np.full((n * k // 32, bt.nbytes), 0xFF, np.uint8)  # [B, nbytes]: every q and fifth bit set
    assert PAYLOAD[t][1] <= bt.nbytes
    assert_extreme_sums_exact(kernels, blocks, t, n, k)


@pytest.mark.parametrize("t", K_QUANTS, ids=name)
def test_the_largest_k_quant_sums_do_not_overflow_16_bits(kernels, t):
    """Every weight's q at its largest (15, 31 or 63, scales and mins 63 or 127) against x whose 8-bit q
    are all 127 or all -127: the int16 sums of k_quants.RUN16 reach their bound (8 x 3,810 for Q4_K,
    4 x 7,874 for Q5_K, 2 x 16,002 for Q6_K) and stay exact, for 1, 4 and 9 rows of x."""
    bt = formats.BLOCK_TYPES[t]
    n, k = 16, 256 * 2
    blocks = np.full((n * k // 256, bt.nbytes), 0xFF, np.uint8)  # [B, nbytes]: every bit of q set
    if t == GGMLType.Q6_K:
        blocks[:, 192:208] = 127  # int8 scales: 0xFF would be -1
    assert_extreme_sums_exact(kernels, blocks, t, n, k)


def assert_extreme_sums_exact(kernels, blocks, t, n: int, k: int) -> None:
    """`blocks` [n * k / block, nbytes] with every half-precision scale set to 0.5, as n rows of k
    weights, against x whose 8-bit q are all 127 or all -127 (rows alternating), for 1, 4 and 9 rows
    of x: the kernels' products within the 8-bit activations' bound of the exact sums."""
    from test_kernels import HALF_FIELDS

    for at in HALF_FIELDS[t]:
        blocks[:, at : at + 2] = np.full(len(blocks), 0.5, np.float16).view(np.uint8).reshape(-1, 2)
    rows = blocks.reshape(n, -1)
    w = weights(rows, t, n, k)
    for T in (1, 4, 9):
        x = np.where(np.arange(T)[:, None] % 2 == 0, 1.0, -1.0) * np.ones((T, k))  # [T, K]: q all 127 or all -127
        x = x.astype(np.float32)
        _, exact, scale = reference(x, w, t)
        out = np.full((T, n), np.nan, np.float32)
        kernels.product(x, rows, t, out, 0, n)
        assert (np.abs(out - exact) <= C * EPS * scale).all(), (T, out[:, 0], exact[:, 0])
