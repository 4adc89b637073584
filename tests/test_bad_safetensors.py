"""Bad weight files: model.safetensors and sharded checkpoints that are missing, empty, truncated,
malformed or inconsistent with their own header or config.json. Each ends in one error line (exit 1)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from badinput import Cases, Env, edit_header, gen, run_case, safetensors_bytes

CASES = Cases()


# model.safetensors


@CASES.case(1, "no model.safetensors in", "the folder needs model.safetensors")
def safetensors_missing(env):
    return gen(env.model_with("model.safetensors", None))


@CASES.case(1, "model.safetensors is empty", "did not finish")
def safetensors_empty(env):
    return gen(env.model_with("model.safetensors", b""))


@CASES.case(1, "model.safetensors is truncated (5 bytes)", "fetch or save the file again")
def safetensors_shorter_than_its_length_field(env):
    return gen(env.model_with("model.safetensors", b"\x10\x00\x00\x00\x00"))


@CASES.case(1, "lies outside the file", "truncated or corrupt")
def safetensors_truncated_in_the_data(env):
    m = env.model()
    data = (m / "model.safetensors").read_bytes()
    (m / "model.safetensors").write_bytes(data[: len(data) * 2 // 3])
    return gen(m)


@CASES.case(1, "header length 1,000,000,000,000 is larger than the file", "fetch or save the file again")
def safetensors_header_length_past_the_end(env):
    return gen(env.model_with("model.safetensors", safetensors_bytes(b"{}", n=10**12)))


@CASES.case(1, "header of 200,000,000 bytes is larger than the 100 MB", "corrupt")
def safetensors_header_over_100_mb(env):
    m = env.model()
    with open(m / "model.safetensors", "wb") as f:  # a sparse file: large, but costs no disk
        f.write((200_000_000).to_bytes(8, "little"))
        f.truncate(200_000_100)
    return gen(m)


@CASES.case(1, "the header is not valid JSON (JSONDecodeError)", "fetch or save it again")
def safetensors_header_malformed_json(env):
    return gen(env.model_with("model.safetensors", safetensors_bytes(b'{"a": [1, 2', b"\0" * 16)))


@CASES.case(1, "the header is not valid JSON (UnicodeDecodeError)", "corrupt")
def safetensors_header_not_utf8(env):
    return gen(env.model_with("model.safetensors", safetensors_bytes(b'{"\xff": 1}')))


@CASES.case(1, "the header is not a JSON object", "corrupt")
def safetensors_header_a_list(env):
    return gen(env.model_with("model.safetensors", safetensors_bytes(b"[1, 2, 3]")))


@CASES.case(1, "tensors 'transformer.h.0.ln_1.bias' and 'transformer.h.0.ln_1.weight' overlap", "corrupt")
def safetensors_overlapping_offsets(env):
    def overlap(h):
        h["transformer.h.0.ln_1.bias"]["data_offsets"] = h["transformer.h.0.ln_1.weight"]["data_offsets"]  # both [64] float32

    return gen(edit_header(env.model(), overlap))


@CASES.case(1, "tensor 'transformer.wte.weight' lies outside the file", "truncated or corrupt")
def safetensors_offsets_past_the_end(env):
    def past(h):
        begin, end = h["transformer.wte.weight"]["data_offsets"]
        h["transformer.wte.weight"]["data_offsets"] = [begin + 10**9, end + 10**9]

    return gen(edit_header(env.model(), past))


@CASES.case(1, "tensor 'transformer.ln_f.bias' lies outside the file", "truncated or corrupt")
def safetensors_negative_offset(env):
    def negative(h):
        h["transformer.ln_f.bias"]["data_offsets"] = [-256, 0]

    return gen(edit_header(env.model(), negative))


@CASES.case(1, "tensor 'transformer.ln_f.bias' has invalid data_offsets", "corrupt")
def safetensors_offsets_not_integers(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(data_offsets=["0", 256])))


@CASES.case(1, "tensor 'transformer.ln_f.bias' has unknown dtype 'Q4'", "supported dtypes: F64, F32")
def safetensors_unknown_dtype(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(dtype="Q4")))


@CASES.case(1, "tensor 'transformer.ln_f.bias' has unknown dtype [1, 2]", "supported dtypes")
def safetensors_dtype_not_a_string(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(dtype=[1, 2])))


@CASES.case(1, "tensor 'transformer.ln_f.bias' has dtype I32; weights must be F32, F16 or BF16", "re-save")
def safetensors_integer_weights(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(dtype="I32")))


@CASES.case(1, "tensor 'transformer.ln_f.bias' of shape (65,) and dtype F32 needs 260 bytes but has 256", "corrupt")
def safetensors_size_disagrees_with_shape(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(shape=[65])))


@CASES.case(1, "has an invalid shape [-1, 64]", "corrupt")
def safetensors_negative_dimension(env):
    return gen(edit_header(env.model(), lambda h: h["transformer.ln_f.bias"].update(shape=[-1, 64])))


@CASES.case(1, "shape (1000000, 1000000) and dtype F32 needs more than the", "corrupt")
def safetensors_claims_a_10_to_12_element_tensor(env):
    """Refused from the header alone: nothing of that size is allocated or even computed."""
    m = env.model()
    header = {"big": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 4]}}
    (m / "model.safetensors").write_bytes(safetensors_bytes(header, b"\0" * 4))
    return gen(m)


@CASES.case(1, "tensor 'transformer.h.2.mlp.c_proj.bias' is missing from the checkpoint", "re-save or re-convert")
def safetensors_missing_tensor(env):
    return gen(edit_header(env.model(), lambda h: h.pop("transformer.h.2.mlp.c_proj.bias")))


@CASES.case(1, "holds several .safetensors files", "rename the one to use to model.safetensors")
def safetensors_two_files_no_index(env):
    m = env.model()
    (m / "model.safetensors").rename(m / "a.safetensors")
    shutil.copy(m / "a.safetensors", m / "b.safetensors")
    return gen(m)


@CASES.case(1, "model.safetensors.index.json is malformed", "weight_map")
def shard_index_malformed(env):
    m = env.model()
    (m / "model.safetensors").rename(m / "model-00001-of-00001.safetensors")
    (m / "model.safetensors.index.json").write_text('{"weight_map": [')
    return gen(m)


@CASES.case(1, "shard 'model-00002-of-00002.safetensors' listed in model.safetensors.index.json is missing", "fetch the model again")
def shard_missing(env):
    m = env.model()
    (m / "model.safetensors").rename(m / "model-00001-of-00002.safetensors")
    weights = {"transformer.wte.weight": "model-00001-of-00002.safetensors", "transformer.wpe.weight": "model-00002-of-00002.safetensors"}
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weights}))
    return gen(m)


@CASES.case(1, "lists the shard '../tiny-gpt2/model.safetensors', which is not a file name", "files in the model folder")
def shard_path_outside_the_folder(env):
    m = env.model()
    (m / "model.safetensors").unlink()
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"transformer.wte.weight": "../tiny-gpt2/model.safetensors"}}))
    return gen(m)


def _duplicated(env, text_change) -> object:
    """The header's JSON text edited as text: json.dumps cannot write a key twice."""
    from badinput import read_safetensors

    m = env.model()
    header, body = read_safetensors(m / "model.safetensors")
    text = text_change(json.dumps(header), header)
    (m / "model.safetensors").write_bytes(safetensors_bytes(text.encode(), body))
    return m


@CASES.case(1, "model.safetensors: the header names 'transformer.ln_f.bias' twice", "a tensor or field appears once")
def safetensors_duplicate_tensor_name(env):
    """Two entries for one tensor, pointing at different bytes: json.loads kept the last silently."""

    def twice(text, header):
        entry = dict(header["transformer.ln_f.bias"], data_offsets=header["transformer.ln_f.weight"]["data_offsets"])
        return text[:-1] + ', "transformer.ln_f.bias": ' + json.dumps(entry) + "}"

    return gen(_duplicated(env, twice))


@CASES.case(1, "model.safetensors: the header names 'dtype' twice", "corrupt")
def safetensors_duplicate_field_in_an_entry(env):
    return gen(_duplicated(env, lambda text, header: text.replace('"dtype": "F32"', '"dtype": "F32", "dtype": "F16"', 1)))


@CASES.case(1, "model.safetensors: the header names '__metadata__' twice", "corrupt")
def safetensors_duplicate_metadata(env):
    return gen(_duplicated(env, lambda text, header: text[:-1] + ', "__metadata__": {"format": "pt"}, "__metadata__": {"format": "np"}}'))


@CASES.case(1, "appears in both model-00001-of-00002.safetensors and model-00002-of-00002.safetensors", "the shards do not belong together")
def shards_holding_the_same_tensor(env):
    m = env.model()
    (m / "model.safetensors").rename(m / "model-00001-of-00002.safetensors")
    shutil.copy(m / "model-00001-of-00002.safetensors", m / "model-00002-of-00002.safetensors")
    names = {"transformer.wte.weight": "model-00001-of-00002.safetensors", "transformer.wpe.weight": "model-00002-of-00002.safetensors"}
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": names}))
    return gen(m)


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)


# --- warnings: the command goes on ----------------------------------------------------------------------


def test_an_unexpected_tensor_is_a_warning(cli, tmp_path):
    m = Env(tmp_path, None).model()
    weights = load_file(m / "model.safetensors")
    weights["extra.weight"] = np.zeros((2, 2), np.float32)
    save_file(weights, m / "model.safetensors")
    r = cli(*gen(m, "-n", "3", "--seed", "0"))
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith("warning: 1 tensor(s) in the checkpoint are not used by a gpt2 model: extra.weight\n")
    assert r.stdout.strip()
