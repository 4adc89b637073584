"""Files and answers that were silently wrong (issue 34): config fields of the wrong type, a GGUF
whose tensors share bytes, an --answer the vocabulary cannot spell."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_LLAMA, one_line_error

SHAKESPEARE = Path(__file__).parent.parent / "weights" / "shakespeare"


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"rope_scaling": [1, 2]}, "rope_scaling must be an object, not [1, 2]"),
        ({"rope_scaling": "llama3"}, "rope_scaling must be an object"),
        ({"rope_parameters": "default"}, "rope_parameters must be an object, not 'default'"),
    ],
)
def test_a_llama_rope_field_of_the_wrong_type_is_refused_by_name(cli, tmp_path, change, needle):
    folder = tmp_path / "m"
    shutil.copytree(TINY_LLAMA, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **change}))
    one_line_error(cli("generate", "-m", folder, "Hi", "-n", "1"), 1, needle)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"rope_parameters": "default"}, "rope_parameters must be an object, not 'default'"),
        ({"rope_parameters": {"full_attention": 5}}, "rope_parameters.full_attention must be an object"),
        ({"rope_scaling": [1, 2]}, "rope_scaling must be an object"),
    ],
)
def test_a_gemma3_rope_field_of_the_wrong_type_is_refused_by_name(change, needle):
    from tfcli.engine.errors import ConfigError
    from tfcli.engine.families import config_from_hf

    raw = {"model_type": "gemma3_text", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
           "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 64, "max_position_embeddings": 64, "sliding_window": 8}  # fmt: skip
    config_from_hf(raw)  # the base config loads
    with pytest.raises(ConfigError, match="must be an object") as e:
        config_from_hf({**raw, **change})
    assert needle in str(e.value)


def test_ablate_warns_about_an_answer_the_vocabulary_cannot_spell(cli):
    r = cli("ablate", "-m", SHAKESPEARE, "ROMEO: I", "--answer", "天", "--json")
    assert r.exit_code == 0, r.stderr
    assert "warning: " in r.stderr and "'天'" in r.stderr and "<unk>" in r.stderr


def _gguf_with_two_tensors(path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("first.weight", np.arange(64, dtype=np.float32))
    w.add_tensor("second.weight", np.arange(64, dtype=np.float32) * 2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_gguf_whose_tensors_share_bytes_is_refused(tmp_path):
    from tfcli.engine.errors import GGUFError
    from tfcli.engine.gguffile import GGUFFile

    path = tmp_path / "two.gguf"
    _gguf_with_two_tensors(path)
    f = GGUFFile(path)
    assert f.tensors["second.weight"].start > f.tensors["first.weight"].start  # the file as written loads
    data = bytearray(path.read_bytes())
    name = b"second.weight"
    at = data.index(name) + len(name)  # then n_dims u32, dims u64 x n_dims, type u32, offset u64
    n_dims = struct.unpack_from("<I", data, at)[0]
    offset_at = at + 4 + 8 * n_dims + 4
    struct.pack_into("<Q", data, offset_at, 0)  # the second tensor now starts where the first does
    path.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="overlap") as e:
        GGUFFile(path)
    assert "first.weight" in str(e.value) and "second.weight" in str(e.value)
