"""The SentencePiece-style BPE held in arrays (engine/compact_bpe.py) against the tokenizers library,
the reference: the same ids, offsets and decoded text on llama.cpp's test texts for Llama 2, Phi-3
and Gemma 4's vocabularies and on the real Gemma 3 vocabulary, in a fraction of the memory."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from llama_cpp_vectors import llama_cpp_models, vocab_cases  # noqa: F401 - a fixture

from tfcli.engine.compact_bpe import CompactBPE, compact_bpe
from tfcli.store.gguf import GGUFFile
from tfcli.store.gguf.tokenizer import tokenizer_json

SPM = ("llama-spm", "phi-3", "gemma-4")  # the llama.cpp vocabularies of the kind compact_bpe takes
MIXED = ("Hello world!  3 quick foxes, naïve café 東京 😀\n\n\tdone  \n \n\n\n  x"
         "<start_of_turn>user\nhi<end_of_turn>\n<unused5><s></s> <0x41> ▁▁ \u0000\U0001f9ec\u200b end")


def pair(spec: dict):
    import tokenizers

    lib = tokenizers.Tokenizer.from_str(json.dumps(spec))
    ours = compact_bpe(spec)
    assert isinstance(ours, CompactBPE), "compact_bpe no longer takes this kind of tokenizer.json"
    return ours, lib


def texts(extra: list[str]) -> list[str]:
    rng = random.Random(5)
    pool = "abc Zé東😀\n  \t<>_▁-0x"
    return extra + [MIXED] + ["".join(rng.choice(pool) for _ in range(rng.randrange(1, 60))) for _ in range(200)]


def same(ours: CompactBPE, lib, cases: list[str]) -> None:
    for text in cases:
        for special in (False, True):
            want = lib.encode(text, add_special_tokens=special)
            got = ours.encode(text, add_special_tokens=special)
            assert got.ids == want.ids, (text, special)
            assert got.offsets == want.offsets, (text, special)
        for skip in (False, True):
            assert ours.decode(want.ids, skip_special_tokens=skip) == lib.decode(want.ids, skip_special_tokens=skip), text


@pytest.fixture(scope="module")
def vocab_specs(llama_cpp_models):  # noqa: F811
    made = {}

    def get(name: str) -> dict:
        if name not in made:
            with GGUFFile(llama_cpp_models / f"ggml-vocab-{name}.gguf") as g:
                made[name] = tokenizer_json(g)
        return made[name]

    return get


@pytest.fixture(scope="module")
def pairs(vocab_specs):
    made = {}

    def get(name: str):
        if name not in made:
            made[name] = pair(vocab_specs(name))
        return made[name]

    return get


@pytest.mark.parametrize("name", SPM)
def test_ids_offsets_and_text_equal_the_library(name, pairs, llama_cpp_models):  # noqa: F811
    ours, lib = pairs(name)
    same(ours, lib, texts([t for t, _ in vocab_cases(llama_cpp_models, name)]))


@pytest.mark.parametrize("name", SPM)
def test_pieces_and_ids_equal_the_library(name, pairs):
    same_pieces(*pairs(name))


def same_pieces(ours, lib) -> None:
    """The vocabulary's size, the pieces of the first and last ids, their ids, the added tokens."""
    assert ours.vocab_size == max(lib.get_vocab(with_added_tokens=True).values()) + 1
    for i in [*range(0, 300), *range(ours.vocab_size - 300, ours.vocab_size + 2), -1]:
        piece = lib.id_to_token(i) if i >= 0 else None
        assert ours.id_to_token(i) == piece, i
        if piece is not None:
            assert ours.token_to_id(piece) == lib.token_to_id(piece), piece
    assert ours.token_to_id("no such piece in any vocabulary") is None
    want = {i: t.special for i, t in lib.get_added_tokens_decoder().items()}
    assert {i: t.special for i, t in ours.get_added_tokens_decoder().items()} == want


def test_other_kinds_go_to_the_library(vocab_specs, llama_cpp_models):  # noqa: F811
    with GGUFFile(llama_cpp_models / "ggml-vocab-qwen2.gguf") as g:
        assert compact_bpe(tokenizer_json(g)) is None  # byte-level BPE: its pre-tokenizer's regex
    spec = json.loads(json.dumps(vocab_specs("llama-spm")))
    spec["model"]["dropout"] = 0.1
    assert compact_bpe(spec) is None
    spec = json.loads(json.dumps(vocab_specs("llama-spm")))
    spec["added_tokens"][0]["lstrip"] = True
    assert compact_bpe(spec) is None
    assert compact_bpe({"model": "not a model"}) is None


@pytest.fixture(scope="module")
def gemma3_spec(gemma3_folder) -> dict:
    return json.loads((gemma3_folder / "tokenizer.json").read_bytes())


def test_gemma3_equals_the_library(gemma3_spec, llama_cpp_models):  # noqa: F811
    ours, lib = pair(gemma3_spec)
    long = Path(__file__).read_text(encoding="utf-8")  # code: spaces, newlines, quotes
    same(ours, lib, texts([t for t, _ in vocab_cases(llama_cpp_models, "llama-spm")] + [long]))
    assert ours.vocab_size == 262_144 and ours.longest_piece == max(map(len, lib.get_vocab(with_added_tokens=True)))


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm (Linux)")
def test_gemma3_in_arrays_holds_far_less(gemma3_folder):
    """Resident memory after the tokenizer is made and has encoded, in a fresh process: 21 MB
    measured, where the library's tokenizer (built from the parts, _lean_bpe) held 82 MB."""
    out = subprocess.run([sys.executable, "-c", HELD, str(gemma3_folder / "tokenizer.json")],
                         capture_output=True, text=True, check=True)  # fmt: skip
    held = int(out.stdout.split()[-1])
    assert held < 30_000_000, held


HELD = r"""
import sys
import numpy  # loaded in every run of a model: not the tokenizer's
import tfcli.engine.tokenizer as t
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
before = rss()
tok = t.Tokenizer(sys.argv[1])
tok.encode("Hello <start_of_turn> world")  # the lookups made on first use
assert type(tok._tok).__name__ == "CompactBPE" and "tokenizers" not in sys.modules
print(rss() - before)
"""
