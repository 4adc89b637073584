"""A byte-level BPE tokenizer (GPT-2's kind: SmolLM2, Qwen2, Llama 3) with its vocabulary and merges
held in arrays: the same ids, offsets and text as the tokenizers library's, in a fraction of the memory.

Why: the library keeps the vocabulary as two hash maps of Rust strings and the merges as a third:
SmolLM2's 49,152 tokens and 48,900 merges hold 12 MB, Qwen2's 151,936 and 151,387 about 40 MB,
beside a 98 MB (or 1 GB) file. Here they are compact_bpe's arrays: one UTF-8 blob with offsets, the
merges sorted by pair for a binary search.

What the library still does, because it does it fast and exactly: the added tokens, the normalizer,
the pre-tokenizer (its regex over Unicode classes, the bytes mapped to characters) and the decoder.
They run as a Tokenizer of the file's own parts over a model that knows only the file's byte
characters and added tokens, and no merge: its encoding gives each word's byte characters with
their ids and offsets, and the words apart (word_ids). Each word is then merged here, lowest rank
first and leftmost (compact_bpe's loop, after the library's models/bpe/word.rs), and a token's
offsets are those of its first and last characters, as the library's. A byte character missing from
the vocabulary (SmolLM2 lacks 21) is dropped by both, as a BPE without an unknown token does.
Which files it takes: compact_kinds.takes_bytes; tests/test_tokenizer_compact.py holds the ids,
offsets and text equal to the library's.
"""

from __future__ import annotations

import json

import numpy as np

from .compact_bpe import CACHE_WORDS, SMALL_WORD, CompactBPE, Encoding
from .compact_kinds import takes_bytes

_HELPER_PARTS = ("version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "decoder")


class CompactByteBPE(CompactBPE):
    """CompactBPE's vocabulary, merges and merge loop; encoding and decoding through a Tokenizer of the
    file's own parts (the library's) over the byte characters alone."""

    def __init__(self, spec: dict):
        from tokenizers.pre_tokenizers import ByteLevel

        model = spec["model"]
        # the arrays, the template and the added tokens; the parts the library runs are kept for the helper
        super().__init__({k: v for k, v in spec.items() if k not in ("normalizer", "pre_tokenizer", "decoder")})
        vocab = model["vocab"]
        letters = {c: vocab[c] for c in ByteLevel.alphabet() if c in vocab}  # the byte characters it has
        letters.update((t["content"], t["id"]) for t in spec.get("added_tokens") or [])
        helper = {k: spec.get(k) for k in _HELPER_PARTS}
        helper["post_processor"] = None  # the template is added after the merges (CompactBPE.encode's)
        helper["model"] = {"type": "BPE", "vocab": letters, "merges": [], "dropout": None, "unk_token": None,
                           "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                           "byte_fallback": False, "ignore_merges": False}  # fmt: skip
        self.helper_json = json.dumps(helper)
        self._helper = None
        self.whole_words = None  # ignore_merges: a word that is a token is that token (_whole)

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
    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        self._made()
        got = self._helper.encode(text, add_special_tokens=False)
        letters, spans, words = got.ids, got.offsets, got.word_ids
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        i, n = 0, len(letters)
        while i < n:
            j = i + 1
            if words[i] is not None:
                while j < n and words[j] == words[i]:
                    j += 1
            if j - i == 1:
                ids.append(letters[i])
                offsets.append(spans[i])
            else:
                for token, a, b in self._word(tuple(letters[i:j])):
                    ids.append(token)
                    offsets.append((spans[i + a][0], spans[i + b - 1][1]))
            i = j
        if add_special_tokens and self.template:
            at = self.template.index(None) if None in self.template else len(self.template)
            before, after = self.template[:at], self.template[at + 1 :]
            ids = before + ids + after
            offsets = [(0, 0)] * len(before) + offsets + [(0, 0)] * len(after)
        return Encoding(ids, offsets)

    def _word(self, letters: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        """(id, first, end) of each token of a word given as its byte characters' ids: first and end
        count characters of the word. Kept for the words that come again (the library's cache)."""
        got = self._cache.get(letters)
        if got is not None:
            return got
        whole = self.whole_words.find(letters) if self.whole_words is not None else None
        if whole is not None:
            got = ((whole, 0, len(letters)),)
        else:
            sym = list(letters)
            span = [[k, k + 1] for k in range(len(sym))]
            if len(sym) > SMALL_WORD:
                self._merge_all(sym, span)
            else:
                self._merge_small(sym, span)
            got = tuple((i, a, b) for i, (a, b) in zip(sym, span) if i >= 0)
        if len(self._cache) >= CACHE_WORDS:
            self._cache.clear()
        self._cache[letters] = got
        return got

    # ---- decoding
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        tokens = []
        for i in ids:
            piece = self.id_to_token(int(i))
            if piece is not None and not (skip_special_tokens and int(i) in self.special):
                tokens.append(piece)
        self._made()
        decoder = self._helper.decoder
        return "".join(tokens) if decoder is None else decoder.decode(tokens)


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
        self.letters = {i: tok.id_to_token(i).encode("utf-8") for i in tok.char_ids.tolist()}

    def find(self, letters: tuple[int, ...]) -> int | None:
        """The id of the piece spelled by these single-character pieces, or None."""
        piece = b"".join(self.letters[i] for i in letters)
        h = hash(piece)
        at = int(np.searchsorted(self.hashes, h))
        tok = self.tok
        while at < len(self.hashes) and self.hashes[at] == h:
            i = int(self.ids[at])
            if tok.present[i] and tok.blob[(int(tok.ends[i - 1]) if i > 0 else 0) : int(tok.ends[i])] == piece:
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
