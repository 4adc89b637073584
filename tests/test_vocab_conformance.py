"""tfcli's GGUF tokenizer against llama.cpp's own test vectors: for each vocabulary-only GGUF of
llama.cpp's models/ folder, every text of its .inp file tokenizes to the ids of its .out file, as
llama.cpp's tests/test-tokenizer-0 checks them (no BOS/EOS added, special-token text not parsed)."""

from __future__ import annotations

import pytest
from llama_cpp_vectors import VOCABS, llama_cpp_models, vocab_cases  # noqa: F401 - a fixture

from tfcli.engine.errors import GGUFError
from tfcli.store.gguf import GGUFFile, check_convertible
from tfcli.store.gguf.tokenizer import gguf_tokenizer, tokenizer_config

# Every vocabulary kept from the sdist, by tokenizer.ggml.model / tokenizer.ggml.pre:
# gpt2 / gpt-2, mpt, starcoder, refact, command-r, falcon, deepseek-llm, deepseek-coder: byte-level BPE;
# gpt2 / llama-bpe (Llama 3, 128,256 tokens), qwen2, qwen35: byte-level BPE with Llama 3's style of regex;
# llama / default (llama-spm: Llama 2; phi-3): SentencePiece BPE; gemma4: Gemma 4's BPE on raw UTF-8.
CONFORMING = list(VOCABS)


@pytest.fixture(scope="module")
def tokenizers(llama_cpp_models):
    made = {}

    def get(name: str):
        if name not in made:
            with GGUFFile(llama_cpp_models / f"ggml-vocab-{name}.gguf") as g:
                made[name] = gguf_tokenizer(g)
        return made[name]

    return get


@pytest.mark.parametrize("name", CONFORMING)
def test_every_text_tokenizes_as_llama_cpp(name, llama_cpp_models, tokenizers):
    tok = tokenizers(name)
    cases = vocab_cases(llama_cpp_models, name)
    assert len(cases) >= 40
    wrong = [(text, want, got) for text, want in cases if (got := tok.encode(text)) != want]
    assert not wrong, f"{len(wrong)} of {len(cases)} texts differ from llama.cpp; first: {wrong[0]!r}"


@pytest.mark.parametrize("name", CONFORMING)
def test_llama_cpp_ids_decode_to_the_text(name, llama_cpp_models, tokenizers):
    """And back: llama.cpp's ids of each text decode to that text (spaces, bytes, the "▁" of
    SentencePiece, the leading space it adds and takes away)."""
    tok = tokenizers(name)
    wrong = [(text, got) for text, ids in vocab_cases(llama_cpp_models, name) if (got := tok.decode(ids)) != text]
    assert not wrong, f"{len(wrong)} texts decode differently; first: {wrong[0]!r}"


# llama.cpp's add_bos for each file (llama-vocab.cpp): the file's flag, else on for SentencePiece and
# for Llama 3's pre-tokenizer (ggml-vocab-llama-bpe.gguf has no flag), off for the other BPE files.
ADDS_BOS = {"gpt-2": False, "qwen2": False, "llama-bpe": True, "llama-spm": True, "phi-3": True, "command-r": True}


@pytest.mark.parametrize("name", sorted(ADDS_BOS))
def test_prompt_gets_a_bos_where_llama_cpp_adds_one(name, llama_cpp_models, tokenizers):
    tok = tokenizers(name)
    with GGUFFile(llama_cpp_models / f"ggml-vocab-{name}.gguf") as g:
        bos = g.get("tokenizer.ggml.bos_token_id")
        adds = tokenizer_config(g, {"max_position_embeddings": 1})["add_bos_token"]
    ids = tok.encode("Hello world")
    assert adds is ADDS_BOS[name]
    assert tok.prompt("Hello world") == ([bos] if ADDS_BOS[name] else []) + ids


def test_a_vocabulary_only_file_is_still_refused_as_a_model(llama_cpp_models):
    """Its tokenizer can be built; as a model it has no architecture and no tensors."""
    with GGUFFile(llama_cpp_models / "ggml-vocab-llama-bpe.gguf") as g:
        assert not g.tensors
        with pytest.raises(GGUFError):
            check_convertible(g)
