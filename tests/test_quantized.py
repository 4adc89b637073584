"""Quantized weights kept as the file stores them (engine/quantized.py), and GGUF files run in place.

The reference for every check is the float32 matrix the blocks stand for (formats.dequantize,
itself held bit for bit to gguf-py in test_gguf.py): indexing a Quantized equals indexing that
matrix; a model run from the GGUF in place equals the same file converted to float32.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
sys.path.insert(0, str(Path(__file__).parent))

from conftest import assert_f32_close, assert_f32_near  # noqa: E402
from test_gguf import MIXED, mixed_folder, mixed_gguf, write_gguf  # noqa: E402, F401 (fixtures)

from tfcli.engine import executor  # noqa: E402
from tfcli.engine.formats import BLOCK_TYPES, dequantize  # noqa: E402
from tfcli.engine.gguf_weights import rope_order  # noqa: E402
from tfcli.engine.loader import load_folder  # noqa: E402
from tfcli.engine.quantized import Part, Quantized, stack, textbook_product  # noqa: E402
from tfcli.store.gguf import unpermute_rope_rows  # noqa: E402
from tfcli.store.gguf.cached import converted  # noqa: E402

Q = gguf.GGMLQuantizationType
K_SCALES = {Q.Q4_K: (0, 4), Q.Q5_K: (0, 4), Q.Q6_K: (208, 210)}  # where each k-quant block keeps its float16 scales


def quantized(rows: int, cols: int, qtype: Q, seed: int = 0, order: np.ndarray | None = None) -> tuple[Quantized, np.ndarray]:
    """A Quantized [rows, cols] of random weights and the float32 matrix its blocks stand for."""
    rng = np.random.default_rng(seed)
    if qtype in K_SCALES:  # gguf-py cannot quantize to the k-quants: random blocks with finite float16 scales
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        blocks = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
        a, b = K_SCALES[qtype]
        blocks[:, a:b] = rng.uniform(-0.01, 0.01, (len(blocks), (b - a) // 2)).astype(np.float16).view(np.uint8)
        data = blocks.reshape(rows, -1)  # [rows, row_bytes]
    else:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        data = np.ascontiguousarray(gguf.quants.quantize(x, qtype)).view(np.uint8).reshape(rows, -1)  # [rows, row_bytes]
    if qtype == Q.F32:
        data = data.view("<f4")
    whole = dequantize(data.reshape(-1).view(np.uint8), qtype.value, (rows, cols))  # [rows, cols]
    return Quantized((Part(qtype.value, data, order),), cols), (whole if order is None else whole[order])


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1, Q.Q4_K, Q.Q6_K, Q.F16, Q.F32], ids=lambda q: q.name)
def test_indexing_a_quantized_matrix_equals_indexing_its_float32_matrix(qtype):
    w, ref = quantized(40, 512, qtype, seed=qtype.value)
    keys = [3, np.int64(7), slice(2, 9), slice(None, None, 5), np.array([0, 39, 5, 5]), (slice(1, 4), slice(10, 20)), (np.array([2, 3]), 17), (5, slice(None))]
    for key in keys:
        np.testing.assert_array_equal(w[key], ref[key])
    wt, reft = w.T, ref.T  # the [in, out] view a family keeps
    assert wt.shape == reft.shape == (512, 40)
    for key in [(slice(None), 3), (slice(None), np.array([1, 38])), (slice(100, 104), slice(None)), 7]:
        np.testing.assert_array_equal(wt[key], reft[key])
    np.testing.assert_array_equal(np.asarray(w), ref)
    np.testing.assert_array_equal(np.asarray(wt), reft)
    with pytest.raises(IndexError):
        w[40]


def test_stacked_parts_of_several_types_and_a_row_order_read_as_one_matrix():
    """Llama's fused Q, K, V of a Q4_K_M file: parts of several block types, Q and K in llama.cpp's
    RoPE row order (undone by each part's order)."""
    order = rope_order(32, heads=4)
    q, q_ref = quantized(32, 256, Q.Q4_K, seed=1, order=order)
    k, k_ref = quantized(16, 256, Q.Q6_K, seed=2)
    v, v_ref = quantized(16, 256, Q.Q8_0, seed=3)
    w, ref = stack([q, k, v]), np.concatenate([q_ref, k_ref, v_ref])  # [64, 256]
    assert w.shape == (64, 256) and w.formats == ("Q4_K", "Q6_K", "Q8_0")
    np.testing.assert_array_equal(np.asarray(w), ref)
    np.testing.assert_array_equal(w[np.array([63, 0, 31, 32])], ref[[63, 0, 31, 32]])
    x = np.random.default_rng(4).standard_normal((5, 256)).astype(np.float32)
    assert_f32_close(textbook_product(x, w.T), x @ ref.T)
    assert_f32_close(executor.PLAIN.linear(x, w.T), x @ ref.T)
    assert w.nbytes == sum(p.data.nbytes for p in w.parts) < ref.nbytes // 3


def test_rope_order_is_the_row_order_unpermute_gives():
    """The order a quantized Q or K part reads its rows in is what conversion's unpermute_rope_rows does to float32 rows."""
    rows = np.arange(48, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)  # [48, 3], row r full of r
    np.testing.assert_array_equal(unpermute_rope_rows(rows, 6)[:, 0], rope_order(48, 6))


def forward_logits(lm, ids) -> np.ndarray:
    return lm.model.forward(np.array(ids), lm.model.new_cache(len(ids)), all_logits=True)  # [T, V]


@pytest.fixture(scope="module")
def in_place(mixed_gguf, tmp_path_factory):
    """The mixed GGUF (every block type llama.cpp's original formats have) run in place."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TFCLI_HOME", str(tmp_path_factory.mktemp("home")))
    folder, _ = converted(mixed_gguf)
    yield load_folder(folder)
    mp.undo()


def test_a_gguf_run_in_place_equals_the_same_file_converted_to_float32(in_place, mixed_folder):
    """The same blocks, dequantized at load (convert) or when used (in place): the same logits, to
    float32 reordering, on the textbook and on the fast path."""
    ids = list(range(1, 40))
    ref = forward_logits(load_folder(mixed_folder), ids)  # [T, V]
    assert in_place.model.quantized() and not (in_place.path / "model.safetensors").exists()
    assert_f32_near(forward_logits(in_place, ids), ref)
    m = in_place.model
    plain = m.forward(np.array(ids), m.new_cache(len(ids)), all_logits=True, run=executor.PLAIN)
    assert_f32_near(plain, ref)


def test_the_in_place_model_holds_the_blocks_not_float32(in_place, mixed_gguf):
    """What a decode step reads is the blocks: weight_bytes counts them, and they are views of the file."""
    m = in_place.model
    assert m.weight_bytes() < mixed_gguf.stat().st_size
    w = m.layers[0].mlp.w_in
    assert isinstance(w, Quantized) and not any(p.data.flags.owndata for p in w.parts)
    assert {p.format for p in w.parts} == {"Q8_0", "F16"}  # gate Q8_0 and up F16, side by side without a copy


def test_views_read_quantized_matrices_on_demand(in_place, mixed_folder):
    """What the analyses read of a whole matrix (an unembedding column, an embedding row, a neuron's
    output row) is the float32 matrix's."""
    ref = load_folder(mixed_folder).model
    m = in_place.model
    np.testing.assert_array_equal(m.unembedding[:, [5, 9]], ref.unembedding[:, [5, 9]])
    np.testing.assert_array_equal(m.token_embedding[np.array([3, 3, 7])], ref.token_embedding[[3, 3, 7]])
    np.testing.assert_array_equal(m.layers[1].mlp.w_out[4], ref.layers[1].mlp.w_out[4])
    np.testing.assert_array_equal(np.asarray(m.layers[0].w_qkv), ref.layers[0].w_qkv)  # Q and K rows in Hugging Face's order

