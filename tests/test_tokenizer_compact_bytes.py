"""The byte-level BPE held in arrays (engine/compact_bytes.py) against the tokenizers library, the
reference: the same ids, offsets and decoded text on llama.cpp's test texts for GPT-2, Llama 3, Qwen2,
Falcon, DeepSeek Coder and Command R's vocabularies and on SmolLM2's real one, in a fraction of the
memory; and the file tfcli's Tokenizer loads goes through it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from llama_cpp_vectors import llama_cpp_models, vocab_cases  # noqa: F401 - a fixture

from test_tokenizer_compact import same, same_pieces, vocab_specs  # noqa: F401 - vocab_specs: a fixture
from tfcli.engine.compact_bytes import CompactByteBPE, compact_bytes
from tfcli.store.gguf import GGUFFile
from tfcli.store.gguf.tokenizer import tokenizer_json

# plain GPT-2; Llama 3's ignore_merges and BOS template; Qwen2's regex; Falcon's pre-tokenizer; two templates
BYTES = ("gpt-2", "llama-bpe", "qwen2", "falcon", "deepseek-coder", "command-r")
MIXED = ("Hello world!  3 quick foxes, naïve café 東京 😀\n\n\tdone  \n \n\n\n  x"
         "<|endoftext|><|im_start|>user\nhi<|im_end|>\n<s></s> <0x41> ▁▁ \u0000\x04\U0001f9ec\u200b end"
         "  1234567 ١٢٣ ²½ Ⅻ\r\n\r\n it's THEY'LL")  # fmt: skip


def texts(extra: list[str]) -> list[str]:
    rng = random.Random(7)
    pool = "abc Zé東😀\n  \t<>_▁-0x'sS1²\r|\x04"
    return extra + [MIXED] + ["".join(rng.choice(pool) for _ in range(rng.randrange(1, 60))) for _ in range(150)]


def pair(spec: dict):
    import tokenizers

    ours = compact_bytes(spec)
    assert isinstance(ours, CompactByteBPE), "compact_bytes no longer takes this kind of tokenizer.json"
    return ours, tokenizers.Tokenizer.from_str(json.dumps(spec))


@pytest.mark.parametrize("name", BYTES)
def test_ids_offsets_and_text_equal_the_library(name, vocab_specs, llama_cpp_models):  # noqa: F811
    ours, lib = pair(vocab_specs(name))
    same(ours, lib, texts([t for t, _ in vocab_cases(llama_cpp_models, name)]))


def test_pieces_and_ids_equal_the_library(vocab_specs):
    same_pieces(*pair(vocab_specs("llama-bpe")))


def test_a_changed_merge_order_is_seen(vocab_specs, llama_cpp_models):  # noqa: F811
    """The comparison above fails when the merges go wrong: the first merge ("Ġ t") made the last."""
    import tokenizers

    spec = json.loads(json.dumps(vocab_specs("gpt-2")))
    lib = tokenizers.Tokenizer.from_str(json.dumps(spec))
    merges = spec["model"]["merges"]
    merges.append(merges.pop(0))
    with pytest.raises(AssertionError):
        same(compact_bytes(spec), lib, texts([t for t, _ in vocab_cases(llama_cpp_models, "gpt-2")]))


def test_other_kinds_go_elsewhere(vocab_specs):
    spec = json.loads(json.dumps(vocab_specs("gpt-2")))
    spec["model"]["dropout"] = 0.1
    assert compact_bytes(spec) is None
    spec = json.loads(json.dumps(vocab_specs("gpt-2")))
    spec["pre_tokenizer"] = None  # not byte-level
    assert compact_bytes(spec) is None
    spec = json.loads(json.dumps(vocab_specs("gpt-2")))
    spec["added_tokens"][0]["id"] += 1  # an added token away from its vocabulary id
    assert compact_bytes(spec) is None
    assert compact_bytes({"model": "not a model"}) is None


def test_smollm2_equals_the_library_and_drops_the_bytes_it_lacks(smollm2_folder):
    import tokenizers

    path = smollm2_folder / "tokenizer.json"
    spec = json.loads(path.read_bytes())
    ours, lib = pair(spec)
    long = Path(__file__).read_text(encoding="utf-8")  # code: spaces, newlines, quotes
    same(ours, lib, texts([long, "\x04\x04 ä\x04"]))  # "\x04": a byte whose character SmolLM2 lacks
    assert ours.encode("\x04").ids == [] == lib.encode("\x04").ids
    from tfcli.engine.tokenizer import Tokenizer

    tok = Tokenizer(path)  # the file as tfcli loads it: in arrays, through a pickled copy (afresh, revived)
    assert isinstance(tok._tok, CompactByteBPE)
    assert tok.encode(long) == tokenizers.Tokenizer.from_file(str(path)).encode(long, add_special_tokens=False).ids


HELD = r"""
import sys
import numpy  # loaded in every run of a model: not the tokenizer's
import tokenizers  # the library's code, loaded either way
import tfcli.engine.tokenizer as t
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
if sys.argv[2] == "library":
    t.COMPACT_FROM = t.LEAN_FROM = float("inf")
before = rss()
tok = t.Tokenizer(sys.argv[1])
tok.encode("Hello <|im_start|> world")  # the lookups made on first use
print(type(tok._tok).__name__, rss() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm (Linux)")
def test_qwen2_in_arrays_holds_far_less(vocab_specs, tmp_path):
    """Resident memory after the tokenizer is made, in fresh processes: Qwen2's 151,936 tokens held 9 MB
    in arrays where the library's tokenizer held 38 MB (measured)."""
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(vocab_specs("qwen2"), ensure_ascii=False), encoding="utf-8")
    held = {}
    for way in ("arrays", "library"):
        out = subprocess.run([sys.executable, "-c", HELD, str(path), way], capture_output=True, text=True, check=True)
        kind, held[way] = out.stdout.split()
        assert (kind == "CompactByteBPE") == (way == "arrays"), kind
    assert int(held["arrays"]) < int(held["library"]) / 2, held
