"""GGUFs of the newer families: random checkpoints (tests/test_new_families.py builds them) written
as llama.cpp's convert_hf_to_gguf.py lays them out (tensor names from gguf-py's own tables, the
generic LLM keys under the architecture's name), converted by tfcli and compared with the
checkpoint in transformers; transformers also reads each GGUF itself (gguf_file=)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
from safetensors.numpy import load_file  # noqa: E402

from tfcli.store import gguf as tg  # noqa: E402
from tfcli.store import load  # noqa: E402

from test_gguf import CHATML, add_tensor, finish, transformers_gguf_logits  # noqa: E402
from test_new_families import prompt_ids, qwen3, torch_logits  # noqa: E402


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
    assert np.abs(lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True) - torch_logits(model, ids)).max() <= 1e-4


def test_qwen3_gguf_loads_in_transformers_as_the_checkpoint(tmp_path):
    """transformers' GGUF reader gives a Qwen3 its default head size, 128 (it ignores
    attention.key_length), so this checkpoint has heads of 128: 2 of them in a width of 256."""
    model = qwen3(tmp_path / "hf", tied=False, seed=3, hidden_size=256, n_head=2, n_kv_head=1, head_dim=128)
    (tmp_path / "gguf").mkdir()
    path = write_qwen3_gguf(tmp_path / "hf", tmp_path / "gguf" / "f32.gguf")
    ids = prompt_ids()
    lm = load(tg.convert(path, tmp_path / "out").path)
    assert np.abs(lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True) - torch_logits(model, ids)).max() <= 1e-4
    assert np.abs(transformers_gguf_logits(path, ids) - torch_logits(model, ids)).max() <= 1e-4


def test_a_gguf_file_runs_directly_converted_once_into_the_cache(cli, tmp_path):
    """-m FILE.gguf: the first run converts it into the cache (a line says so and where), the next
    runs load that folder; `tfcli models` lists it and `tfcli rm` removes it."""
    model = qwen3(tmp_path / "hf", tied=True, seed=4)
    path = write_qwen3_gguf(tmp_path / "hf", tmp_path / "Tiny Qwen3.gguf")
    first = cli("generate", "-m", path, "Hello", "-n", "4", "-t", "0")
    assert first.exit_code == 0, first.stderr
    assert "Tiny Qwen3.gguf converted once into the cache as Tiny-Qwen3-" in first.stderr
    name = next(word for word in first.stderr.split() if word.startswith("Tiny-Qwen3-"))
    second = cli("generate", "-m", path, "Hello", "-n", "4", "-t", "0")
    assert second.exit_code == 0 and "converted" not in second.stderr and second.stdout == first.stdout
    ids = prompt_ids()
    lm = load(name)  # by its cache name, as `tfcli models` shows it
    assert np.abs(lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True) - torch_logits(model, ids)).max() <= 1e-4
    assert name in [m["name"] for m in json.loads(cli("models", "--json").stdout)["models"]]
    assert cli("rm", name, "--yes").exit_code == 0
    assert name not in cli("models").stdout
