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
from tfcli.engine.fast import FAST  # noqa: E402

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
    return lm.model.forward(np.array(ids), lm.model.new_cache(len(ids)), all_logits=True, run=FAST)  # [T, V]


@pytest.fixture(scope="module")
def in_place(mixed_gguf, tmp_path_factory):
    """The mixed GGUF (every block type llama.cpp's original formats have) run in place."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TFCLI_HOME", str(tmp_path_factory.mktemp("home")))
    folder, _ = converted(mixed_gguf)
    yield load_folder(folder)
    mp.undo()


def test_a_gguf_run_in_place_equals_the_same_file_converted_to_float32(in_place, mixed_folder, monkeypatch):
    """The same blocks, dequantized at load (convert) or when used (in place): the same logits, to
    float32 reordering, on the textbook and on the fast path with a prompt of more than
    fast.run.kernel_products.KERNEL_ROWS tokens on dequantized tiles. (Fewer rows, and on AVX2 CPUs
    without VNNI the 32-weight types at any count, run on the integer kernels, whose 8-bit activations
    test_kernels, test_kernel_rows and test_smollm2 hold to their own bounds.)"""
    from tfcli.engine.fast.run import kernel_products

    monkeypatch.setattr(kernel_products, "ALL_ROWS", frozenset())  # every long product on the tiles
    monkeypatch.setattr(in_place.model, "kv_type", "f32")  # the float32 keys and values the folder's run keeps
    ids = list(range(1, 61))
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



# --- memory: a file over 200 MB, run in place ---------------------------------------------------------


def write_big_q4_k_m(path: Path, layers: int = 30, d: int = 1024, f: int = 2816) -> Path:
    """A Llama of about 0.3B parameters as a Q4_K_M file is laid out (Q4_K matrices, Q6_K for V, the
    MLP's down projection and the embedding; F32 norms), random blocks with small finite scales, and
    the tiny Llama's 300-token vocabulary: 0.2 GB of weights that only running them in place keeps."""
    import json

    from conftest import TINY_LLAMA

    rng = np.random.default_rng(0)
    heads, kv_heads = 16, 4
    tok = json.loads((TINY_LLAMA / "tokenizer.json").read_text())
    w = gguf.GGUFWriter(str(path), "llama")
    for add, value in ((w.add_block_count, layers), (w.add_context_length, 256), (w.add_embedding_length, d), (w.add_feed_forward_length, f),
                       (w.add_head_count, heads), (w.add_head_count_kv, kv_heads), (w.add_rope_freq_base, 10000.0),
                       (w.add_layer_norm_rms_eps, 1e-5), (w.add_rope_dimension_count, d // heads), (w.add_vocab_size, 300)):  # fmt: skip
        add(value)
    vocab = tok["model"]["vocab"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(sorted(vocab, key=vocab.get))
    w.add_token_types([1] * len(vocab))
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)

    def blocks(rows: int, cols: int, qtype: Q) -> np.ndarray:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        data = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
        a, b = K_SCALES[qtype]
        data[:, a:b] = rng.uniform(0.0005, 0.002, (len(data), (b - a) // 2)).astype(np.float16).view(np.uint8)
        return data.reshape(rows, -1)

    kv = d // heads * kv_heads
    w.add_tensor("token_embd.weight", blocks(300, d, Q.Q6_K), raw_dtype=Q.Q6_K)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    for i in range(layers):
        for name, rows, cols, qtype in (("attn_q", d, d, Q.Q4_K), ("attn_k", kv, d, Q.Q4_K), ("attn_v", kv, d, Q.Q6_K), ("attn_output", d, d, Q.Q4_K),
                                        ("ffn_gate", f, d, Q.Q4_K), ("ffn_up", f, d, Q.Q4_K), ("ffn_down", d, f, Q.Q6_K)):  # fmt: skip
            w.add_tensor(f"blk.{i}.{name}.weight", blocks(rows, cols, qtype), raw_dtype=qtype)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_show_and_params_read_a_gguf_as_it_runs(cli, mixed_gguf):
    """`show FILE.gguf` names the file the model runs from, what memory holds (its blocks), and the
    format of each kind of tensor; `params --from FILE.gguf` reconciles the file's tensors with the shape."""
    import json

    r = cli("show", mixed_gguf, "--json")
    assert r.exit_code == 0, r.stderr
    w = json.loads(r.stdout)["weights"]
    assert w["in_place"] == str(mixed_gguf.resolve()) and w["file_bytes"] == mixed_gguf.stat().st_size
    formats = {g["format"]: g for g in w["formats"]}
    assert formats["Q8_0"]["kinds"] == ["embedding", "MLP"] and formats["Q4_1"]["kinds"] == ["attention"]
    assert w["held_bytes"] == sum(g["bytes"] for g in w["formats"]) < mixed_gguf.stat().st_size
    assert "run in place from" in cli("show", mixed_gguf).stdout
    r = cli("params", "--from", mixed_gguf, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["from"]["agree"], r.stderr


PEAK = "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); assert r.returncode == 0, r.stderr.decode(); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"


def peak_bytes(*args: str, env: dict) -> int:
    """The peak resident memory of `tfcli ARGS` run as its own process."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "tfcli", *args], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return int(r.stdout.split()[-1])


def test_a_file_over_200_mb_runs_holding_it_once(tmp_path):
    """`tfcli generate -m FILE.gguf` on 215 MB of Q4_K/Q6_K blocks holds the file once: its peak above
    a bare `tfcli generate` on the shipped model stays under 1.3x the file's size. The file's pages
    are mapped, never copied (fused matrices are multiplied as parts), and the kernels are machine
    code loaded without numba or LLVM. Widened to float32, as tfcli did before, the same file took
    four times its size."""
    import os

    big = write_big_q4_k_m(tmp_path / "big.gguf")
    env = dict(os.environ, TFCLI_HOME=str(tmp_path / "home"))
    run = ["generate", "hi", "-n", "4", "-t", "0", "-q"]
    peak_bytes(*run, "-m", str(big), env=env)  # indexes the file, compiles the kernels (once, cached)
    bare, in_place = peak_bytes(*run, env=env), peak_bytes(*run, "-m", str(big), env=env)
    size = big.stat().st_size
    assert size > 200e6
    assert in_place - bare < 1.3 * size, f"{(in_place - bare) / 1e6:.0f} MB above a bare run for a file of {size / 1e6:.0f} MB"


@pytest.mark.parametrize("kind, ratio", [("q8_0", 34 / 128), ("q4_0", 18 / 128)])
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_quantize_at_load_turns_every_matrix_into_blocks(family, kind, ratio):
    """--quantize: a float32 folder's matrices become GGUF blocks along their input axis (formats.quantize,
    gguf-py's bit for bit), a tied unembedding stays the embedding's transpose, and the model computes
    what the textbook computes from those blocks."""
    from conftest import TINY_GPT2, TINY_LLAMA

    from tfcli.engine.quantized import quantize_weights

    lm = load_folder({"gpt2": TINY_GPT2, "llama": TINY_LLAMA}[family])
    m = lm.model
    w_in = np.array(m.layers[0].mlp.w_in)  # [D, F or 2F], float32
    ids = list(range(1, 30))
    ref = forward_logits(lm, ids)
    quantize_weights(m, kind)
    matrices = [w for w in m.weights() if isinstance(w, Quantized)]
    assert matrices and all(p.format == kind.upper() for w in matrices for p in w.parts)
    assert not [w for w in m.weights() if isinstance(w, np.ndarray) and w.ndim == 2 and w.shape[0] % 32 == 0 and w is not getattr(m, "wpe", None)]
    if lm.config.tie_embeddings:
        assert m.unembedding.parts is m.token_embedding.parts
    q = m.layers[0].mlp.w_in  # [D, F or 2F]
    assert q.nbytes == pytest.approx(q.shape[0] * q.shape[1] * 4 * ratio)
    gguf_blocks = np.ascontiguousarray(gguf.quants.quantize(np.ascontiguousarray(w_in.T), Q[kind.upper()])).view(np.uint8)
    np.testing.assert_array_equal(q.parts[0].data.reshape(-1), gguf_blocks.reshape(-1))  # the rows of [out, in], as a GGUF holds them
    fast = forward_logits(lm, ids)
    plain = m.forward(np.array(ids), m.new_cache(len(ids)), all_logits=True, run=executor.PLAIN)
    assert np.abs(fast - plain).max() <= 0.06 * np.abs(plain).max()  # the kernels' 8-bit activations against float32 ones: 0.023-0.037 measured on these tiny random models
    if kind == "q8_0":  # what 8-bit blocks lose on these random weights: a few percent (4-bit ones, far more)
        assert np.abs(plain - ref).max() / np.abs(ref).max() < 0.05


def test_quantize_flag(cli, mixed_gguf):
    from conftest import TINY_LLAMA

    r = cli("generate", "-m", TINY_LLAMA, "hi", "-n", "3", "-t", "0", "--quantize", "q8_0")
    assert r.exit_code == 0, r.stderr
    r = cli("generate", "-m", mixed_gguf, "hi", "-n", "3", "--quantize", "q4_0")
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]  # after the line saying where its index went
    assert r.exit_code == 2 and len(errors) == 1 and "already quantized" in errors[0], r.stderr


def test_the_first_run_lines_fit_the_width(cli, mixed_gguf, monkeypatch):
    """-m FILE.gguf's first run says where the index went and that the kernels compile: prose,
    wrapped to the terminal's width like every view (a path whole on a line of its own)."""
    import tfcli.engine.fast.run.kernel_products as fast_quantized
    from test_width import too_wide

    monkeypatch.setattr(fast_quantized, "prepare", lambda on_compile=None: on_compile() if on_compile else None)  # as if nothing were compiled yet
    monkeypatch.setenv("COLUMNS", "60")
    r = cli("generate", "-m", mixed_gguf, "hi", "-n", "2", "-t", "0")
    assert r.exit_code == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert "runs in place" in said and "compiling the kernels for this CPU (once; later runs load them)" in said, r.stderr
    assert too_wide("\n".join(line for line in r.stderr.splitlines() if "tok/s" not in line), 60) == [], r.stderr


def test_a_kernel_pass_on_two_workers_runs_blas_on_one_thread(monkeypatch, in_place, mixed_folder):
    """The compiled kernels' threads and BLAS's follow one policy: in a few-row pass of a quantized
    model on two workers, the kernels have the cores and BLAS (attention's products) runs on one
    thread, back to its setting afterwards; a float32 model's pass keeps BLAS's threads."""
    from threadpoolctl import threadpool_limits

    from tfcli.engine import threads
    from tfcli.engine.fast.run.fast_executor import Fast, on_kernels

    def blas_threads() -> int:  # of the BLAS libraries NumPy had loaded when tfcli first looked (numba may load SciPy's later)
        return max(c.num_threads for c in threads._blas_controller().lib_controllers if c.user_api == "blas")

    seen: list[int] = []
    for name in ("attention", "blocks"):  # the pass's attention, or its blocks compiled whole (fast/blocks.py)
        real = getattr(Fast, name)
        monkeypatch.setattr(Fast, name, lambda self, *a, real=real, **k: seen.append(blas_threads()) or real(self, *a, **k))
    for model, quantized in ((load_folder(mixed_folder).model, False), (in_place.model, True)):
        assert on_kernels(model) == quantized
        seen.clear()
        with threadpool_limits(2, user_api="blas"):
            outside = blas_threads()
            model.forward(np.array([1, 2, 3]), model.new_cache(8), run=Fast(2))
            model.forward(np.array([4]), model.new_cache(8), run=Fast(2))
            assert blas_threads() == outside
        assert seen and set(seen) == ({1} if quantized else {outside}), (quantized, seen)


def test_quantizing_a_loaded_model_makes_it_hold_blocks():
    from conftest import TINY_LLAMA

    from tfcli.engine.fast.run.fast_executor import on_kernels
    from tfcli.engine.quantized import quantize_weights

    lm = load_folder(TINY_LLAMA)
    assert not on_kernels(lm.model)  # asked before quantizing: quantize_weights makes it ask again
    quantize_weights(lm.model, "q8_0")
    assert on_kernels(lm.model) == lm.model.quantized()
