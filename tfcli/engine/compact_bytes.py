"""A byte-level BPE tokenizer (GPT-2's kind: SmolLM2, Qwen2, Llama 3) with its vocabulary and merges
held in arrays: the same ids, offsets and text as the tokenizers library's, in a fraction of the memory.

Why: the library keeps the vocabulary as two hash maps of Rust strings and the merges as a third:
SmolLM2's 49,152 tokens and 48,900 merges hold 12 MB, Qwen2's 151,936 and 151,387 about 40 MB,
beside a 98 MB (or 1 GB) file. Here they are compact_bpe's arrays: one UTF-8 blob with offsets, the
merges sorted by pair for a binary search.

What the library still does, because it does it fast and exactly: the pre-tokenizer (its regex over
Unicode classes, the bytes mapped to characters: `pre_tokenize_str` gives each word's byte characters
and its span of the text) and the decoder, both the file's own parts. Here: the added tokens, found
in the raw text as the library finds them (compact_bpe's _split_added), and each word's merges,
lowest rank first and leftmost (compact_bpe's loop, after the library's models/bpe/word.rs); a
token's offsets are those of its first and last bytes' characters, as the library's. A byte whose
character the vocabulary lacks (SmolLM2 lacks 21) is left out by both, as a BPE without an unknown
token does. Which files it takes: compact_kinds.takes_bytes (no normalizer; the ByteLevel parts
without a prefix space). tests/test_tokenizer_compact_bytes.py holds the ids, offsets and text
equal to the library's.
"""

from __future__ import annotations

import json

import numpy as np

from .compact_bpe import CACHE_WORDS, SMALL_WORD, CompactBPE
from .compact_kinds import takes_bytes


class CompactByteBPE(CompactBPE):
    """CompactBPE's vocabulary, added tokens, merges and merge loop; the file's own pre-tokenizer and
    decoder, run by the library."""

    def __init__(self, spec: dict):
        # the arrays, the template and the added tokens; the parts the library runs are kept as the file has them
        super().__init__({k: v for k, v in spec.items() if k not in ("normalizer", "pre_tokenizer", "decoder")})
        empty = {"type": "BPE", "vocab": {}, "merges": []}
        parts = {"pre_tokenizer": spec["pre_tokenizer"], "decoder": spec.get("decoder"), "model": empty}
        self.helper_json = json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                                       "normalizer": None, "post_processor": None, **parts})
        self._helper = None  # a Tokenizer of those parts: its pre_tokenizer and decoder
        self.whole_words = None  # ignore_merges: a word that is a token is that token (_Whole)

    def _made(self):
        got = super()._made()
        if self._helper is None:
            from tokenizers import Tokenizer

            self._helper = Tokenizer.from_str(self.helper_json)
            if self.ignore_merges and self.whole_words is None:
                self.whole_words = _Whole(self)
        return got

    def __getstate__(self):
        # the library's helper, the lookups and the hashes (Python's, of this process) are made again
        return {**self.__dict__, "_helper": None, "_lookups": None, "whole_words": None}

    # ---- encoding
    def _segment(self, text: str, start: int, end: int, ids: list, offsets: list) -> None:
        """The tokens of text[start:end], a span between added tokens: its words as the file's
        pre-tokenizer cuts them (their byte characters, their spans), each merged."""
        self._made()
        segment = text[start:end]
        for word, (a, b) in self._helper.pre_tokenizer.pre_tokenize_str(segment):
            got = self._word(word)
            if len(word) == b - a:  # ASCII: a byte is a character
                offsets.extend((start + a + f, start + a + e) for _, f, e in got)
            else:
                at = [start + a + k for k, c in enumerate(segment[a:b]) for _ in range(len(c.encode("utf-8")))]
                offsets.extend((at[f], at[e - 1] + 1) for _, f, e in got)
            ids.extend(i for i, _, _ in got)

    def _word(self, word: str) -> tuple[tuple[int, int, int], ...]:
        """(id, first, end) of each token of a word given as its byte characters: first and end count
        bytes of the word. A byte whose character the vocabulary lacks is left out (the library's BPE
        without an unknown token), and its neighbours may merge. Kept for the words that come again."""
        got = self._cache.get(word)
        if got is not None:
            return got
        whole = self.whole_words.find(word) if self.whole_words is not None else None
        if whole is not None:
            got = ((whole, 0, len(word)),)
        else:
            chars = self._made()[0]
            sym, span = [], []
            for k, ch in enumerate(word):
                i = chars.get(ch)
                if i is not None:
                    sym.append(i)
                    span.append([k, k + 1])
            if len(sym) < len(word):
                span = _shifted(word, [k for k, ch in enumerate(word) if ch in chars])
            if len(sym) > SMALL_WORD:
                self._merge_all(sym, span)
            elif len(sym) > 1:
                self._merge_small(sym, span)
            got = tuple((i, a, b) for i, (a, b) in zip(sym, span) if i >= 0)
        if len(self._cache) >= CACHE_WORDS:
            self._cache.clear()
        self._cache[word] = got
        return got

    # ---- decoding
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        tokens = self._pieces_of(ids, skip_special_tokens)
        self._made()
        decoder = self._helper.decoder
        return "".join(tokens) if decoder is None else decoder.decode(tokens)


def _shifted(word: str, kept: list[int]) -> list[list[int]]:
    """The spans the library gives the kept characters of a word some of whose characters it left out:
    it places each kept symbol after the bytes (UTF-8, of the byte characters) of the kept ones before
    it, so a left-out character's room goes to what follows; a span is [first, last + 1] of the word's
    characters those bytes fall in (models/bpe/model.rs merge_word, Word::get_offsets)."""
    sizes = [len(ch.encode("utf-8")) for ch in word]
    owner = [k for k, n in enumerate(sizes) for _ in range(n)]  # the character of each byte of the word
    spans, at = [], 0
    for k in kept:
        spans.append([owner[at], owner[at + sizes[k] - 1] + 1])
        at += sizes[k]
    return spans


class _Whole:
    """The ids of the pieces that are whole words, found by the pieces' byte strings: a sorted array of
    each piece's 64-bit hash (Python's, made in this process) beside its id, checked against the blob."""

    def __init__(self, tok: CompactBPE):
        self.tok = tok
        starts = np.concatenate([[0], tok.ends[:-1]])  # [V]
        blob = tok.blob
        hashes = np.array([hash(blob[a:b]) for a, b in zip(starts.tolist(), tok.ends.tolist())], dtype=np.int64)
        order = np.argsort(hashes, kind="stable")
        self.hashes, self.ids = hashes[order], order.astype(np.int32)  # [V] each

    def find(self, word: str) -> int | None:
        """The id of the piece that is this whole word, or None."""
        piece = word.encode("utf-8")
        h = hash(piece)
        at = int(np.searchsorted(self.hashes, h))
        tok = self.tok
        while at < len(self.hashes) and self.hashes[at] == h:
            i = int(self.ids[at])
            if tok.present[i] and tok._piece_bytes(i) == piece:
                return i
            at += 1
        return None


def compact_bytes(spec: dict) -> CompactByteBPE | None:
    """The tokenizer of a parsed byte-level tokenizer.json in arrays, or None when it is not of the kind
    this module reproduces exactly (the library then builds it)."""
    try:
        if not takes_bytes(spec):
            return None
        return CompactByteBPE(spec)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
