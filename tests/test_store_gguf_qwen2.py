"""Qwen2 GGUFs: random Qwen2ForCausalLM checkpoints (tests/test_qwen2.py builds them) written as
llama.cpp's convert_hf_to_gguf.py writes Qwen2 (`general.architecture` qwen2, the generic LLM keys
under qwen2.*, byte-level BPE with the 'qwen2' pre-tokenizer, q/k/v biases, Q and K rows NOT
permuted: llama.cpp runs Qwen2 with NEOX RoPE), converted by tfcli and compared with the checkpoint
in transformers. Each test GGUF is also loaded by transformers itself (gguf_file=), which reads
llama.cpp's layout independently of tfcli."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

from tfcli.engine.errors import GGUFError  # noqa: E402
from tfcli.store import gguf as tg  # noqa: E402
from tfcli.store import load  # noqa: E402

from conftest import reference  # noqa: E402
from test_gguf import CHATML, TEXTS, add_tensor, finish, transformers_gguf_logits  # noqa: E402
from conftest import torch_logits  # noqa: E402
from test_qwen2 import SHAPES, qwen2_checkpoint  # noqa: E402
from tfcli.engine.fast import FAST  # noqa: E402

QUANTIZED = {"token_embd": Q.Q8_0, "attn_q": Q.Q4_0, "attn_k": Q.Q5_1, "attn_v": Q.Q8_0, "ffn_up": Q.Q4_1, "ffn_down": Q.F16}


def write_qwen2_gguf(folder: Path, path: Path, *, types: dict[str, Q] | None = None, tweak=None) -> Path:
    """The checkpoint in `folder` as a GGUF, laid out as convert_hf_to_gguf.py's Qwen2Model writes it;
    tensor names from gguf-py's own TensorNameMap (not from tfcli), 1-D tensors always F32."""
    cfg = json.loads((folder / "config.json").read_text())
    weights = load_file(folder / "model.safetensors")
    tok = json.loads((folder / "tokenizer.json").read_text())
    L = cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    vocab = tok["model"]["vocab"]
    special = {t["content"] for t in tok["added_tokens"]}
    tokens = sorted(vocab, key=vocab.get)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in special else 1 for t in tokens])  # 3 = CONTROL
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)  # Qwen2's tokenizer adds no BOS
    w.add_chat_template(CHATML)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, L)
    for hf, arr in weights.items():
        gg = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert gg is not None, hf
        add_tensor(w, gg, arr, types)
    if tweak:
        tweak(w)
    finish(w)
    return path


@pytest.fixture(scope="module", params=sorted(SHAPES))
def qwen2(request, tmp_path_factory):
    """(checkpoint folder, transformers model, F32 GGUF, quantized GGUF) for one shape."""
    n_head, n_kv, tied = SHAPES[request.param]
    root = tmp_path_factory.mktemp(f"qwen2-{request.param}")
    model = qwen2_checkpoint(root / "hf", n_head=n_head, n_kv_head=n_kv, tied=tied, seed=1)
    (root / "gguf").mkdir()  # the GGUFs alone in a folder, as transformers' gguf_file= reads them
    f32 = write_qwen2_gguf(root / "hf", root / "gguf" / "f32.gguf")
    quantized = write_qwen2_gguf(root / "hf", root / "gguf" / "q.gguf", types=QUANTIZED)
    return root / "hf", model, f32, quantized


def test_the_gguf_has_qwen2s_layout(qwen2):
    _, model, f32, _ = qwen2
    g = tg.GGUFFile(f32)
    assert g.get("general.architecture") == "qwen2" and g.get("tokenizer.ggml.pre") == "qwen2"
    assert {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"} <= set(g.tensors)
    assert "blk.0.attn_output.bias" not in g.tensors
    assert ("output.weight" in g.tensors) is not model.config.tie_word_embeddings


def test_f32_conversion_restores_the_checkpoint_exactly(qwen2, tmp_path):
    """No quantization in the way: every tensor comes back bit for bit, Q and K rows in their order
    (Qwen2's are stored unpermuted), the biases included."""
    folder, _, f32, _ = qwen2
    out = tg.convert(f32, tmp_path / "out").path
    original, converted = load_file(folder / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(converted) == set(original)
    for name, w in original.items():
        np.testing.assert_array_equal(converted[name], w, err_msg=name)


def test_converted_config_is_the_familys(qwen2, tmp_path):
    folder, model, f32, _ = qwen2
    cfg = json.loads((tg.convert(f32, tmp_path / "out").path / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg["use_sliding_window"] is False
    assert cfg["rope_theta"] == 1e6 and cfg["tie_word_embeddings"] is model.config.tie_word_embeddings
    assert "attention_bias" not in cfg  # a Llama entry: Qwen2's biases are fixed by its family


def test_f32_conversion_logits_equal_the_checkpoint_in_transformers(qwen2, tmp_path):
    _, model, f32, _ = qwen2
    lm = load(tg.convert(f32, tmp_path / "out").path)
    assert not lm.warnings and lm.config.family == "qwen2"
    for key in ("short", "long"):
        ids = reference("tiny-llama")[f"ids_{key}"]
        logits = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)
        assert np.abs(logits - torch_logits(model, ids)).max() <= 1e-4


def test_converted_folder_loads_in_transformers(qwen2, tmp_path):
    from transformers import Qwen2ForCausalLM

    _, model, _, quantized = qwen2
    out = tg.convert(quantized, tmp_path / "out").path
    hf = Qwen2ForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = reference("tiny-llama")["ids_long"]
    lm = load(out)
    assert np.abs(lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST) - torch_logits(hf, ids)).max() <= 1e-4


def test_f32_gguf_loads_in_transformers_as_the_checkpoint_it_came_from(qwen2):
    _, model, f32, _ = qwen2
    ids = reference("tiny-llama")["ids_long"]
    assert np.abs(transformers_gguf_logits(f32, ids) - torch_logits(model, ids)).max() <= 1e-4


def test_quantized_gguf_loads_in_transformers_as_tfcli_converts_it(qwen2, tmp_path):
    _, model, _, quantized = qwen2
    ids = reference("tiny-llama")["ids_long"]
    lm = load(tg.convert(quantized, tmp_path / "out").path)
    ours = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)
    assert np.abs(transformers_gguf_logits(quantized, ids) - ours).max() <= 1e-4
    assert np.abs(ours - torch_logits(model, ids)).max() > 1e-4  # the quantization was real


def test_a_permuting_conversion_would_be_caught(qwen2, tmp_path, monkeypatch):
    """Had the family's table said permuted_qk (Llama's), the rows would be reordered and the logits
    wrong: the comparison above would see a wrong table."""
    import dataclasses

    from tfcli.engine.families import qwen2 as qwen2_family

    _, model, f32, _ = qwen2
    monkeypatch.setattr(qwen2_family, "GGUF", dataclasses.replace(qwen2_family.GGUF, permuted_qk=True))
    lm = load(tg.convert(f32, tmp_path / "out").path)
    ids = reference("tiny-llama")["ids_short"]
    assert np.abs(lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST) - torch_logits(model, ids)).max() > 1e-2


def test_qwen2_pre_tokenizer_tokenizes_like_transformers_gguf_tokenizer(qwen2, tmp_path):
    """llama.cpp's 'qwen2' split: digits one by one (Llama 3's takes up to three), then byte-level BPE."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    _, _, f32, _ = qwen2
    ours = Tokenizer.from_file(str(tg.convert(f32, tmp_path / "out").path / "tokenizer.json"))
    theirs = AutoTokenizer.from_pretrained(f32.parent, gguf_file=f32.name)
    for text in TEXTS + ["digits 12345 and 2024", "it's  DON'T\r\n\n  x"]:
        ids = ours.encode(text, add_special_tokens=False).ids
        assert ids == theirs(text, add_special_tokens=False).input_ids, text
        assert ours.decode(ids, skip_special_tokens=False) == text
    assert [p for p, _ in ours.pre_tokenizer.pre_tokenize_str("a 123")] == ["a", "Ġ", "1", "2", "3"]


def test_cli_converts_and_generates(cli, qwen2, tmp_path):
    _, _, _, quantized = qwen2
    r = cli("convert", quantized, tmp_path / "out")
    assert r.exit_code == 0, r.stderr
    r = cli("generate", "-m", tmp_path / "out", "Hello", "-n", "4", "-t", "0")
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r.stderr


def test_a_qwen2_gguf_without_its_biases_is_refused(tmp_path):
    """The tiny Llama written as arch qwen2 has no q/k/v biases: one line names the first missing one."""
    from test_gguf import write_gguf

    path = write_gguf(tmp_path / "q.gguf", arch="qwen2", pre="qwen2")
    with pytest.raises(GGUFError, match=r"tensor 'blk.0.attn_q.bias' is missing \(9 missing in all\)") as e:
        tg.convert(path, tmp_path / "out")
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()
