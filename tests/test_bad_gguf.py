"""Bad GGUF files given to convert (or as a model). Each ends in one error line (exit 1)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from badinput import Cases, gen, run_case

CASES = Cases()


# GGUF


@CASES.case(1, "tiny.gguf is truncated", "fetch the file again")
def gguf_truncated(env):
    path = env.gguf()
    path.write_bytes(path.read_bytes()[:5000])
    return ["convert", path, env.tmp / "out"]


@CASES.case(1, "is not a GGUF file (it starts with b'PK\\x03\\x04', not b'GGUF')", "llama.cpp's .gguf files")
def gguf_wrong_magic(env):
    path = env.tmp / "tiny.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    return ["convert", path, env.tmp / "out"]


def convert_patched_gguf(env, offset: int, value: int, size: int) -> list:
    """`convert` of the tiny GGUF with one little-endian header field overwritten."""
    path = env.gguf()
    data = bytearray(path.read_bytes())
    data[offset : offset + size] = value.to_bytes(size, "little")
    path.write_bytes(bytes(data))
    return ["convert", path, env.tmp / "out"]


@CASES.case(1, "GGUF version 1 is not supported", "current llama.cpp")
def gguf_version_1(env):
    return convert_patched_gguf(env, 4, 1, 4)


@CASES.case(1, "the header claims 1,000,000,000 metadata entries", "truncated or corrupt")
def gguf_claims_a_billion_metadata_entries(env):
    return convert_patched_gguf(env, 16, 10**9, 8)


@CASES.case(1, "tiny.gguf is truncated (it ends inside its header)", "fetch the file again")
def gguf_claims_a_terabyte_string(env):
    return convert_patched_gguf(env, 24, 10**12, 8)  # the length of the first metadata key


@CASES.case(1, "'blk.0.extra.weight' is IQ2_XXS, which tfcli cannot dequantize", "supported types: F32, F16, BF16, Q4_0")
def gguf_unsupported_quantization(env):
    from gguf import GGMLQuantizationType as Q

    def add_iq2(w):
        w.add_tensor("blk.0.extra.weight", np.zeros((1, 66), np.uint8), raw_dtype=Q.IQ2_XXS)

    return ["convert", env.gguf(tweak=add_iq2), env.tmp / "out"]


@CASES.case(1, "architecture 'gemma' is not supported", "tfcli converts: llama, qwen2")
def gguf_other_architecture(env):
    return ["convert", env.gguf(arch="gemma"), env.tmp / "out"]


@CASES.case(1, "architecture 'gemma' is not supported", "tfcli converts: llama, qwen2")
def gguf_given_as_a_model_that_cannot_be_converted(env):
    """-m FILE.gguf converts the file first (store/gguf/cached.py): what convert refuses, -m refuses alike."""
    return gen(env.gguf(arch="gemma"))


# The newer architectures: the tiny Llama written as each, with one key or tensor of the family's own wrong.


@CASES.case(1, "gemma3.attention.sliding_window_pattern must hold one true/false for each of the 3 layers", "the file is corrupt")
def gguf_gemma3_pattern_of_the_wrong_length(env):
    def tweak(w):
        w.add_sliding_window(7)
        w.add_sliding_window_pattern([True, False])

    return ["convert", env.gguf(arch="gemma3", tweak=tweak), env.tmp / "out"]


@CASES.case(1, "gemma3.final_logit_softcapping must be a positive number, not -30.0", "the file is corrupt")
def gguf_gemma3_negative_softcap(env):
    return ["convert", env.gguf(arch="gemma3", tweak=lambda w: w.add_final_logit_softcapping(-30.0)), env.tmp / "out"]


@CASES.case(1, "tensor 'output.weight' has no counterpart in a Hugging Face Gemma3ForCausalLM", "not a plain gemma3 model")
def gguf_gemma3_with_an_output_matrix(env):
    """Gemma 3 ties its embeddings: llama.cpp's converter writes no output.weight for it."""
    return ["convert", env.gguf(arch="gemma3"), env.tmp / "out"]


@CASES.case(1, "rope_factors_short.weight is missing; longrope needs one positive factor for each of the 8 rotated pairs", "the file is corrupt")
def gguf_phi3_with_half_its_longrope_factors(env):
    return ["convert", env.gguf(arch="phi3", tweak=lambda w: w.add_tensor("rope_factors_long.weight", np.full(8, 2, np.float32))), env.tmp / "out"]


@CASES.case(1, "tiny.gguf has no phi3.rope.scaling.original_context_length", "metadata is incomplete")
def gguf_phi3_longrope_without_its_original_context(env):
    def tweak(w):
        for which in ("long", "short"):
            w.add_tensor(f"rope_factors_{which}.weight", np.full(8, 2, np.float32))

    return ["convert", env.gguf(arch="phi3", tweak=tweak), env.tmp / "out"]


@CASES.case(1, "rope_freqs.weight has shape [3], not one factor for each of the 8 rotated pairs", "the file is corrupt")
def gguf_llama_rope_freqs_of_the_wrong_size(env):
    return ["convert", env.gguf(tweak=lambda w: w.add_tensor("rope_freqs.weight", np.full(3, 2, np.float32))), env.tmp / "out"]


@CASES.case(1, "its RoPE frequency factors (rope_freqs.weight) do not follow Llama 3's scaling", "only Llama 3's scaling")
def gguf_llama_rope_freqs_not_llama3s(env):
    factors = np.array([1, 1, 1, 5, 2, 8, 8, 8], np.float32)  # not monotone in the wavelength
    return ["convert", env.gguf(tweak=lambda w: w.add_tensor("rope_freqs.weight", factors)), env.tmp / "out"]


@CASES.case(1, "does not exist", "check the path of the .gguf file")
def gguf_missing(env):
    return ["convert", env.tmp / "nope.gguf", env.tmp / "out"]


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)



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
