"""Which tokenizer.json files engine/compact_bpe.py and compact_bytes.py reproduce exactly (their
docstrings say what they take): the checks made before a file is held in arrays; any other file goes
to the tokenizers library."""

from __future__ import annotations

_BPE_DEFAULTS = {"dropout": None, "continuing_subword_prefix": None, "end_of_word_suffix": None}
_NEWLINE_SPLIT = {"type": "Split", "pattern": {"Regex": "[^\\n]+|[\\n]+"}, "behavior": "Isolated", "invert": False}
_TOP = {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder",
        "model"}  # fmt: skip


def _plain_bpe(spec: dict, byte_fallback: bool) -> bool:
    """A BPE model of a vocabulary and merges, without dropout, a subword prefix or suffix, truncation or
    padding; with byte fallback or without it (and then without an unknown token); a template or no
    post-processor; each added token at its vocabulary id."""
    model = spec.get("model") or {}
    if not (set(spec) <= _TOP and spec.get("truncation") is None and spec.get("padding") is None
            and model.get("type") == "BPE" and isinstance(model.get("vocab"), dict)
            and isinstance(model.get("merges"), list) and bool(model.get("byte_fallback")) == byte_fallback
            and all(model.get(k) == v for k, v in _BPE_DEFAULTS.items())):  # fmt: skip
        return False
    if not byte_fallback and (model.get("unk_token") is not None or model.get("fuse_unk")):
        return False
    vocab = model["vocab"]
    if "" in vocab:
        return False
    for t in spec.get("added_tokens") or []:
        stripped = any(t.get(k) for k in ("lstrip", "rstrip", "single_word")) if isinstance(t, dict) else True
        if stripped or not t.get("content") or vocab.get(t["content"]) != t.get("id"):
            return False
    post = spec.get("post_processor")
    if post is not None:
        if post.get("type") != "TemplateProcessing":
            return False
        items = post["single"]
        if sum("Sequence" in i for i in items) != 1 or not all("Sequence" in i or "SpecialToken" in i for i in items):
            return False
    return True


def takes(spec: dict) -> bool:
    """Whether compact_bpe reproduces the tokenizer of this parsed tokenizer.json exactly (see its module)."""
    if not _plain_bpe(spec, byte_fallback=True):
        return False
    vocab = spec["model"]["vocab"]
    if any(f"<0x{b:02X}>" not in vocab for b in range(256)):
        return False
    if any(t.get("normalized") for t in spec.get("added_tokens") or []):
        return False
    norm = spec.get("normalizer")
    steps = (norm.get("normalizers") if norm.get("type") == "Sequence" else [norm]) if norm else []
    for s in steps or []:
        # one character for one: a token's offsets are its characters' own
        if not (s.get("type") == "Prepend" and isinstance(s.get("prepend"), str)
                or s.get("type") == "Replace" and isinstance(s.get("pattern", {}).get("String"), str)
                and len(s["pattern"]["String"]) == 1
                and isinstance(s.get("content"), str) and len(s["content"]) == 1):  # fmt: skip
            return False
    if spec.get("pre_tokenizer") not in (None, _NEWLINE_SPLIT):
        return False
    dec = spec.get("decoder")
    steps = (dec.get("decoders") if dec.get("type") == "Sequence" else [dec]) if dec else []
    for d in steps or []:
        kind = d.get("type")
        if kind == "Replace" and isinstance(d.get("pattern", {}).get("String"), str) and d["pattern"]["String"]:
            continue
        if kind in ("ByteFallback", "Fuse"):
            continue
        if kind == "Strip" and len(d.get("content", "")) == 1:
            continue
        return False
    return True


def takes_bytes(spec: dict) -> bool:
    """Whether compact_bytes reproduces the tokenizer of this parsed tokenizer.json exactly: a byte-level
    BPE (a ByteLevel pre-tokenizer without a prefix space, alone or in a Sequence), no normalizer, its
    added tokens matched on the raw text (the pre-tokenizer and the decoder run as the library runs them)."""
    if not _plain_bpe(spec, byte_fallback=False) or spec.get("normalizer") is not None:
        return False
    model = spec["model"]
    if not set(model) <= {"type", "vocab", "merges", "byte_fallback", "ignore_merges", "unk_token", "fuse_unk",
                          *_BPE_DEFAULTS}:  # fmt: skip
        return False
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in model["vocab"].values()):
        return False
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        return False
    byte_level = [s for s in steps if s.get("type") == "ByteLevel"]
    return bool(byte_level) and not any(s.get("add_prefix_space") for s in byte_level)
