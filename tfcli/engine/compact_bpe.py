"""A SentencePiece-style BPE tokenizer held in arrays: the same ids and text as the tokenizers
library's for the tokenizer.json files it takes, in a fraction of the memory.

Why: the library keeps a large vocabulary as two hash maps of Rust strings plus a map of merges:
Gemma 3's 262,144 tokens and 514,847 merges hold 72 MB, more than a quarter of its 253 MB GGUF
file. Here the pieces are one UTF-8 blob with offsets, the merges three int arrays sorted by their
pair (left id << 32 | right id) for a binary search: about 14 MB.

What it takes (anything else returns None from `compact_bpe`, and the library parses the file):
a BPE model on characters with byte fallback (no subword prefix, suffix or dropout); normalizers
Prepend and Replace of plain strings (Llama 2's "▁" and Gemma's spaces); no pre-tokenizer, or
Gemma 4's Split of newline runs; added tokens matched on the raw text (normalized false, no
lstrip, rstrip or single_word), each at its vocabulary id; a TemplateProcessing post-processor;
decoders Replace, ByteFallback, Fuse and Strip. Each step follows the library's Rust code (0.23:
models/bpe/model.rs merge_word, bpe/word.rs merge_all, added_vocabulary.rs, decoders/*.rs);
tests/test_tokenizer_compact.py holds the ids and the text equal to the library's.
"""

from __future__ import annotations

import heapq
from array import array
import json
import re
from dataclasses import dataclass

import numpy as np

from .compact_kinds import takes

CACHE_WORDS = 10_000  # words' tokens kept (as the library's BPE cache)
CACHE_PAIRS = 50_000  # merges looked up and kept (about 5 MB at most)
SMALL_WORD = 48  # symbols: up to this many, merged by looking over the pairs; more, with a heap
_BYTE_PIECE = re.compile(r"<0x(\+?[0-9A-Fa-f]{1,2})>")  # Rust's u8::from_str_radix(.., 16) on 2 characters


@dataclass
class Encoding:
    """What the library's Encoding gives that tfcli reads: ids, and each token's (start, end) in characters."""

    ids: list[int]
    offsets: list[tuple[int, int]]


@dataclass
class Added:
    """An added token as get_added_tokens_decoder() gives it (tfcli reads .special and .content)."""

    content: str
    special: bool


class CompactBPE:
    """The subset of tokenizers.Tokenizer that engine/tokenizer.py calls: encode, decode,
    id_to_token, token_to_id, get_added_tokens_decoder; and vocab_size, longest_piece."""

    def __init__(self, spec: dict):
        model = spec["model"]
        vocab: dict[str, int] = model["vocab"]
        added = spec.get("added_tokens") or []
        n = max([*vocab.values(), *(t["id"] for t in added)], default=-1) + 1
        pieces = [""] * n
        present = np.zeros(n, dtype=bool)  # [V] ids with a piece (a vocabulary may have gaps)
        for piece, i in vocab.items():
            pieces[i] = piece
            present[i] = True
        self.vocab_size, self.present = n, present
        self.longest_piece = max(map(len, pieces), default=1)
        encoded = [p.encode("utf-8") for p in pieces]
        self.blob = b"".join(encoded)  # every piece's UTF-8, in id order
        # [V] the byte offset after each piece
        self.ends = np.cumsum([len(b) for b in encoded], dtype=np.int64).astype(np.int32)
        del encoded
        self.char_ids = np.array([i for p, i in vocab.items() if len(p) == 1], dtype=np.int32)  # [C]
        byte_ids = [vocab.get(f"<0x{b:02X}>") for b in range(256)]
        self.byte_ids = [int(i) for i in byte_ids] if all(i is not None for i in byte_ids) else None
        self.ignore_merges = bool(model.get("ignore_merges"))
        del pieces

        # merges: the library's new token is left + right, its rank the merge's index; a pair listed
        # twice keeps its last rank (a Rust HashMap collected from the list)
        left, right, new = [], [], []
        joins = set()  # characters a merge joins to a following "▁" (_pieces)
        for m in model["merges"]:
            a, b = m if isinstance(m, list) else m.split(" ", 1)
            if b[:1] == "▁" and a[-1:] != "▁":
                joins.add(a[-1:])
            left.append(vocab[a])
            right.append(vocab[b])
            new.append(vocab[a + b])
        keys = (np.array(left, dtype=np.int64) << 32) | np.array(right, dtype=np.int64)  # [M]
        del left, right
        last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]  # each pair's last index, by pair
        self.keys = keys[last]  # [M'] sorted
        self.ranks = last.astype(np.int32)  # [M']
        self.new = np.array(new, dtype=np.int32)[last]  # [M']
        del keys, new, last

        self.added_ids = np.array([t["id"] for t in added], dtype=np.int32)  # [A]
        self.special = {int(t["id"]) for t in added if t["special"]}

        norm = spec.get("normalizer")
        steps = (norm["normalizers"] if norm["type"] == "Sequence" else [norm]) if norm else []
        self.normalizers = [
            (s["type"], s.get("prepend"), s.get("pattern", {}).get("String"), s.get("content")) for s in steps
        ]
        self.split_newlines = spec.get("pre_tokenizer") is not None
        post = spec.get("post_processor")
        self.template = []  # ids before and after the sequence when special tokens are added
        if post:
            for item in post["single"]:
                if "Sequence" in item:
                    self.template.append(None)
                else:
                    self.template.extend(post["special_tokens"][item["SpecialToken"]["id"]]["ids"])
        dec = spec.get("decoder")
        self.decoders = json.loads(json.dumps((dec["decoders"] if dec["type"] == "Sequence" else [dec]) if dec else []))
        self.normalizers = json.loads(json.dumps(self.normalizers))
        self.joins = "".join(sorted(joins))
        self._lookups = None
        self._cache: dict[str, tuple] = {}
        self._pairs: dict[int, tuple[int, int] | None] = {}

    def _made(self):
        """The dictionaries encoding needs, made on first use from the arrays: their strings are then
        fresh ones, not the JSON parse's, whose scattered survivors would keep its heap resident."""
        if self._lookups is None:
            chars = _Chars(self._tokens(self.char_ids), self.char_ids.tolist())  # the word's first symbols
            added = dict(zip(self._tokens(self.added_ids), self.added_ids.tolist()))
            prefixes = {t[:k] for t in added for k in range(1, len(t))}  # grown through in _split_added
            firsts = "".join(sorted({t[0] for t in added}))
            first = re.compile("[" + re.escape(firsts) + "]") if firsts else None
            self._lookups = chars, added, prefixes, first
        return self._lookups

    # ---- the vocabulary
    def _tokens(self, ids: np.ndarray) -> list[str]:
        """The pieces of ids [n] (each present)."""
        ends = self.ends[ids].tolist()
        starts = np.where(ids > 0, self.ends[ids - 1], 0).tolist()
        blob = self.blob
        return [blob[a:b].decode("utf-8") for a, b in zip(starts, ends)]

    def _piece_bytes(self, i: int) -> bytes:
        """Piece i's UTF-8 bytes in the blob (b"" for an id without a piece)."""
        return self.blob[(int(self.ends[i - 1]) if i > 0 else 0) : int(self.ends[i])]

    def id_to_token(self, i: int) -> str | None:
        if not 0 <= i < self.vocab_size or not self.present[i]:
            return None
        return self._piece_bytes(i).decode("utf-8")

    def token_to_id(self, piece: str) -> int | None:
        """The id of a piece: an added token's or a character's from their lookups, any other's found
        in the blob (a few calls per run: no hash table of 262,144 pieces kept for them)."""
        chars, added = self._made()[:2]
        if piece in added:
            return added[piece]
        if len(piece) <= 1:
            return chars.get(piece) if piece else None
        b = piece.encode("utf-8")
        at = self.blob.find(b)
        while at >= 0:
            i = int(self.ends.searchsorted(at, side="right"))  # the piece whose bytes hold byte `at`
            if (int(self.ends[i - 1]) if i > 0 else 0) == at and int(self.ends[i]) == at + len(b) and self.present[i]:
                return i
            at = self.blob.find(b, at + 1)
        return None

    def get_added_tokens_decoder(self) -> dict[int, Added]:
        return {i: Added(t, i in self.special) for t, i in self._made()[1].items()}

    # ---- encoding
    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for start, end, added_id in self._split_added(text):
            if added_id is not None:
                ids.append(added_id)
                offsets.append((start, end))
                continue
            self._segment(text, start, end, ids, offsets)
        if add_special_tokens and self.template:
            at = self.template.index(None) if None in self.template else len(self.template)
            before, after = self.template[:at], self.template[at + 1 :]
            ids = before + ids + after
            offsets = [(0, 0)] * len(before) + offsets + [(0, 0)] * len(after)
        return Encoding(ids, offsets)

    def _segment(self, text: str, start: int, end: int, ids: list, offsets: list) -> None:
        """The tokens of text[start:end], a span between added tokens, appended to ids and offsets."""
        for a, b, word in self._words(text[start:end]):
            self._tokenize(word, start + a, start, ids, offsets)

    def _split_added(self, text: str):
        """(start, end, id or None) spans of text: the added tokens, leftmost-longest (the library's
        Aho-Corasick match on the raw text), and the text between them."""
        _, added, prefixes, first = self._made()
        at, pos = 0, 0
        while first is not None:
            m = first.search(text, pos)
            if m is None:
                break
            i = m.start()
            length, k = 0, 1
            while i + k <= len(text):
                if text[i : i + k] in added:
                    length = k
                if text[i : i + k] not in prefixes:
                    break
                k += 1
            if not length:
                pos = i + 1
                continue
            if i > at:
                yield at, i, None
            yield i, i + length, added[text[i : i + length]]
            at = pos = i + length
        if at < len(text):
            yield at, len(text), None

    def _words(self, segment: str):
        """(start, end, normalized word) for each word of a segment between added tokens; start and
        end in the segment's characters (the word's characters map one to one, after a prepended one)."""
        word, shift = segment, 0
        for kind, prepend, pattern, content in self.normalizers:
            if kind == "Prepend":
                if word:
                    word, shift = prepend + word, shift + len(prepend)
            else:
                word = word.replace(pattern, content)
        if not self.split_newlines:
            if word:
                yield -shift, len(segment), word
            return
        for m in re.finditer(r"[^\n]+|\n+", word):
            yield m.start() - shift, m.end() - shift, m.group()

    def _tokenize(self, word: str, first: int, floor: int, ids: list, offsets: list) -> None:
        """The BPE of one normalized word (merge_word, then merge_all), appended to ids and offsets.
        The word's characters start at `first` in the text; a prepended one, before its segment's
        start `floor`, counts as the segment's first character (the library aligns it so)."""
        if self.ignore_merges:
            i = self.token_to_id(word)
            if i is not None:
                ids.append(i)
                offsets.append((max(first, floor), max(first + len(word) - 1, floor) + 1))
                return
        cache = self._cache
        for at, piece in self._pieces(word):
            got = cache.get(piece)
            if got is None:
                got = self._bpe(piece)
                if len(cache) >= CACHE_WORDS:
                    cache.clear()
                cache[piece] = got
            base = first + at
            if base >= floor:
                ids.extend(i for i, _, _ in got)
                offsets.extend((base + a, base + b) for _, a, b in got)
                continue
            for i, a, b in got:
                ids.append(i)
                offsets.append((max(base + a, floor), max(base + b - 1, floor) + 1))

    def _pieces(self, word: str):
        """(start, piece) of a word cut before each "▁" that no merge can join to what precedes it
        (no merge (a, b) has b starting with it and a ending with the character before, a byte's
        piece ending in ">"): the BPE of the pieces is the word's, and pieces repeat (a cache)."""
        chars, cut = self._made()[0], 0
        i = word.find("▁", 1)
        while i > 0:
            c = word[i - 1]
            if c != "▁" and c not in self.joins and (c in chars or ">" not in self.joins):
                yield cut, word[cut:i]
                cut = i
            i = word.find("▁", i + 1)
        yield cut, word[cut:]

    def _bpe(self, word: str) -> tuple[tuple[int, int, int], ...]:
        """(id, first, end) of each token of a word: its characters' ids, or their bytes' where the
        vocabulary lacks the character (byte_fallback; _takes asks for all 256, so no unknown is
        ever needed), then merged."""
        chars = self._made()[0]
        sym: list[int] = []  # symbol ids
        span: list[list[int]] = []  # each symbol's [first, last + 1] character of the word
        for j, ch in enumerate(word):
            i = chars.get(ch)
            if i is not None:
                sym.append(i)
                span.append([j, j + 1])
            else:
                for b in ch.encode("utf-8"):
                    sym.append(self.byte_ids[b])
                    span.append([j, j + 1])
        if len(sym) > SMALL_WORD:
            self._merge_all(sym, span)
        elif len(sym) > 1:
            self._merge_small(sym, span)
        return tuple((i, a, b) for i, (a, b) in zip(sym, span) if i >= 0)

    def _pair(self, a: int, b: int) -> tuple[int, int] | None:
        """(rank, new id) of the merge of a and b, or None."""
        key = (a << 32) | b
        got = self._pairs.get(key, False)
        if got is False:
            at = int(self.keys.searchsorted(key))
            got = (int(self.ranks[at]), int(self.new[at])) if at < len(self.keys) and self.keys[at] == key else None
            if len(self._pairs) >= CACHE_PAIRS:
                self._pairs.clear()
            self._pairs[key] = got
        return got

    def _merge_small(self, sym: list[int], span: list[list[int]]) -> None:
        """merge_all for a short word: the lowest rank, then the leftmost, is the heap's order; here
        found by a look over the pairs (no heap to build). In place."""
        pair = self._pair
        ranks = [pair(sym[j], sym[j + 1]) for j in range(len(sym) - 1)]
        while True:
            best = -1
            for j, r in enumerate(ranks):
                if r is not None and (best < 0 or r[0] < ranks[best][0]):
                    best = j
            if best < 0:
                return
            sym[best] = ranks[best][1]
            span[best] = [span[best][0], span[best + 1][1]]
            del sym[best + 1], span[best + 1], ranks[best]
            if best < len(sym) - 1:
                ranks[best] = pair(sym[best], sym[best + 1])
            if best > 0:
                ranks[best - 1] = pair(sym[best - 1], sym[best])

    def _merge_all(self, sym: list[int], span: list[list[int]]) -> None:
        """word.rs merge_all: merges popped lowest rank first, then leftmost; a merged-away symbol
        becomes -1. In place."""
        n = len(sym)
        ids = np.array(sym, dtype=np.int64)
        ranks, news = self._lookup((ids[:-1] << 32) | ids[1:])
        heap = [(int(ranks[p]), p, int(news[p])) for p in np.flatnonzero(ranks >= 0)]
        heapq.heapify(heap)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        pair = self._pair
        while heap:
            rank, p, new = heapq.heappop(heap)
            q = nxt[p]
            if sym[p] < 0 or q < 0:
                continue
            now = pair(sym[p], sym[q])
            if now is None or now[1] != new:
                continue
            sym[p], sym[q] = new, -1
            span[p][1] = span[q][1]
            nxt[p] = nxt[q]
            if nxt[q] >= 0:
                prev[nxt[q]] = p
            if prev[p] >= 0:
                got = pair(sym[prev[p]], new)
                if got is not None:
                    heapq.heappush(heap, (got[0], prev[p], got[1]))
            if nxt[p] >= 0:
                got = pair(new, sym[nxt[p]])
                if got is not None:
                    heapq.heappush(heap, (got[0], p, got[1]))

    def _lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rank and new id of each pair key [n] (rank -1 where the pair is no merge)."""
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)  # [n]
        hit = self.keys[at] == keys  # [n]
        return np.where(hit, self.ranks[at], -1), self.new[at]

    # ---- decoding
    def _pieces_of(self, ids: list[int], skip_special_tokens: bool) -> list[str]:
        """The pieces of ids, an unknown id's left out, a special token's too when asked."""
        tokens = []
        for i in ids:
            piece = self.id_to_token(int(i))
            if piece is not None and not (skip_special_tokens and int(i) in self.special):
                tokens.append(piece)
        return tokens

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        tokens = self._pieces_of(ids, skip_special_tokens)
        for d in self.decoders:
            kind = d["type"]
            if kind == "Replace":
                tokens = [t.replace(d["pattern"]["String"], d["content"]) for t in tokens]
            elif kind == "ByteFallback":
                tokens = _byte_fallback(tokens)
            elif kind == "Fuse":
                tokens = ["".join(tokens)]
            else:  # Strip: up to `start` leading and `stop` trailing `content` characters of each token
                tokens = [_strip(t, d["content"], d["start"], d["stop"]) for t in tokens]
        return "".join(tokens)


class _Chars:
    """The ids of single-character pieces: a table over the Basic Multilingual Plane (256 KB, where a
    dict of Gemma 3's 19,227 took 1.8 MB), a dict for the characters above it."""

    def __init__(self, pieces: list[str], ids: list[int]):
        self.table = array("i", [-1]) * 65536
        self.rest = {}
        for p, i in zip(pieces, ids):
            if ord(p) < 65536:
                self.table[ord(p)] = i
            else:
                self.rest[p] = i

    def get(self, ch: str) -> int | None:
        o = ord(ch)
        if o < 65536:
            i = self.table[o]
            return i if i >= 0 else None
        return self.rest.get(ch)

    def __contains__(self, ch: str) -> bool:
        return self.get(ch) is not None


def _byte_fallback(tokens: list[str]) -> list[str]:
    """decoders/byte_fallback.rs: runs of <0xXX> pieces become their UTF-8 text, or one U+FFFD per
    byte when they are not valid UTF-8."""
    out: list[str] = []
    run = bytearray()
    for t in tokens:
        m = _BYTE_PIECE.fullmatch(t) if len(t.encode("utf-8")) == 6 else None
        if m is not None:
            run.append(int(m.group(1), 16))
            continue
        _flush(run, out)
        out.append(t)
    _flush(run, out)
    return out


def _flush(run: bytearray, out: list[str]) -> None:
    if run:
        try:
            out.append(run.decode("utf-8"))
        except UnicodeDecodeError:
            out.extend("\ufffd" * len(run))
        run.clear()


def _strip(token: str, content: str, start: int, stop: int) -> str:
    a = 0
    while a < min(start, len(token)) and token[a] == content:
        a += 1
    b = len(token)
    while len(token) - b < stop and b > a and token[b - 1] == content:
        b -= 1
    return token[a:b]


def afresh(tok: CompactBPE) -> bytes:
    """tok's state as bytes, for `revived` once the JSON parse it was built from is gone: objects made
    while the parse lived sit among its freed ones and keep their allocator's arenas resident
    (Gemma 3: 8 MB)."""
    import pickle

    return pickle.dumps(tok, protocol=pickle.HIGHEST_PROTOCOL)


def revived(state: bytes) -> CompactBPE:
    import pickle

    tok = pickle.loads(state)
    tok._made()  # while loading, not in the first prompt's time
    return tok


def compact_bpe(spec: dict) -> CompactBPE | None:
    """The tokenizer of a parsed tokenizer.json in arrays, or None when it is not of the kind this
    module reproduces exactly (byte-level ones: compact_bytes; else the library builds it)."""
    try:
        if not takes(spec):
            return None
        return CompactBPE(spec)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
