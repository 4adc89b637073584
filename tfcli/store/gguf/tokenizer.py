"""A GGUF's vocabulary as Hugging Face tokenizer files: tokenizer.json and tokenizer_config.json.

Three kinds of vocabulary are converted: byte-level BPE (`tokenizer.ggml.model` "gpt2": GPT-2, Llama 3,
SmolLM2, Qwen2), whose text is first split by the regex llama.cpp picks from `tokenizer.ggml.pre`,
SentencePiece BPE ("llama": Llama 2, TinyLlama, Mistral, Gemma 3), whose merges follow from the pieces'
scores, and Gemma 4's BPE on UTF-8 text ("gemma4"). The special tokens the file names (BOS, EOS, ...)
must be tokens of its vocabulary. Each kind gives the ids of llama.cpp's own test vectors
(tests/test_vocab_conformance.py).
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tfcli.engine.errors import GGUFError, shown

from tfcli.engine.gguffile import CORRUPT, GGUFFile
from tfcli.engine.tokenizer import Tokenizer

def vocabulary(g: GGUFFile) -> tuple[list[str], list[int], list[str]]:
    """The file's tokens, their types and the BPE merges, checked to be lists of the right types
    (absent ones are empty; tokenizer_json says when that is a problem)."""
    name = g.path.name
    tokens = g.get("tokenizer.ggml.tokens", [])
    types = g.get("tokenizer.ggml.token_type", None)
    merges = g.get("tokenizer.ggml.merges", [])
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise GGUFError(f"{name}: tokenizer.ggml.tokens is not a list of strings", CORRUPT)
    if types is None:
        types = [_NORMAL] * len(tokens)
    if not isinstance(types, list) or not all(isinstance(t, int) for t in types):
        raise GGUFError(f"{name}: tokenizer.ggml.token_type is not a list of integers", CORRUPT)
    if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
        raise GGUFError(f"{name}: tokenizer.ggml.merges is not a list of strings", CORRUPT)
    return tokens, types, merges


# llama.cpp token types (llama.h `llama_token_type`).
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED = 1, 2, 3, 4

# Tokens llama.cpp ends generation at whatever the file's eos says (llama-vocab.cpp, special_eog_ids):
# a chat model ends a turn with one and a document with another (SmolLM2: <|im_end|> and <|endoftext|>).
_EOG_TEXTS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
              "<EOT>", "<|end_of_text|>")


def end_of_generation_ids(g: GGUFFile) -> list[int]:
    """The file's eos id first, then its end-of-turn id and the other tokens llama.cpp stops at."""
    ids = [g.get(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")]
    tokens, types, _merges = vocabulary(g)
    ids += [i for i, (t, kind) in enumerate(zip(tokens, types)) if kind == _CONTROL and t in _EOG_TEXTS]
    # unique, first occurrence wins
    return list(dict.fromkeys(i for i in ids if isinstance(i, int) and not isinstance(i, bool)))


# The special tokens a file may name: each must be a token of its vocabulary. llama.cpp warns and
# falls back to a default for an id it does not have; a file that contradicts itself is refused here.
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "eot_token_id", "unknown_token_id", "padding_token_id")


def check_special_ids(g: GGUFFile) -> None:
    """Refuse a BOS, EOS (or end-of-turn, unknown, padding) id that is not a token id of the vocabulary."""
    tokens, _types, _merges = vocabulary(g)
    for key in SPECIAL_IDS:
        i = g.get(f"tokenizer.ggml.{key}")
        if i is None:
            continue
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(tokens):
            inside = isinstance(i, int) and not isinstance(i, bool)
            what = f"outside the vocabulary of {len(tokens):,} tokens" if inside else "not a token id"
            raise GGUFError(f"{g.path.name}: tokenizer.ggml.{key} {shown(i)} is {what}",
                            "the file contradicts itself; fetch or convert it again")


# How llama.cpp splits text before BPE, by `tokenizer.ggml.pre` (llama-vocab.cpp, `regex_exprs`), as a
# Hugging Face pre-tokenizer. GPT-2's regex is ByteLevel's own (use_regex); "smollm" and its siblings
# first isolate every digit ("\p{N}"), which is HF's Digits(individual_digits) - the same pipeline as
# SmolLM2's original tokenizer.json. llama.cpp runs a list of regexes one after the other, each
# splitting the pieces the one before left (matches and the text between them both kept): a
# Sequence of Split(Isolated), as the original tokenizer.json files of those models spell it.
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_DIGITS_THEN_GPT2 = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL]}
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2's: Llama 3's with single digits (\p{N}, not \p{N}{1,3}); llama.cpp spells the (?i:...) out
# as character classes, the same language. The pipeline of Qwen2's own tokenizer.json.
_QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5's: Qwen2's with combining marks (\p{M}) kept inside a word.
_QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                 r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"  # llama.cpp's "[一-龥ࠀ-一가-퟿]+"
# DeepSeek LLM's letters and punctuation, as llama-vocab.cpp lists them.
_DEEPSEEK_LETTERS = (
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ"
    r"-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼι"
    r"ῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-"
    r"ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ"
    r"𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"
)
_DEEPSEEK_PUNCTUATION = r"\s?[!-/:-~！-／：-～‘-‟　-。]+"


def _split_then_bytes(*regexes: str) -> dict[str, Any]:
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes]
    return {"type": "Sequence", "pretokenizers": [*splits, dict(_BYTE_LEVEL, use_regex=False)]}


_LLAMA3 = _split_then_bytes(_LLAMA3_REGEX)
_QWEN2, _QWEN35 = _split_then_bytes(_QWEN2_REGEX), _split_then_bytes(_QWEN35_REGEX)
# llama-vocab.cpp's names for the same pipelines (its `tokenizer_pre ==` chains).
_LLAMA3_NAMES = ("llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2")
PRE_TOKENIZERS: dict[str, dict] = {
    "default": _BYTE_LEVEL, "gpt2": _BYTE_LEVEL, "gpt-2": _BYTE_LEVEL,
    "phi-2": _BYTE_LEVEL, "mpt": _BYTE_LEVEL, "olmo": _BYTE_LEVEL,
    "smollm": _DIGITS_THEN_GPT2, "starcoder": _DIGITS_THEN_GPT2,
    "refact": _DIGITS_THEN_GPT2, "codeshell": _DIGITS_THEN_GPT2,
    "command-r": _DIGITS_THEN_GPT2,
    **dict.fromkeys(_LLAMA3_NAMES, _LLAMA3), "smaug-bpe": _LLAMA3, "dbrx": _LLAMA3,
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "stablelm2": _QWEN2, "qwen35": _QWEN35,
    "falcon": _split_then_bytes(r"[\p{P}\$\+<=>\^~\|`]+", _GPT2_REGEX, "[0-9][0-9][0-9]"),
    "deepseek-llm": _split_then_bytes("[\r\n]", _DEEPSEEK_LETTERS, _DEEPSEEK_PUNCTUATION, r"\s+$", _CJK, r"\p{N}+"),
    "deepseek-coder": _split_then_bytes("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"),
}  # fmt: skip
# Pre-tokenizers whose words llama.cpp takes whole when the vocabulary has them, before any merge
# (llama-vocab.cpp `ignore_merges`; tokenizer.json's "ignore_merges"): Llama 3's " Việt" is one token
# though no chain of merges builds it. The same files get a BOS unless they say otherwise.
_WHOLE_WORDS = frozenset(_LLAMA3_NAMES)


def tokenizer_json(g: GGUFFile) -> dict[str, Any]:
    """A Hugging Face tokenizer.json for the file's vocabulary: byte-level BPE (`tokenizer.ggml.model`
    "gpt2": GPT-2, Llama 3, SmolLM2, Qwen2), SentencePiece BPE ("llama": Llama 2, TinyLlama, Mistral,
    Gemma 3) or Gemma 4's BPE on UTF-8 text ("gemma4")."""
    name = g.path.name
    model = g.get("tokenizer.ggml.model")
    if model not in ("gpt2", "llama", "gemma4"):
        hint = ("tfcli converts byte-level BPE ('gpt2') and SentencePiece BPE ('llama') vocabularies, "
                "and Gemma 4's ('gemma4')")
        raise GGUFError(f"{name}: tokenizer model {shown(model)} is not supported", hint)
    tokens, types, merges = vocabulary(g)
    if not tokens or len(types) != len(tokens):
        raise GGUFError(f"{name}: the tokenizer vocabulary is missing or inconsistent",
                        "the file is corrupt or has no tokenizer")
    check_special_ids(g)
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        dup = next(t for t, n in Counter(tokens).items() if n > 1)
        raise GGUFError(f"{name}: token {shown(dup)} appears twice in the vocabulary",
                        "a tokenizer.json vocabulary needs unique tokens")
    special = (_CONTROL, _UNKNOWN) if model == "llama" else (_CONTROL,)
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": kind in special}
        for i, (t, kind) in enumerate(zip(tokens, types))
        if kind in special or kind == _USER_DEFINED
    ]
    if model == "gpt2":
        pre = g.get("tokenizer.ggml.pre", "default")
        if not isinstance(pre, str) or pre not in PRE_TOKENIZERS:
            raise GGUFError(f"{name}: pre-tokenizer {shown(pre)} is not supported",
                            f"tfcli knows: {', '.join(sorted(PRE_TOKENIZERS))}")
        _check_merges(name, merges, vocab)
        normalizer, pre_tokenizer = None, PRE_TOKENIZERS[pre]
        decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        # byte-level pieces never contain a space
        bpe = {"unk_token": None, "fuse_unk": False, "byte_fallback": False, "merges": merges}
        bpe["ignore_merges"] = pre in _WHOLE_WORDS
    elif model == "gemma4":
        # BPE on the UTF-8 text itself (no byte-to-character mapping) with spaces as "\u2581", no
        # space put in front, lines and runs of newlines split apart first; a character outside the
        # vocabulary falls back to its <0xNN> bytes (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_GEMMA4).
        _check_merges(name, merges, vocab)
        normalizer = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
        pre_tokenizer = {"type": "Split", "pattern": {"Regex": "[^\\n]+|[\\n]+"},
                         "behavior": "Isolated", "invert": False}
        steps = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                 {"type": "ByteFallback"}, {"type": "Fuse"}]
        decoder = {"type": "Sequence", "decoders": steps}
        bpe = {"unk_token": None, "fuse_unk": False, "byte_fallback": True, "merges": merges}
    else:
        # SentencePiece: spaces become "▁", and the text gets one in front even when it starts with
        # a space (SentencePiece's add_dummy_prefix, and llama.cpp, which also puts one after each
        # special token: the normalizer runs on each piece of text between them). A character
        # outside the vocabulary falls back to its UTF-8 bytes, the <0xNN> tokens. Decoding undoes all three.
        prefix = g.get("tokenizer.ggml.add_space_prefix", True) is not False
        spaces = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
        prepend = {"type": "Prepend", "prepend": "\u2581"}
        normalizer = {"type": "Sequence", "normalizers": [prepend, spaces]} if prefix else spaces
        pre_tokenizer = None
        steps = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                 {"type": "ByteFallback"}, {"type": "Fuse"}]
        strip = [{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if prefix else []
        decoder = {"type": "Sequence", "decoders": steps + strip}
        unk = g.get("tokenizer.ggml.unknown_token_id")
        bpe = {
            "unk_token": tokens[unk] if isinstance(unk, int) and 0 <= unk < len(tokens) else None,
            "fuse_unk": True,
            "byte_fallback": True,
            "merges": sentencepiece_merges(tokens, _scores(g, len(tokens))),
        }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": _post_processor(g, tokens),  # the BOS (and EOS) llama.cpp adds to a prompt
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "ignore_merges": False, "vocab": vocab, **bpe},
    }


def gguf_tokenizer(g: GGUFFile) -> Tokenizer:
    """The file's tokenizer alone, as tfcli runs it, from any GGUF with a vocabulary: also a
    vocabulary-only file (llama.cpp's models/ggml-vocab-*.gguf, no tensors), which the converter
    refuses as a model."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / g.path.stem / "tokenizer.json"  # errors name the tokenizer after the file
        path.parent.mkdir()
        path.write_text(json.dumps(tokenizer_json(g), ensure_ascii=False), encoding="utf-8")
        return Tokenizer(path)  # read whole here: the folder may go


def _check_merges(name: str, merges: list[str], vocab: dict[str, int]) -> None:
    """A merge is "left right", two tokens of the vocabulary whose concatenation is one too (the
    tokenizers library refuses anything else when it loads the file)."""
    for m in merges:
        left, _, right = m.partition(" ")
        if " " in right or left not in vocab or right not in vocab or left + right not in vocab:
            raise GGUFError(f"{name}: the merge {shown(m)} does not join two tokens of the vocabulary", CORRUPT)


def _scores(g: GGUFFile, n: int) -> list[float]:
    scores = g.get("tokenizer.ggml.scores")
    sized = isinstance(scores, list) and len(scores) == n
    if not sized or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in scores):
        raise GGUFError(f"{g.path.name}: tokenizer.ggml.scores is missing or is not one number per token",
                        "a SentencePiece vocabulary needs its scores")
    return scores


def sentencepiece_merges(tokens: list[str], scores: list[float]) -> list[list[str]]:
    """The BPE merges a SentencePiece vocabulary implies. SentencePiece (and llama.cpp) join, again
    and again, the two neighbours whose union is the piece with the highest score; as BPE merges,
    every way of cutting a piece into two pieces of the vocabulary is a merge, ranked by the score
    of the piece (ties: the longer left part, then the longer right part; then by ids), the order
    transformers derives for the same file."""
    vocab = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for i, piece in enumerate(tokens):
        cuts = sorted((vocab[piece[:c]], vocab[piece[c:]]) for c in range(1, len(piece))
                      if piece[:c] in vocab and piece[c:] in vocab)
        ranked += [(scores[i], tokens[left], tokens[right]) for left, right in cuts]
    ranked.sort(key=lambda m: (m[0], len(m[1]), len(m[2])), reverse=True)  # stable: equal keys keep their order
    return [[left, right] for _, left, right in ranked]


def _adds(g: GGUFFile, flag: str) -> bool:
    """Whether llama.cpp puts the BOS ("add_bos_token") or EOS ("add_eos_token") around a prompt: as
    the file says, and when it does not, a BOS for a SentencePiece vocabulary (older files have no flag)
    and for Llama 3's pre-tokenizer (llama-vocab.cpp sets add_bos with it)."""
    model = g.get("tokenizer.ggml.model")
    if flag == "add_bos_token" and model == "gemma4":
        return True  # llama.cpp overrides a file that says otherwise (llama-vocab.cpp: "workaround for Gemma 4")
    bos_by_default = model == "llama" or (model == "gpt2" and g.get("tokenizer.ggml.pre") in _WHOLE_WORDS)
    default = flag == "add_bos_token" and bos_by_default
    return g.get(f"tokenizer.ggml.{flag}", default) is True


def _post_processor(g: GGUFFile, tokens: list[str]) -> dict[str, Any] | None:
    """The special tokens to put around a prompt, as llama.cpp does when the file says
    tokenizer.ggml.add_bos_token / add_eos_token (Llama 3: a BOS; SmolLM2: nothing)."""
    before, after, special = [], [], {}
    for flag, key, where in (("add_bos_token", "bos_token_id", before), ("add_eos_token", "eos_token_id", after)):
        i = g.get(f"tokenizer.ggml.{key}")
        if _adds(g, flag) and isinstance(i, int) and 0 <= i < len(tokens):
            where.append(tokens[i])
            special[tokens[i]] = {"id": tokens[i], "ids": [i], "tokens": [tokens[i]]}
    if not special:
        return None

    def template(sequence: str, type_id: int) -> list[dict[str, Any]]:
        def mark(t: str) -> dict[str, Any]:
            return {"SpecialToken": {"id": t, "type_id": type_id}}

        middle = {"Sequence": {"id": sequence, "type_id": type_id}}
        return [mark(t) for t in before] + [middle] + [mark(t) for t in after]

    return {"type": "TemplateProcessing", "single": template("A", 0), "pair": template("A", 0) + template("B", 1),
            "special_tokens": special}


def tokenizer_config(g: GGUFFile, config: dict[str, Any]) -> dict[str, Any]:
    """tokenizer_config.json: special tokens, whether to add BOS, and the chat template."""
    tokens, _types, _merges = vocabulary(g)

    def piece(key: str) -> str | None:
        i = g.get(f"tokenizer.ggml.{key}")
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else None

    out = {
        # The generic class: it loads tokenizer.json as written (a model-specific class may rebuild it).
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": piece("bos_token_id"),
        "eos_token": piece("eos_token_id"),
        "unk_token": piece("unknown_token_id"),
        "pad_token": piece("padding_token_id"),
        "add_bos_token": _adds(g, "add_bos_token"),
        "add_eos_token": _adds(g, "add_eos_token"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
    }
    template = g.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise GGUFError(f"{g.path.name}: tokenizer.chat_template is not a string", CORRUPT)
    if template:
        out["chat_template"] = template
    return out

