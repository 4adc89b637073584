"""GGUF import: the dequantizers against the gguf package, and `tfcli convert` on small GGUF files
written with gguf.GGUFWriter from the tiny Llama in tests/data (GQA, Q/K rows permuted the way
llama.cpp's convert_hf_to_gguf.py permutes them), checked against transformers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

from tfcli.store.manifest import verify_manifest
from tfcli.store import gguf as tg  # noqa: E402
from tfcli.store.gguf import family as gguf_family  # noqa: E402
from tfcli.store import load  # noqa: E402
from tfcli.engine.errors import GGUFError  # noqa: E402

from conftest import TINY_LLAMA, reference  # noqa: E402
from tfcli.engine.fast import FAST  # noqa: E402

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TINY_PARAMS = sum(w.size for w in load_file(TINY_LLAMA / "model.safetensors").values())
TEXTS = ["Hello, world!", "The quick brown fox 🙂", "今天天气很好。", "  two  spaces\n\n\tand a tab", "café naïve", "<|endoftext|>x"]

# A mix that exercises every dequantizer (and llama.cpp's permutation under quantization).
MIXED = {
    "token_embd": Q.Q8_0, "attn_q": Q.Q4_1, "attn_k": Q.Q4_0, "attn_v": Q.Q5_0, "attn_output": Q.Q5_1,
    "ffn_gate": Q.Q8_0, "ffn_up": Q.F16, "ffn_down": Q.BF16, "output": Q.F16,
}  # fmt: skip


# --- writing GGUF files the way llama.cpp does ------------------------------------------------------


def llama_cpp_permute(w: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """convert_hf_to_gguf.py `LlamaModel.permute`, as written there."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_names(n_layer: int, tied: bool) -> dict[str, str]:
    """HF name -> llama.cpp name (written out here, not taken from tfcli)."""
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not tied:
        names["lm_head.weight"] = "output.weight"
    per_layer = {
        "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    }  # fmt: skip
    for i in range(n_layer):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    return names


def finish(w) -> None:
    """Write out a gguf-py GGUFWriter: header, metadata, tensors."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gguf(
    path: Path,
    *,
    types: dict[str, Q] | None = None,
    tied: bool = False,
    arch: str = "llama",
    pre: str = "gpt2",
    alignment: int | None = None,
    add_bos: bool = False,
    sentencepiece=None,
    vocab_rows: int | None = None,
    tweak=None,
) -> Path:
    """The tiny Llama of tests/data as a GGUF file; `types` picks a ggml type per tensor kind (default F32);
    `vocab_rows` keeps only that many rows of the embedding and output matrices (the vocabulary stays);
    `tweak(writer)` may add metadata or tensors before the file is written."""
    cfg = json.loads((TINY_LLAMA / "config.json").read_text())
    weights = load_file(TINY_LLAMA / "model.safetensors")
    tok = json.loads((TINY_LLAMA / "tokenizer.json").read_text())
    H, Hkv, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_vocab_size(vocab_rows or cfg["vocab_size"])
    if alignment:
        w.add_custom_alignment(alignment)
    if sentencepiece is not None:
        write_sentencepiece_vocab(w, sentencepiece)
    else:
        vocab = tok["model"]["vocab"]
        special = {t["content"] for t in tok["added_tokens"]}
        tokens = sorted(vocab, key=vocab.get)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types([3 if t in special else 1 for t in tokens])  # 3 = CONTROL
        w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
        w.add_bos_token_id(0)
        w.add_eos_token_id(0)
        w.add_add_bos_token(add_bos)
    w.add_chat_template(CHATML)
    for hf, gg in gguf_names(L, tied).items():
        arr = weights[hf]
        if vocab_rows and gg in ("token_embd.weight", "output.weight"):
            arr = np.ascontiguousarray(arr[:vocab_rows])
        if "q_proj" in hf:
            arr = llama_cpp_permute(arr, H, H)
        elif "k_proj" in hf:
            arr = llama_cpp_permute(arr, H, Hkv)
        add_tensor(w, gg, arr, types)
    if tweak:
        tweak(w)
    finish(w)
    return path


def add_tensor(w, name: str, arr: np.ndarray, types: dict | None) -> None:
    """One tensor, as float32 or quantized to types[kind] (kind: 'attn_q', 'ffn_up', ... from its
    GGUF name); 1-D tensors (norms, biases) stay float32, as llama.cpp keeps them."""
    qtype = (types or {}).get(name.split(".")[-2], Q.F32) if arr.ndim == 2 else Q.F32
    if qtype == Q.F32:
        w.add_tensor(name, arr)
    else:
        w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)


def write_sentencepiece_vocab(w, sp) -> None:
    """A SentencePiece model's vocabulary as llama.cpp's convert_hf_to_gguf.py writes Llama 2's:
    pieces, scores and types (1 normal, 2 unknown, 3 control, 5 unused, 6 byte), no merges."""
    n = sp.get_piece_size()
    kinds = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 5 if sp.is_unused(i) else 1 for i in range(n)]
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.id_to_piece(i) for i in range(n)])
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    w.add_token_types(kinds)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())


def train_sentencepiece(lines: list[str], vocab_size: int):
    """A SentencePiece BPE model with byte fallback and Llama 2's text handling (no normalization,
    whitespace kept, a space in front), trained here in a fraction of a second."""
    import io

    sentencepiece = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, remove_extra_whitespaces=False, normalization_rule_name="identity", split_digits=True, minloglevel=2,
    )  # fmt: skip
    return sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())


@pytest.fixture(scope="module")
def f32_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-f32.gguf")


@pytest.fixture(scope="module")
def mixed_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-mixed.gguf", types=MIXED, alignment=64)


@pytest.fixture(scope="module")
def f32_folder(f32_gguf, tmp_path_factory):
    return tg.convert(f32_gguf, tmp_path_factory.mktemp("out") / "tiny").path


@pytest.fixture(scope="module")
def mixed_folder(mixed_gguf, tmp_path_factory):
    return tg.convert(mixed_gguf, tmp_path_factory.mktemp("out") / "tiny").path


# --- dequantization -----------------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.F16, Q.BF16, Q.F32], ids=lambda q: q.name)
def test_dequantize_equals_gguf_package(qtype):
    """Bit for bit what gguf-py (the reference for llama.cpp's block layouts) computes: from real
    quantized weights, and from random bytes (every bit pattern of the quants; finite block scales;
    NaN and inf included for the float types, compared as equal where both have them)."""
    rng = np.random.default_rng(qtype.value)
    x = (rng.standard_normal((8, 256)) * rng.uniform(0.01, 10, (8, 1))).astype(np.float32)
    quantized = np.ascontiguousarray(gguf.quants.quantize(x, qtype)).view(np.uint8)  # [8, bytes per row]
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    noise = rng.integers(0, 256, quantized.shape, dtype=np.uint8)
    if block_size > 1:  # keep the float16 scale (and minimum) of each random block finite
        blocks = noise.reshape(-1, type_size)
        n_halves = 2 if qtype in (Q.Q4_1, Q.Q5_1) else 1
        blocks[:, : 2 * n_halves] = rng.uniform(-2, 2, (len(blocks), n_halves)).astype(np.float16).view(np.uint8)
    for raw in (quantized, noise):
        expected = gguf.quants.dequantize(raw, qtype).reshape(x.shape)
        ours = tg.dequantize(raw.reshape(-1), qtype.value, x.shape)
        assert ours.dtype == np.float32
        np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("qtype", [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda q: q.name)
def test_k_quants_equal_gguf_package(qtype):
    """The k-quants (what Q4_K_M and the like are made of), bit for bit what gguf-py computes, on
    random blocks: every bit pattern of the quants and of the packed 6-bit scales, with the float16
    block scales (d, and dmin where there is one) kept finite."""
    rng = np.random.default_rng(qtype.value)
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (64, type_size), dtype=np.uint8)  # 64 blocks of 256 weights
    floats = {Q.Q2_K: (80, 84), Q.Q3_K: (108, 110), Q.Q4_K: (0, 4), Q.Q5_K: (0, 4), Q.Q6_K: (208, 210)}[qtype]
    a, b = floats
    blocks[:, a:b] = rng.uniform(-2, 2, (64, (b - a) // 2)).astype(np.float16).view(np.uint8)
    expected = gguf.quants.dequantize(blocks, qtype).reshape(16, 1024)
    ours = tg.dequantize(blocks.reshape(-1), qtype.value, (16, 1024))
    assert ours.dtype == np.float32 and block_size == 256
    np.testing.assert_array_equal(ours, expected)


def test_k_quant_tensors_read_from_a_file(tmp_path):
    """A GGUF file with k-quant tensors, written by gguf-py: our reader finds and dequantizes them as gguf-py's does."""
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(tmp_path / "k.gguf", "llama")
    for i, qtype in enumerate((Q.Q4_K, Q.Q6_K)):
        _, type_size = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, (3, 2 * type_size), dtype=np.uint8)  # 3 rows of 512 weights
        d = slice(0, 4) if qtype == Q.Q4_K else slice(type_size - 2, type_size)
        for block in (raw[:, :type_size], raw[:, type_size:]):
            block[:, d] = rng.uniform(-1, 1, (3, (d.stop - d.start) // 2)).astype(np.float16).view(np.uint8)
        w.add_tensor(f"t{i}", raw, raw_dtype=qtype)
    finish(w)
    ours = tg.GGUFFile(tmp_path / "k.gguf")
    for t in gguf.GGUFReader(tmp_path / "k.gguf").tensors:
        assert ours.tensors[t.name].shape == (3, 512)
        np.testing.assert_array_equal(ours.tensor(t.name), gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(3, 512))


def test_unsupported_type_names_itself_and_the_supported_ones():
    with pytest.raises(GGUFError, match=r"IQ2_XXS is not supported.*Q4_1.*Q8_0.*Q6_K"):
        tg.dequantize(np.zeros(66, np.uint8), Q.IQ2_XXS.value, (256,))


def test_unpermute_inverts_llama_cpp_permute():
    rng = np.random.default_rng(0)
    for n_head, n_kv, head_dim in [(6, 2, 16), (9, 3, 64), (4, 4, 8), (1, 1, 2)]:
        q = rng.standard_normal((n_head * head_dim, 5)).astype(np.float32)
        k = rng.standard_normal((n_kv * head_dim, 5)).astype(np.float32)
        np.testing.assert_array_equal(tg.unpermute_rope_rows(llama_cpp_permute(q, n_head, n_head), n_head), q)
        np.testing.assert_array_equal(tg.unpermute_rope_rows(llama_cpp_permute(k, n_head, n_kv), n_kv), k)


# --- reading ------------------------------------------------------------------------------------------


def test_reader_matches_gguf_reader(mixed_gguf):
    ours = tg.GGUFFile(mixed_gguf)
    theirs = gguf.GGUFReader(mixed_gguf)
    assert set(ours.tensors) == {t.name for t in theirs.tensors}
    for t in theirs.tensors:
        mine = ours.tensors[t.name]
        assert mine.type_id == t.tensor_type.value
        assert mine.shape == tuple(int(d) for d in reversed(t.shape))
        assert mine.start == t.data_offset  # gguf-py's offsets are absolute
        np.testing.assert_array_equal(ours.raw(t.name), np.asarray(t.data).reshape(-1).view(np.uint8))
    assert ours.get("general.alignment") == 64
    assert ours.get("llama.attention.head_count_kv") == 2
    assert ours.get("tokenizer.ggml.tokens")[:1] == ["<|endoftext|>"]
    assert ours.get("tokenizer.chat_template") == CHATML


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(GGUFError, match=r"not a GGUF file .*b'PK\\x03\\x04'"):
        tg.GGUFFile(bad)
    bad.write_bytes(b"GG")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        tg.GGUFFile(bad)
    with pytest.raises(GGUFError, match="does not exist"):
        tg.GGUFFile(tmp_path / "missing.gguf")


@pytest.mark.parametrize("fraction", [0.002, 0.02, 0.5, 0.999])
def test_truncated_file_is_one_line_error(f32_gguf, tmp_path, fraction):
    data = f32_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(GGUFError, match="truncated") as e:
        tg.GGUFFile(cut)
    assert "\n" not in str(e.value)


# --- conversion ---------------------------------------------------------------------------------------


def test_f32_conversion_restores_the_hugging_face_weights_exactly(f32_folder):
    """With no quantization in the way, every converted tensor equals the original checkpoint's:
    in particular q_proj and k_proj, whose rows llama.cpp had permuted."""
    original = load_file(TINY_LLAMA / "model.safetensors")
    converted = load_file(f32_folder / "model.safetensors")
    assert set(converted) == set(original)
    for name, w in original.items():
        np.testing.assert_array_equal(converted[name], w, err_msg=name)


def test_f32_conversion_logits_equal_transformers_reference(f32_folder):
    lm = load(f32_folder)
    ref = reference("tiny-llama")
    for key in ("short", "long"):
        ids = ref[f"ids_{key}"]
        logits = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)
        assert np.abs(logits - ref[f"logits_{key}"]).max() <= 1e-4


def test_without_the_unpermutation_the_model_is_silently_wrong(f32_gguf, tmp_path, monkeypatch):
    """The failure this guards against loads fine and produces garbage: show that it would be caught."""
    monkeypatch.setattr(gguf_family, "unpermute_rope_rows", lambda w, n_heads: w)
    folder = tg.convert(f32_gguf, tmp_path / "wrong").path
    original = load_file(TINY_LLAMA / "model.safetensors")
    assert not np.array_equal(load_file(folder / "model.safetensors")["model.layers.0.self_attn.q_proj.weight"], original["model.layers.0.self_attn.q_proj.weight"])
    ref = reference("tiny-llama")
    lm = load(folder)
    logits = lm.model.forward(ref["ids_short"], lm.model.new_cache(len(ref["ids_short"])), all_logits=True, run=FAST)
    assert np.abs(logits - ref["logits_short"]).max() > 1e-2


def test_quantized_conversion_equals_an_independent_dequantization(mixed_gguf, mixed_folder):
    """Each converted tensor equals gguf-py's dequantization of the stored blocks, with llama.cpp's
    row permutation undone by inverting it as an index permutation (not with tfcli's function)."""
    cfg = json.loads((TINY_LLAMA / "config.json").read_text())
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    reader = gguf.GGUFReader(mixed_gguf)
    stored = {t.name: t for t in reader.tensors}
    converted = load_file(mixed_folder / "model.safetensors")
    for hf, gg in gguf_names(cfg["num_hidden_layers"], tied=False).items():
        t = stored[gg]
        w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(converted[hf].shape)
        if "q_proj" in hf or "k_proj" in hf:
            rows = np.arange(w.shape[0])[:, None]
            order = llama_cpp_permute(rows, H, H if "q_proj" in hf else Hkv)[:, 0]  # stored row i is HF row order[i]
            w = w[np.argsort(order)]
        np.testing.assert_array_equal(converted[hf], w, err_msg=hf)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_converted_folder_loads_in_transformers_with_equal_logits(tied, mixed_folder, tmp_path):
    import torch
    from transformers import LlamaForCausalLM

    folder = mixed_folder if not tied else tg.convert(write_gguf(tmp_path / "tied.gguf", types=MIXED, tied=True), tmp_path / "tied").path
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is tied
    hf = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    lm = load(folder)
    assert not lm.warnings
    ids = reference("tiny-llama")["ids_long"]
    with torch.no_grad():
        expected = hf(torch.from_numpy(np.asarray(ids)[None])).logits[0].numpy()
    logits = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)
    assert np.abs(logits - expected).max() <= 1e-4


def test_config_and_generation_files(mixed_folder):
    cfg = json.loads((mixed_folder / "config.json").read_text())
    expected = json.loads((TINY_LLAMA / "config.json").read_text())
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings"):  # fmt: skip
        assert cfg[key] == expected[key], key
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"] == expected["rope_parameters"]["rope_theta"]
    assert cfg["bos_token_id"] == 0 and cfg["eos_token_id"] == [0]
    assert json.loads((mixed_folder / "generation_config.json").read_text())["eos_token_id"] == [0]
    tok_cfg = json.loads((mixed_folder / "tokenizer_config.json").read_text())
    assert tok_cfg["chat_template"] == CHATML == (mixed_folder / "chat_template.jinja").read_text()
    assert tok_cfg["bos_token"] == tok_cfg["eos_token"] == "<|endoftext|>" and tok_cfg["add_bos_token"] is False


def test_tokenizer_tokenizes_like_the_original(mixed_folder):
    from tokenizers import Tokenizer

    original = Tokenizer.from_file(str(TINY_LLAMA / "tokenizer.json"))
    converted = Tokenizer.from_file(str(mixed_folder / "tokenizer.json"))
    for text in TEXTS:
        ids = converted.encode(text, add_special_tokens=False).ids
        assert ids == original.encode(text, add_special_tokens=False).ids, text
        assert converted.decode(ids, skip_special_tokens=False) == text
    assert converted.encode("<|endoftext|>").ids == [0]


def test_tokenizer_equals_transformers_gguf_tokenizer(mixed_gguf, mixed_folder):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(mixed_gguf.parent, gguf_file=mixed_gguf.name)
    ours = Tokenizer.from_file(str(mixed_folder / "tokenizer.json"))
    for text in TEXTS:
        assert ours.encode(text, add_special_tokens=False).ids == theirs(text, add_special_tokens=False).input_ids, text


@pytest.mark.parametrize("add_bos", [True, False])
def test_prompt_gets_the_bos_the_file_asks_for(cli, tmp_path, add_bos):
    """tokenizer.ggml.add_bos_token (Llama 3 sets it, SmolLM2 does not): a prompt gets the BOS exactly
    when transformers, reading the same GGUF, puts one; `tfcli generate` feeds it to the model."""
    from transformers import AutoTokenizer

    from tfcli.engine.tokenizer import Tokenizer

    path = write_gguf(tmp_path / "bos.gguf", add_bos=add_bos)
    folder = tg.convert(path, tmp_path / "out").path
    theirs = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    ours = Tokenizer(folder / "tokenizer.json")
    for text in TEXTS:
        assert ours.prompt(text) == theirs(text).input_ids, text
        assert ours.prompt(text) == [0] * add_bos + ours.encode(text)
    r = cli("generate", "-m", folder, "Hello", "-n", "1")
    assert r.exit_code == 0 and f"{len(ours.encode('Hello')) + add_bos} prompt tokens" in r.stderr, r.stderr


SPM_TEXTS = TEXTS + ["Hello world", " leading space", "trailing space ", "three   spaces", "line\nbreak", "digits 12345", "Tschüß, 🙂!"]


def test_sentencepiece_vocabulary_tokenizes_like_sentencepiece(tmp_path):
    """A Llama 2-style GGUF (tokenizer.ggml.model "llama": pieces and scores, no merges) becomes a
    tokenizer.json that encodes as SentencePiece itself does (and llama.cpp), a BOS first by default,
    and decodes back to the text. transformers reading the same file agrees except on text that
    starts with a space: it adds no "▁" in front of one, where SentencePiece and llama.cpp do."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    readme = [line for line in (TINY_LLAMA.parents[2] / "README.md").read_text().splitlines() if line.strip()]
    sp = train_sentencepiece(readme + TEXTS * 3, 700)
    path = tmp_path / "spm.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    write_sentencepiece_vocab(w, sp)
    finish(w)
    ours = Tokenizer.from_str(json.dumps(tg.tokenizer_json(tg.GGUFFile(path))))
    theirs = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in SPM_TEXTS:
        ids = sp.encode(text)
        assert ours.encode(text, add_special_tokens=False).ids == ids, text
        assert ours.encode(text).ids == [sp.bos_id()] + ids, text
        assert ours.decode(ids) == sp.decode(ids) == text
        if not text[0].isspace():
            assert theirs(text).input_ids == [sp.bos_id()] + ids, text
    ids = sp.encode(" leading space")  # the one difference, pinned so that a change on either side shows
    assert sp.id_to_piece(ids[0]) == "\u2581" and theirs(" leading space").input_ids == [sp.bos_id()] + ids[1:]
    assert any(sp.is_byte(i) for text in SPM_TEXTS for i in sp.encode(text))  # the byte fallback was exercised
    # Text after a special token gets its "▁" too, as llama.cpp gives it.
    assert ours.encode("<s>hello</s> there", add_special_tokens=False).ids == [sp.bos_id()] + sp.encode("hello") + [sp.eos_id()] + sp.encode(" there")


def test_sentencepiece_gguf_converts_and_generates(cli, tmp_path):
    """The tiny Llama with a 300-piece SentencePiece vocabulary: converted, its prompts get the BOS
    and SentencePiece's pieces, and it generates."""
    import re

    from tfcli.engine.tokenizer import Tokenizer

    words = [re.sub(r"[^a-z ]", "", line.lower()) for line in (TINY_LLAMA.parents[2] / "README.md").read_text().splitlines()]
    sp = train_sentencepiece([line for line in words if line.strip()], 300)
    assert sp.get_piece_size() == 300  # the tiny model's vocabulary
    folder = tg.convert(write_gguf(tmp_path / "spm.gguf", sentencepiece=sp), tmp_path / "out").path
    tok = Tokenizer(folder / "tokenizer.json")
    assert tok.prompt("the model generates text") == [sp.bos_id()] + sp.encode("the model generates text")
    assert json.loads((folder / "tokenizer_config.json").read_text())["add_bos_token"] is True
    r = cli("generate", "-m", folder, "the model", "-n", "4", "-t", "0")
    assert r.exit_code == 0 and f"{1 + len(sp.encode('the model'))} prompt tokens" in r.stderr, r.stderr
    # A piece like "▁the" decoded alone loses its space; every --json names the text the token adds.
    texts = [t["text"] for t in json.loads(cli("tokenize", "-m", folder, "the model", "--json").stdout)["tokens"]]
    assert " the" in texts
    for command in (["lens", "--position", "-1"], ["neurons", "--layer", "0"]):
        doc = json.loads(cli(*command, "-m", folder, "the model", "--json").stdout)
        assert [t["text"] for t in doc["tokens"]] == texts, command


def test_other_tokenizer_models_are_refused_by_name(tmp_path):
    path = tmp_path / "t5.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("t5")
    w.add_token_list(["<pad>", "a"])
    finish(w)
    with pytest.raises(GGUFError, match=r"tokenizer model 't5' is not supported \(tfcli converts byte-level BPE \('gpt2'\) and SentencePiece BPE \('llama'\)"):
        tg.tokenizer_json(tg.GGUFFile(path))


def test_smollm_pre_tokenizer_isolates_digits(tmp_path):
    """llama.cpp's 'smollm' pre-tokenizer splits every digit off first (llama-vocab.cpp: "\\p{N}",
    then GPT-2's regex); without it 'a  1' would become 'a', ' ', ' 1' instead of 'a', '  ', '1'."""
    from tokenizers import Tokenizer

    folder = tg.convert(write_gguf(tmp_path / "smol.gguf", pre="smollm"), tmp_path / "smol").path
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert [p for p, _ in tok.pre_tokenizer.pre_tokenize_str("a  12")] == ["a", "ĠĠ", "1", "2"]


def test_manifest_detects_corruption(mixed_gguf, tmp_path):
    folder = tg.convert(mixed_gguf, tmp_path / "m").path
    manifest = json.loads((folder / tg.MANIFEST_NAME).read_text())
    assert set(manifest["files"]) == {p.name for p in folder.iterdir()} - {tg.MANIFEST_NAME}
    assert manifest["source"]["tensor_types"]["Q4_1"] == 3 and manifest["n_params"] == TINY_PARAMS
    assert verify_manifest(folder) == []
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (folder / "model.safetensors").write_bytes(bytes(data))
    assert verify_manifest(folder) == ["model.safetensors does not match its sha256 checksum"]
    assert verify_manifest(folder, full=False) == []
    (folder / "tokenizer.json").write_text("{}")
    assert any("tokenizer.json has 2 bytes" in p for p in verify_manifest(folder))


# --- refusals -----------------------------------------------------------------------------------------


def test_refuses_other_architectures(tmp_path):
    path = write_gguf(tmp_path / "q.gguf", arch="gemma")
    with pytest.raises(GGUFError, match=r"architecture 'gemma' is not supported \(tfcli converts: llama, qwen2, qwen3, gemma3, phi3\)"):
        tg.convert(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_refuses_unsupported_quantization_naming_the_type(tmp_path):
    def add_iq2(w):
        w.add_tensor("blk.0.extra.weight", np.zeros((1, 66), np.uint8), raw_dtype=Q.IQ2_XXS)

    path = write_gguf(tmp_path / "k.gguf", tweak=add_iq2)
    with pytest.raises(GGUFError, match=r"'blk.0.extra.weight' is IQ2_XXS, which tfcli cannot dequantize \(supported types: F32, F16, BF16, Q4_0"):
        tg.convert(path, tmp_path / "out")


def test_refuses_unknown_pre_tokenizer(tmp_path):
    with pytest.raises(GGUFError, match="pre-tokenizer 'chatglm-bpe' is not supported"):
        tg.convert(write_gguf(tmp_path / "p.gguf", pre="chatglm-bpe"), tmp_path / "out")


# --- the command --------------------------------------------------------------------------------------


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_cli_convert_writes_the_folder(cli, mixed_gguf, tmp_path):
    out = tmp_path / "converted"
    r = cli("convert", mixed_gguf, out)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == str(out)
    assert f"{TINY_PARAMS:,} parameters" in r.stderr and "dequantizing" not in r.stderr  # no progress bars in a pipe
    assert sorted(p.name for p in out.iterdir()) == [
        "chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
        "tfcli-manifest.json", "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    r = cli("generate", "-m", out, "Hello", "-n", "3", "-t", "0", "-q")
    assert r.exit_code == 0, r.stderr


def test_cli_convert_will_not_overwrite_without_force(cli, mixed_gguf, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = cli("convert", mixed_gguf, out)
    assert r.exit_code == 1
    assert "already exists" in r.stderr and "--force" in r.stderr
    assert (out / "keep.txt").exists()
    # --force replaces a model tfcli wrote, never a folder with files of someone else's (issue: class 10).
    r = cli("convert", mixed_gguf, out, "--force")
    assert r.exit_code == 1 and "holds files tfcli did not write ('keep.txt')" in r.stderr
    assert (out / "keep.txt").read_text() == "mine" and not (out / "model.safetensors").exists()
    (out / "keep.txt").unlink()
    assert cli("convert", mixed_gguf, out).exit_code == 0
    before = (out / "tfcli-manifest.json").stat().st_mtime_ns
    r = cli("convert", mixed_gguf, out, "--force")
    assert r.exit_code == 0, r.stderr
    assert (out / "model.safetensors").exists() and (out / "tfcli-manifest.json").stat().st_mtime_ns != before
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError], ids=["ctrl-c", "disk error"])
def test_cli_convert_leaves_nothing_behind_on_failure(cli, mixed_gguf, tmp_path, monkeypatch, failure):
    real = tg.GGUFFile.tensor
    calls = []

    def failing(self, name):
        calls.append(name)
        if len(calls) == 5:
            raise failure("boom")
        return real(self, name)

    monkeypatch.setattr(tg.GGUFFile, "tensor", failing)
    r = cli("convert", mixed_gguf, tmp_path / "out")
    assert r.exit_code == 130 if failure is KeyboardInterrupt else r.exit_code != 0
    assert not (tmp_path / "out").exists()
    assert _leftovers(tmp_path) == []


def test_cli_convert_bad_files_are_one_line_errors(cli, tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not gguf at all")
    r = cli("convert", bad, tmp_path / "out")
    assert r.exit_code == 1
    assert r.stderr.startswith("error: x.gguf is not a GGUF file") and r.stderr.count("\n") == 1
    r = cli("convert", tmp_path / "missing.gguf", tmp_path / "out")
    assert r.exit_code == 1 and "does not exist" in r.stderr


def test_a_gguf_given_as_model_runs_in_place_with_an_index_in_the_cache(cli, mixed_gguf):
    """-m FILE.gguf runs the file in place (store/gguf/cached.py): its config, tokenizer and
    tensor index go into the cache on first use, saying where; no weights are copied there."""
    r = cli("generate", "-m", mixed_gguf, "hi", "-n", "3", "-t", "0")
    said = " ".join(r.stderr.split())  # prose, wrapped to the width: a path on a line of its own when it does not fit
    assert r.exit_code == 0 and "runs in place" in said and "kept in the cache as" in said, r.stderr
    entry = Path(said.split("kept in the cache as ")[1].split(" (")[1].split(")")[0])
    held = sum(f.stat().st_size for f in entry.iterdir())
    assert not (entry / "model.safetensors").exists() and held < 200_000, sorted(f.name for f in entry.iterdir())


def test_convert_never_needs_torch_or_transformers(mixed_gguf, tmp_path):
    from conftest import run_without_references

    run_without_references(f"from tfcli.store.gguf import convert; convert({str(mixed_gguf)!r}, {str(tmp_path / 'o')!r})")


# --- the test GGUFs themselves, read by transformers -------------------------------------------------
# A GGUF these tests write proves nothing about real files if writer and reader share a wrong
# convention (a permutation applied twice, a name swapped both ways). transformers reads GGUFs by
# llama.cpp's layout, independently of tfcli: each file must give it the model it was written from.


def transformers_gguf_logits(path: Path, ids) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    pytest.importorskip("accelerate")  # transformers needs it for gguf_file=
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(ids)[None])).logits[0].numpy()  # [T, V]


def test_f32_gguf_loads_in_transformers_as_the_checkpoint_it_came_from(f32_gguf):
    ref = reference("tiny-llama")
    assert np.abs(transformers_gguf_logits(f32_gguf, ref["ids_long"]) - ref["logits_long"]).max() <= 1e-4


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_quantized_gguf_loads_in_transformers_as_tfcli_converts_it(tied, mixed_gguf, mixed_folder, tmp_path):
    """Quantization changes the model, so the reference is the same file converted by tfcli: both
    read the same blocks, and must agree on what they mean."""
    path, folder = mixed_gguf, mixed_folder
    if tied:
        path = write_gguf(tmp_path / "tied.gguf", types=MIXED, tied=True)
        folder = tg.convert(path, tmp_path / "tied").path
    ids = reference("tiny-llama")["ids_long"]
    lm = load(folder)
    ours = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)
    assert np.abs(transformers_gguf_logits(path, ids) - ours).max() <= 1e-4
