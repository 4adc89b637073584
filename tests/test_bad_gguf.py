"""Bad GGUF files given to convert (or as a model). Each ends in one error line (exit 1)."""

from __future__ import annotations

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


@CASES.case(1, "does not exist", "check the path of the .gguf file")
def gguf_missing(env):
    return ["convert", env.tmp / "nope.gguf", env.tmp / "out"]


@pytest.mark.parametrize("make, code, needles", CASES)
def test_bad_input_is_one_line_with_the_fix(cli, tmp_path, monkeypatch, make, code, needles):
    run_case(cli, tmp_path, monkeypatch, make, code, needles)
