"""Which tokenizer.json files engine/compact_bpe.py reproduces exactly (its docstring says what it takes):
the check made before a file is held in arrays; any other file goes to the tokenizers library."""

from __future__ import annotations

_BPE_DEFAULTS = {"dropout": None, "continuing_subword_prefix": None, "end_of_word_suffix": None}
_NEWLINE_SPLIT = {"type": "Split", "pattern": {"Regex": "[^\\n]+|[\\n]+"}, "behavior": "Isolated", "invert": False}


def takes(spec: dict) -> bool:
    """Whether compact_bpe reproduces the tokenizer of this parsed tokenizer.json exactly (see its module)."""
    model = spec.get("model") or {}
    if not (set(spec) <= {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                          "post_processor", "decoder", "model"}
            and spec.get("truncation") is None and spec.get("padding") is None
            and model.get("type") == "BPE" and isinstance(model.get("vocab"), dict)
            and isinstance(model.get("merges"), list) and model.get("byte_fallback") is True
            and all(model.get(k) == v for k, v in _BPE_DEFAULTS.items())):  # fmt: skip
        return False
    vocab = model["vocab"]
    if "" in vocab or any(f"<0x{b:02X}>" not in vocab for b in range(256)):
        return False
    for t in spec.get("added_tokens") or []:
        if t.get("normalized") or t.get("lstrip") or t.get("rstrip") or t.get("single_word") or not t["content"]:
            return False
        if vocab.get(t["content"]) != t["id"]:
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
    post = spec.get("post_processor")
    if post is not None:
        if post.get("type") != "TemplateProcessing":
            return False
        items = post["single"]
        if sum("Sequence" in i for i in items) != 1 or not all("Sequence" in i or "SpecialToken" in i for i in items):
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
    added tokens matched on the raw text at their vocabulary ids, no post-processor but a
    TemplateProcessing (the pre-tokenizer and the decoder run as the library runs them)."""
    model = spec.get("model") or {}
    if not (set(spec) <= {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                          "post_processor", "decoder", "model"}
            and spec.get("truncation") is None and spec.get("padding") is None and spec.get("normalizer") is None
            and model.get("type") == "BPE" and isinstance(model.get("vocab"), dict)
            and isinstance(model.get("merges"), list) and not model.get("byte_fallback")
            and model.get("unk_token") is None and not model.get("fuse_unk")
            and set(model) <= {"type", "vocab", "merges", "byte_fallback", "ignore_merges", "unk_token", "fuse_unk",
                               *_BPE_DEFAULTS}
            and all(model.get(k) == v for k, v in _BPE_DEFAULTS.items())):  # fmt: skip
        return False
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        return False
    byte_level = [s for s in steps if s.get("type") == "ByteLevel"]
    if not byte_level or any(s.get("add_prefix_space") for s in byte_level):
        return False
    vocab = model["vocab"]
    if "" in vocab or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in vocab.values()):
        return False
    for t in spec.get("added_tokens") or []:
        stripped = any(t.get(k) for k in ("lstrip", "rstrip", "single_word")) if isinstance(t, dict) else True
        if stripped or not t.get("content"):
            return False
        if vocab.get(t["content"]) != t.get("id"):
            return False
    post = spec.get("post_processor")
    if post is not None:
        if post.get("type") != "TemplateProcessing":
            return False
        items = post["single"]
        if sum("Sequence" in i for i in items) != 1 or not all("Sequence" in i or "SpecialToken" in i for i in items):
            return False
    return True
