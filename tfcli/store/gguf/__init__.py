"""GGUF, llama.cpp's model file: read it, dequantize it, turn it into a Hugging Face folder, and write one from
a folder.

    quants.py     the tensor types and their dequantizers (ggml's block layouts)
    reader.py     GGUFFile: the header, the metadata and the memory-mapped tensors, checked
    tokenizer.py  the vocabulary -> tokenizer.json and tokenizer_config.json
    family.py     which family the file holds (its GGUF table in tfcli.engine.families), its
                  metadata -> config.json, its tensor names -> Hugging Face keys
    writer.py     convert(): check everything, write the folder, rename it into place
    write.py      write_gguf(): the other way, a model folder as a GGUF file (convert --quantize)

Arrows point down the list (writer uses all the others); nothing here imports the CLI.
"""

from __future__ import annotations

from ..manifest import MANIFEST_NAME, sha256_file
from .family import CONVERTIBLE, config_json, family_of, unpermute_rope_rows
from tfcli.engine.formats import BLOCK_TYPES, SUPPORTED_TYPES, TYPE_NAMES, dequantize
from tfcli.engine.gguffile import _MAX_DIMS, GGUFFile, GGUFTensor
from .tokenizer import end_of_generation_ids, sentencepiece_merges, tokenizer_config, tokenizer_json, vocabulary
from .writer import ConvertResult, Plan, Progress, check_convertible, convert

__all__ = [
    "BLOCK_TYPES", "CONVERTIBLE", "MANIFEST_NAME", "SUPPORTED_TYPES", "TYPE_NAMES",
    "ConvertResult", "GGUFFile", "GGUFTensor", "Plan", "Progress",
    "check_convertible", "config_json", "convert", "dequantize", "end_of_generation_ids", "family_of",
    "sentencepiece_merges",
    "sha256_file", "tokenizer_config", "tokenizer_json", "unpermute_rope_rows", "vocabulary", "_MAX_DIMS",
]  # fmt: skip
