"""A large tokenizer.json is built from its parts (engine/tokenizer.py, _lean_bpe): the same tokenizer
as the tokenizers library's parse of the whole file, held in less memory (its parse leaves tens of MB
of leftovers in the heap for a vocabulary of 150,000-260,000 tokens)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from llama_cpp_vectors import llama_cpp_models  # noqa: F401 - a fixture

from tfcli.engine.tokenizer import LEAN_FROM, _large, _lean_bpe
from tfcli.store.gguf import GGUFFile
from tfcli.store.gguf.tokenizer import tokenizer_json

LARGE = ("qwen2", "gemma-4", "llama-bpe")  # byte-level BPE, Gemma 4's BPE on UTF-8 text


def written(models: Path, name: str, folder: Path) -> Path:
    with GGUFFile(models / f"ggml-vocab-{name}.gguf") as g:
        text = json.dumps(tokenizer_json(g), ensure_ascii=False)
    path = folder / f"{name}.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", LARGE)
def test_the_parts_make_the_libraries_tokenizer(name, llama_cpp_models, tmp_path):  # noqa: F811
    import tokenizers

    path = written(llama_cpp_models, name, tmp_path)
    text = path.read_bytes()
    assert len(text) >= LEAN_FROM, "too small to take the lean path: pick a larger vocabulary"
    lean, whole = _lean_bpe(json.loads(text)), tokenizers.Tokenizer.from_buffer(text)
    assert lean is not None
    assert json.loads(lean.to_str()) == json.loads(whole.to_str())
    sample = "Hello world!  3 quick foxes, naïve café 東京 😀\n\n\tdone"
    assert lean.encode(sample).ids == whole.encode(sample).ids


def test_not_a_plain_bpe_file_goes_to_the_library():
    assert _large(b"{" + b" " * LEAN_FROM + b"}") is None  # no model: the library names what is wrong
    assert _large(b"{}") is None  # small: the library's parse


HELD = r"""
import sys
import tfcli.engine.tokenizer as t
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
if sys.argv[2] == "whole":
    t.COMPACT_FROM = t.LEAN_FROM = float("inf")
before = rss()
tok = t.Tokenizer(sys.argv[1])
print(rss() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm (Linux)")
def test_the_parts_hold_less_than_the_parse(llama_cpp_models, tmp_path):  # noqa: F811
    """Gemma 4's 262,144 tokens: resident memory after the tokenizer is made, in fresh processes."""
    path = written(llama_cpp_models, "gemma-4", tmp_path)
    held = {}
    for way in ("lean", "whole"):
        out = subprocess.run([sys.executable, "-c", HELD, str(path), way], capture_output=True, text=True, check=True)
        held[way] = int(out.stdout.split()[-1])
    assert held["lean"] < held["whole"] - 10_000_000, held
