"""GGUFs of the newer families: random checkpoints (tests/test_new_families.py builds them) written
as llama.cpp's convert_hf_to_gguf.py lays them out (tensor names from gguf-py's own tables, the
generic LLM keys under the architecture's name), converted by tfcli and compared with the
checkpoint in transformers; transformers also reads each GGUF itself (gguf_file=)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
from safetensors.numpy import load_file  # noqa: E402

from tfcli.engine.errors import GGUFError  # noqa: E402
from tfcli.store import gguf as tg  # noqa: E402
from tfcli.store import load  # noqa: E402

from conftest import TINY_LLAMA  # noqa: E402
from test_gguf import CHATML, TEXTS, add_tensor, finish, transformers_gguf_logits  # noqa: E402
from conftest import torch_logits  # noqa: E402
from test_new_families import gemma3, llama3, phi3, prompt_ids, qwen3  # noqa: E402
from tfcli.engine.fast import FAST  # noqa: E402


def write_qwen3_gguf(folder: Path, path: Path) -> Path:
    """As convert_hf_to_gguf.py's Qwen3Model (its Qwen2Model) writes it: `qwen3`, the head size as
    attention.key_length, byte-level BPE with the 'qwen2' pre-tokenizer, Q and K rows unpermuted."""
    cfg = json.loads((folder / "config.json").read_text())
    weights = load_file(folder / "model.safetensors")
    tok = json.loads((folder / "tokenizer.json").read_text())
    L = cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    vocab = tok["model"]["vocab"]
    special = {t["content"] for t in tok["added_tokens"]}
    tokens = sorted(vocab, key=vocab.get)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in special else 1 for t in tokens])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, L)
    for hf, arr in weights.items():
        gg = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert gg is not None, hf
        add_tensor(w, gg, arr, None)
    finish(w)
    return path


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def qwen3_gguf(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3-gguf")
    model = qwen3(root / "hf", tied=request.param, seed=2)
    (root / "gguf").mkdir()
    return root / "hf", model, write_qwen3_gguf(root / "hf", root / "gguf" / "f32.gguf")


def test_qwen3_gguf_converts_to_the_checkpoint(qwen3_gguf, tmp_path):
    folder, model, path = qwen3_gguf
    out = tg.convert(path, tmp_path / "out").path
    original, converted = load_file(folder / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(converted) == set(original)
    for name, w in original.items():
        np.testing.assert_array_equal(converted[name], w, err_msg=name)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3" and cfg["head_dim"] == 16 and cfg["hidden_size"] == 48
    lm = load(out)
    assert not lm.warnings and lm.config.family == "qwen3"
    ids = prompt_ids()
    assert np.abs(lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST) - torch_logits(model, ids)).max() <= 1e-4


def test_qwen3_gguf_loads_in_transformers_as_the_checkpoint(tmp_path):
    """transformers' GGUF reader gives a Qwen3 its default head size, 128 (it ignores
    attention.key_length), so this checkpoint has heads of 128: 2 of them in a width of 256."""
    model = qwen3(tmp_path / "hf", tied=False, seed=3, hidden_size=256, n_head=2, n_kv_head=1, head_dim=128)
    (tmp_path / "gguf").mkdir()
    path = write_qwen3_gguf(tmp_path / "hf", tmp_path / "gguf" / "f32.gguf")
    ids = prompt_ids()
    lm = load(tg.convert(path, tmp_path / "out").path)
    assert np.abs(lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST) - torch_logits(model, ids)).max() <= 1e-4
    assert np.abs(transformers_gguf_logits(path, ids) - torch_logits(model, ids)).max() <= 1e-4


def test_a_gguf_file_runs_directly_indexed_once_into_the_cache(cli, tmp_path):
    """-m FILE.gguf: the first run indexes it into the cache (a line says so and where) and runs the
    file in place, the next runs load that index; `tfcli models` lists it and `tfcli rm` removes it."""
    model = qwen3(tmp_path / "hf", tied=True, seed=4)
    path = write_qwen3_gguf(tmp_path / "hf", tmp_path / "Tiny Qwen3.gguf")
    first = cli("generate", "-m", path, "Hello", "-n", "4", "-t", "0")
    assert first.exit_code == 0, first.stderr
    assert "Tiny Qwen3.gguf runs in place; its config, tokenizer and tensor index are kept in the cache as Tiny-Qwen3-" in " ".join(first.stderr.split())
    name = next(word for word in first.stderr.split() if word.startswith("Tiny-Qwen3-"))
    import tfcli.store.gguf.cached as cached

    hashed = []
    real = cached.sha256_file
    cached.sha256_file = lambda p: hashed.append(p) or real(p)
    try:
        second = cli("generate", "-m", path, "Hello", "-n", "4", "-t", "0")
        assert second.exit_code == 0 and "runs in place" not in second.stderr and second.stdout == first.stdout
        assert hashed == []  # unchanged since the first run: its hash is remembered, the file not read again
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))  # touched: hashed again, same content
        third = cli("generate", "-m", path, "Hello", "-n", "4", "-t", "0")
        assert third.exit_code == 0 and "runs in place" not in third.stderr and len(hashed) == 1
    finally:
        cached.sha256_file = real
    ids = prompt_ids()
    lm = load(name)  # by its cache name, as `tfcli models` shows it
    assert np.abs(lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST) - torch_logits(model, ids)).max() <= 1e-4
    assert name in [m["name"] for m in json.loads(cli("models", "--json").stdout)["models"]]
    assert cli("rm", name, "--yes").exit_code == 0
    assert name not in cli("models").stdout


# --- the keys and tensors every llama.cpp converter writes, and each family's own ------------------


def generic_keys(w, cfg: dict) -> None:
    """The generic LLM keys (convert_hf_to_gguf.py, TextModel.set_gguf_parameters)."""
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])


def byte_level_vocab(w, folder: Path, pre: str) -> None:
    """The tiny Llama's byte-level BPE (tests/data), the checkpoint's 300 tokens."""
    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    special = {t["content"] for t in tok["added_tokens"]}
    tokens = sorted(vocab, key=vocab.get)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3 if t in special else 1 for t in tokens])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)


def add_tensors(w, weights: dict, arch, n_layer: int, change=lambda hf, arr: arr) -> None:
    """Every checkpoint tensor under gguf-py's own name for it (TensorNameMap), as `change` makes it."""
    names = gguf.get_tensor_name_map(arch, n_layer)
    for hf, arr in weights.items():
        gg = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert gg is not None, hf
        add_tensor(w, gg, np.ascontiguousarray(change(hf, arr)), None)


def logits_of(folder: Path, ids) -> np.ndarray:
    lm = load(folder)
    assert not lm.warnings
    return lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)  # [T, V]


# --- Gemma 3 -------------------------------------------------------------------------------------------


def gemma_sentencepiece(lines: list[str], vocab_size: int):
    """A SentencePiece BPE model with Gemma's text handling: no space put in front, whitespace kept
    (runs of spaces are pieces), digits split, byte fallback, Gemma's special ids (pad 0, eos 1,
    bos 2, unk 3) and its turn markers as user-defined pieces."""
    import io

    sentencepiece = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, remove_extra_whitespaces=False, normalization_rule_name="identity", split_digits=True,
        add_dummy_prefix=False, allow_whitespace_only_pieces=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        user_defined_symbols=["<start_of_turn>", "<end_of_turn>"], minloglevel=2,
    )  # fmt: skip
    return sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())


def gemma_vocab(w, sp) -> None:
    """As convert_hf_to_gguf.py's Gemma3Model writes a tokenizer.model (_set_vocab_sentencepiece):
    pieces, scores, types (the turn markers, special in Gemma's tokenizer_config, are control
    tokens), the special ids, a BOS added, and no space put in front (add_space_prefix false)."""
    n = sp.get_piece_size()
    kinds = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) or sp.id_to_piece(i).endswith("_of_turn>") else 6 if sp.is_byte(i) else 1 for i in range(n)]
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([sp.id_to_piece(i) for i in range(n)])
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    w.add_token_types(kinds)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_pad_token_id(sp.pad_id())
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)


def write_gemma3_gguf(folder: Path, path: Path, *, sp=None, pattern=None, tweak=None) -> Path:
    """As convert_hf_to_gguf.py's Gemma3Model writes it: `gemma3`, the head size as key_length and
    value_length, the global layers' RoPE base, the window, the final soft-cap where set, every
    norm weight + 1 (Gemma3RMSNorm's 1 + w), no output.weight (tied). `pattern` writes the newer
    attention.sliding_window_pattern key (llama.cpp's default without it: every 6th layer global)."""
    cfg = json.loads((folder / "config.json").read_text())
    w = gguf.GGUFWriter(str(path), "gemma3")
    generic_keys(w, cfg)
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_parameters"]["full_attention"]["rope_theta"])
    if cfg.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    w.add_sliding_window(cfg["sliding_window"])
    if pattern is not None:
        w.add_sliding_window_pattern(pattern)
    if sp is not None:
        gemma_vocab(w, sp)
    else:
        byte_level_vocab(w, folder, "default")
    plus_one = lambda hf, arr: arr + np.float32(1) if hf.endswith("norm.weight") else arr  # noqa: E731
    add_tensors(w, load_file(folder / "model.safetensors"), gguf.MODEL_ARCH.GEMMA3, cfg["num_hidden_layers"], plus_one)
    if tweak:
        tweak(w)
    finish(w)
    return path


@pytest.fixture(scope="module")
def gemma3_vocab():
    import re

    readme = (TINY_LLAMA.parents[2] / "README.md").read_text().splitlines()
    words = [re.sub(r"[^a-z ]", "", line.lower()) for line in readme]
    sp = gemma_sentencepiece([line for line in words if line.strip()], 300)
    assert sp.get_piece_size() == 300  # the tiny model's vocabulary
    return sp


@pytest.fixture(scope="module", params=[None, 2, [True, False, True, False]], ids=["no-pattern", "pattern-2", "pattern-list"])
def gemma3_gguf(request, tmp_path_factory, gemma3_vocab):
    """Four layers, the window 7 shorter than the prompts. Without a pattern key llama.cpp makes every
    6th layer global, here none: the checkpoint's layers all slide; with pattern 2 (or the list of
    flags) layers 1 and 3 are global. The queries scaled by key_length^-1/2, as llama.cpp does."""
    root = tmp_path_factory.mktemp("gemma3-gguf")
    types = ["sliding_attention"] * 4 if request.param is None else ["sliding_attention", "full_attention"] * 2
    model = gemma3(root / "hf", seed=5, layer_types=types, query_pre_attn_scalar=16)
    (root / "gguf").mkdir()
    return root / "hf", model, write_gemma3_gguf(root / "hf", root / "gguf" / "f32.gguf", sp=gemma3_vocab, pattern=request.param)


def test_gemma3_gguf_converts_to_the_checkpoint(gemma3_gguf, tmp_path):
    """Every weight comes back, the norms with llama.cpp's + 1 taken off again (to the last bit of
    the 1 + w Gemma scales by); the logits are the checkpoint's in transformers."""
    folder, model, path = gemma3_gguf
    out = tg.convert(path, tmp_path / "out").path
    original, converted = load_file(folder / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(converted) == set(original)
    for name, w in original.items():
        if name.endswith("norm.weight"):
            np.testing.assert_array_equal(np.float32(1) + converted[name], np.float32(1) + w, err_msg=name)
        else:
            np.testing.assert_array_equal(converted[name], w, err_msg=name)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "gemma3_text" and cfg["layer_types"] == model.config.layer_types and cfg["sliding_window"] == 7
    assert cfg["query_pre_attn_scalar"] == 16 and cfg["final_logit_softcapping"] == 10.0 and cfg["tie_word_embeddings"] is True
    assert cfg["rope_parameters"]["sliding_attention"]["rope_theta"] == 10000.0 and cfg["rope_parameters"]["full_attention"]["rope_theta"] == 1e6
    ids = prompt_ids()
    assert np.abs(logits_of(out, ids) - torch_logits(model, ids)).max() <= 1e-4


def test_gemma3_gguf_with_the_norms_left_shifted_would_be_caught(gemma3_gguf, tmp_path, monkeypatch):
    """Had the table not undone llama.cpp's + 1, every norm would scale by 2 + w: the logits show it."""
    import dataclasses

    from tfcli.engine.families import gemma3 as gemma3_family

    folder, model, path = gemma3_gguf
    monkeypatch.setattr(gemma3_family, "GGUF", dataclasses.replace(gemma3_family.GGUF, norm_shift=0.0))
    ids = prompt_ids()
    assert np.abs(logits_of(tg.convert(path, tmp_path / "out").path, ids) - torch_logits(model, ids)).max() > 1e-2


def test_gemma3_gguf_loads_in_transformers_as_the_checkpoint(tmp_path, gemma3_vocab):
    """transformers reads a gemma3 GGUF with Gemma3TextConfig's defaults where the file is silent:
    every 6th layer global and queries scaled by 256^-1/2, which llama.cpp's reading (key_length^-1/2)
    matches with heads of 256; six layers, so that one is global."""
    model = gemma3(tmp_path / "hf", seed=6, num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                   query_pre_attn_scalar=256, final_logit_softcapping=None, layer_types=None)  # fmt: skip
    assert model.config.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    (tmp_path / "gguf").mkdir()
    path = write_gemma3_gguf(tmp_path / "hf", tmp_path / "gguf" / "f32.gguf", sp=gemma3_vocab)
    ids = prompt_ids()
    reference = torch_logits(model, ids)
    assert np.abs(logits_of(tg.convert(path, tmp_path / "out").path, ids) - reference).max() <= 1e-4
    assert np.abs(transformers_gguf_logits(path, ids) - reference).max() <= 1e-4


GEMMA_TEXTS = TEXTS + ["Hello world", " leading space", "  two leading", "trailing space ", "three   spaces", "line\nbreak",
                       "digits 12345", "Tschüß, 🙂!", "<start_of_turn>user\nhi<end_of_turn>"]  # fmt: skip


def test_gemma3_sentencepiece_vocabulary_tokenizes_like_sentencepiece(tmp_path):
    """A Gemma-style vocabulary (no space in front, whitespace runs as pieces, byte fallback, turn
    markers) converts to a tokenizer.json that encodes as SentencePiece itself does, a BOS first,
    decodes back to the text, and agrees with transformers reading the same file."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    readme = [line for line in (TINY_LLAMA.parents[2] / "README.md").read_text().splitlines() if line.strip()]
    sp = gemma_sentencepiece(readme + GEMMA_TEXTS * 3, 700)
    path = tmp_path / "gemma.gguf"
    w = gguf.GGUFWriter(str(path), "gemma3")
    gemma_vocab(w, sp)
    finish(w)
    ours = Tokenizer.from_str(json.dumps(tg.tokenizer_json(tg.GGUFFile(path))))
    theirs = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in GEMMA_TEXTS + ["Ωμέγα ∑ 日本語 ✓"]:  # the last one's characters not in the training text
        ids = sp.encode(text)
        assert ours.encode(text, add_special_tokens=False).ids == ids, text
        assert ours.encode(text).ids == [sp.bos_id()] + ids, text
        assert ours.decode(ids, skip_special_tokens=False) == sp.decode(ids) == text
        assert theirs(text).input_ids == [sp.bos_id()] + ids, text
    assert sp.id_to_piece(sp.encode(" leading space")[0]).startswith("\u2581")  # no extra "▁" in front, as Gemma's
    assert any(sp.is_byte(i) for i in sp.encode("Ωμέγα ∑ 日本語 ✓"))  # the byte fallback was exercised


# --- Llama 3: RoPE scaling as a rope_freqs tensor, the llama-bpe pre-tokenizer -----------------------


def llama_cpp_rope_freqs(cfg: dict) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors, as written there (in float32, as
    torch computes it): what each frequency is divided by. llama.cpp reads the original context
    from the top level of config.json with 8192 as default, Llama 3.1's value; the tiny models
    here keep theirs in rope_parameters, so it is read from there."""
    import math

    rope = cfg["rope_parameters"]
    base, dim = rope["rope_theta"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high, old = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"], rope["original_max_position_embeddings"]
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            factors.append(1)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32).numpy()


def write_llama3_gguf(folder: Path, path: Path, *, rope_freqs=None) -> Path:
    """As convert_hf_to_gguf.py's LlamaModel writes a Llama 3: `llama`, Q and K rows permuted for
    llama.cpp's RoPE, the scaling as a rope_freqs tensor and no key for it, byte-level BPE with the
    'llama-bpe' pre-tokenizer and a BOS added."""
    from test_gguf import llama_cpp_permute

    cfg = json.loads((folder / "config.json").read_text())
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(str(path), "llama")
    generic_keys(w, cfg)
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // H)
    w.add_key_length(cfg.get("head_dim") or cfg["hidden_size"] // H)
    byte_level_vocab(w, folder, "llama-bpe")
    w.add_add_bos_token(True)

    def permute(hf: str, arr: np.ndarray) -> np.ndarray:
        return llama_cpp_permute(arr, H, H) if "q_proj" in hf else llama_cpp_permute(arr, H, Hkv) if "k_proj" in hf else arr

    add_tensors(w, load_file(folder / "model.safetensors"), gguf.MODEL_ARCH.LLAMA, cfg["num_hidden_layers"], permute)
    w.add_tensor("rope_freqs.weight", llama_cpp_rope_freqs(cfg) if rope_freqs is None else rope_freqs)
    finish(w)
    return path


# Heads of 16 (8 frequencies: one between the kept and the stretched ones, Meta's low 1 and high 4);
# heads of 64 with high_freq_factor 3 (32 frequencies, four between, from which high is read back).
LLAMA3_CASES = {
    "dh16": ({}, (8.0, 4.0, 32)),
    "dh64-high3": (dict(num_attention_heads=2, num_key_value_heads=1, head_dim=64, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 3.0,
        "original_max_position_embeddings": 32}), (8.0, 3.0, 32)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(LLAMA3_CASES))
def test_llama3_gguf_converts_to_the_checkpoint_with_its_rope_scaling(case, tmp_path):
    changes, (factor, high, original) = LLAMA3_CASES[case]
    model = llama3(tmp_path / "hf", tied=case == "dh64-high3", seed=7, **changes)
    (tmp_path / "gguf").mkdir()
    path = write_llama3_gguf(tmp_path / "hf", tmp_path / "gguf" / "f32.gguf")
    out = tg.convert(path, tmp_path / "out").path
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["rope_parameters"] == {"rope_type": "llama3", "rope_theta": 10000.0, "factor": factor, "low_freq_factor": 1.0,
                                      "high_freq_factor": high, "original_max_position_embeddings": original}  # fmt: skip
    original_weights, converted = load_file(tmp_path / "hf" / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(converted) == set(original_weights)  # rope_freqs is a setting, not a weight
    ids = prompt_ids()
    reference = torch_logits(model, ids)
    assert np.abs(logits_of(out, ids) - reference).max() <= 1e-4
    # transformers reads a llama GGUF without its rope_freqs: plain RoPE, the layout (the permuted Q
    # and K rows) read independently of tfcli. The same weights with plain RoPE give its logits.
    plain = json.loads((tmp_path / "hf" / "config.json").read_text())
    plain["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(plain))
    unscaled = logits_of(tmp_path / "hf", ids)
    assert np.abs(transformers_gguf_logits(path, ids) - unscaled).max() <= 1e-4
    assert np.abs(unscaled - reference).max() > 1e-2  # the scaling mattered


# Llama 3.1 8B and 3.2 1B as released; 3.1's with every parameter doubled (the same frequencies);
# small heads where no frequency is blended, and where every one is stretched.
RELEASED_SCALINGS = {
    "3.1-8b": (128, 500000.0, dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)),
    "3.2-1b": (64, 500000.0, dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)),
    "3.1-doubled": (128, 500000.0, dict(factor=8.0, low_freq_factor=2.0, high_freq_factor=8.0, original_max_position_embeddings=16384)),
    "none-blended": (8, 10000.0, dict(factor=4.0, low_freq_factor=1.0, high_freq_factor=1.01, original_max_position_embeddings=100)),
    "all-stretched": (16, 10000.0, dict(factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=2)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(RELEASED_SCALINGS))
def test_rope_freqs_become_transformers_llama3_frequencies(case):
    """The factors llama.cpp writes for a scaling, read back by tfcli, give the RoPE frequencies
    transformers computes from the original config.json (_compute_llama3_parameters)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import _compute_llama3_parameters

    from tfcli.engine.families import llama as llama_family

    head_dim, theta, scaling = RELEASED_SCALINGS[case]
    cfg = {"head_dim": head_dim, "rope_parameters": {"rope_type": "llama3", "rope_theta": theta, **scaling}}
    factors = llama_cpp_rope_freqs(cfg).astype(np.float64)
    inv_freq = llama_family.ops.rope_frequencies(head_dim, theta)
    factor, high, original = llama_family.llama3_from_factors(factors, inv_freq)
    ours = llama_family.rope_frequencies(head_dim, theta, llama_family.RopeScaling("llama3", factor, 1.0, high, original))
    config = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim, rope_parameters=cfg["rope_parameters"])
    theirs = _compute_llama3_parameters(config)[0].double().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_rope_freqs_that_are_not_llama3s_are_refused(tmp_path):
    llama3(tmp_path / "hf", tied=False, seed=8)
    (tmp_path / "gguf").mkdir()
    factors = np.array([1, 1, 1, 5, 2, 8, 8, 8], np.float32)  # not monotone in the wavelength
    path = write_llama3_gguf(tmp_path / "hf", tmp_path / "gguf" / "odd.gguf", rope_freqs=factors)
    with pytest.raises(GGUFError, match=r"odd.gguf: its RoPE frequency factors \(rope_freqs.weight\) do not follow Llama 3's scaling") as e:
        tg.convert(path, tmp_path / "out")
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


# Llama 3's tokenizer.json split (Meta's, as published with the model), then byte-level BPE.
LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_TEXTS = [t for t in TEXTS if "<|" not in t] + ["digits 12345 and 2024", "it's  DON'T\r\n\n  x", "naïve Ωμέγα ∑ 日本語", "a\n\n\nb   c", "$1,000.50!!"]


def test_llama_bpe_vocabulary_tokenizes_like_llama3s_tokenizer(tmp_path):
    """A byte-level BPE trained here with Llama 3's split, written as a GGUF with tokenizer.ggml.pre
    'llama-bpe': converted, it encodes as the tokenizer it came from and as transformers reads the
    file (digits in threes, contractions, runs of newlines, non-ASCII), a BOS first."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer

    reference = Tokenizer(models.BPE())
    reference.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    reference.decoder = decoders.ByteLevel()
    readme = [line for line in (TINY_LLAMA.parents[2] / "README.md").read_text().splitlines() if line.strip()]
    special = ["<|begin_of_text|>", "<|end_of_text|>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    reference.train_from_iterator(readme + LLAMA3_TEXTS, trainer)
    tok = json.loads(reference.to_str())
    vocab = tok["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    path = tmp_path / "llama3.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in special else 1 for t in tokens])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(vocab["<|begin_of_text|>"])
    w.add_eos_token_id(vocab["<|end_of_text|>"])
    w.add_add_bos_token(True)
    finish(w)
    ours = Tokenizer.from_str(json.dumps(tg.tokenizer_json(tg.GGUFFile(path))))
    theirs = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    bos = vocab["<|begin_of_text|>"]
    for text in LLAMA3_TEXTS + ["Ünïcödé 12345678 ✓ 🙂"]:
        ids = reference.encode(text).ids
        assert ours.encode(text, add_special_tokens=False).ids == ids, text
        assert ours.encode(text).ids == theirs(text).input_ids == [bos] + ids, text
        assert ours.decode(ids) == text
    assert [p for p, _ in ours.pre_tokenizer.pre_tokenize_str("a 12345")] == ["a", "Ġ", "123", "45"]


# --- Phi-3 ---------------------------------------------------------------------------------------------


def write_phi3_gguf(folder: Path, path: Path, *, tweak=None) -> Path:
    """As convert_hf_to_gguf.py's Phi3MiniModel writes it: `phi3`, qkv_proj as attn_qkv and
    gate_up_proj as ffn_up (gguf-py's names), the rotated dimensions as rope.dimension_count
    (partial_rotary_factor · hidden_size // heads), the window (0 for none), the original context,
    and longrope's factors as rope_factors_long / rope_factors_short with their attention factor."""
    import math

    cfg = json.loads((folder / "config.json").read_text())
    rope = cfg["rope_parameters"]
    n_embd, n_head = cfg["hidden_size"], cfg["num_attention_heads"]
    rope_dims = int(rope.get("partial_rotary_factor", 1.0) * n_embd) // n_head
    orig = cfg["original_max_position_embeddings"]
    w = gguf.GGUFWriter(str(path), "phi3")
    generic_keys(w, cfg)
    w.add_rope_scaling_orig_ctx_len(orig)
    w.add_rope_dimension_count(rope_dims)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_sliding_window(cfg.get("sliding_window") or 0)
    byte_level_vocab(w, folder, "default")
    w.add_pad_token_id(cfg["pad_token_id"])  # gguf.SpecialVocab writes the checkpoint's (Phi3Config's default is 32000)
    add_tensors(w, load_file(folder / "model.safetensors"), gguf.MODEL_ARCH.PHI3, cfg["num_hidden_layers"])
    if rope.get("long_factor"):
        scale = cfg["max_position_embeddings"] / orig
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
        w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], np.float32))
    if tweak:
        tweak(w)
    finish(w)
    return path


@pytest.mark.parametrize("tied", [False, True], ids=["partial-window", "longrope-tied"])
def test_phi3_gguf_converts_to_the_checkpoint(tied, tmp_path):
    """Untied: 3/4 of each head rotated and a window of 9; tied: half rotated with longrope's factors."""
    model = phi3(tmp_path / "hf", tied=tied, seed=9)
    (tmp_path / "gguf").mkdir()
    path = write_phi3_gguf(tmp_path / "hf", tmp_path / "gguf" / "f32.gguf")
    assert {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight"} <= set(tg.GGUFFile(path).tensors)
    out = tg.convert(path, tmp_path / "out").path
    original, converted = load_file(tmp_path / "hf" / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(converted) == set(original)
    for name, w in original.items():
        np.testing.assert_array_equal(converted[name], w, err_msg=name)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["partial_rotary_factor"] == (0.5 if tied else 0.75) and cfg["sliding_window"] == (None if tied else 9)
    assert cfg["rope_parameters"]["rope_type"] == ("longrope" if tied else "default")
    ids = prompt_ids()
    assert np.abs(logits_of(out, ids) - torch_logits(model, ids)).max() <= 1e-4


def test_phi3_gguf_loads_in_transformers_as_the_checkpoint(tmp_path):
    """transformers reads a phi3 GGUF with whole heads rotated (it ignores rope.dimension_count) and no window."""
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}
    model = phi3(tmp_path / "hf", tied=False, seed=10, rope_parameters=rope, partial_rotary_factor=1.0, sliding_window=None)
    (tmp_path / "gguf").mkdir()
    path = write_phi3_gguf(tmp_path / "hf", tmp_path / "gguf" / "f32.gguf")
    ids = prompt_ids()
    reference = torch_logits(model, ids)
    assert np.abs(logits_of(tg.convert(path, tmp_path / "out").path, ids) - reference).max() <= 1e-4
    assert np.abs(transformers_gguf_logits(path, ids) - reference).max() <= 1e-4
