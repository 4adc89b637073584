"""From a text file to batches: the tokenizer, the token stream, the split and the two data orders.

    tokens = tokenizer(text)                       # [N] ids
    train, val = tokens[:cut], tokens[cut:]        # the last --val-fraction is held out
    x[b] = train[s_b : s_b + T], y[b] = train[s_b + 1 : s_b + T + 1]   # predict the next token

A character vocabulary is the shipped models' (tools/train.py): `<|endoftext|>` at id 0, `<unk>`
at 1, then every character of the file in code point order, as a BPE model with no merges and a
Fuse decoder, so that tfcli and transformers both read it as one token per character.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import TrainError

EOT, UNK = "<|endoftext|>", "<unk>"
TEXT_BYTES = 1 << 30  # a 1 GB text takes hours per epoch here; past it, say so instead of filling memory
EVAL_BATCHES = 8  # the validation loss is the mean over the same 8 batches at every evaluation


@dataclass
class Tokenizer:
    """The tokenizer a run trains with: its tokenizer.json text, and how to encode and decode."""

    json_text: str
    config: dict | None  # tokenizer_config.json to write beside it (None: copy none)
    _tok: object = None  # a tokenizers.Tokenizer

    def __post_init__(self):
        from tokenizers import Tokenizer as HFTokenizer

        self._tok = HFTokenizer.from_str(self.json_text)
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1
        self.chars = self._char_table(vocab) if self._is_char_level() else None

    @staticmethod
    def _char_table(vocab: dict[str, int]) -> dict[str, int] | None:
        """{character: id} when every piece is one character or a special: such a vocabulary is
        encoded here by a table lookup (the tokenizers library would take the whole text as one word)."""
        singles = {p: i for p, i in vocab.items() if len(p) == 1}
        return singles if len(singles) + 2 >= len(vocab) and EOT in vocab and UNK in vocab else None

    def _is_char_level(self) -> bool:
        """A BPE without merges, normalizer or pre-tokenizer: tools/train.py's and char_tokenizer's."""
        doc = json.loads(self.json_text)
        model = doc.get("model") or {}
        plain = doc.get("normalizer") is None and doc.get("pre_tokenizer") is None
        return model.get("type") == "BPE" and not model.get("merges") and plain

    def encode(self, text: str) -> np.ndarray:
        if self.chars is not None:
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # [N] code points
            table = {ord(c): i for c, i in self.chars.items()}
            keys = np.array(sorted(table), dtype=np.uint32)
            ids = np.array([table[k] for k in keys], dtype=np.int64)
            pos = np.searchsorted(keys, codes).clip(0, len(keys) - 1)  # [N]
            return np.where(keys[pos] == codes, ids[pos], self._tok.token_to_id(UNK))
        return np.array(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


def char_tokenizer(text: str, context: int) -> Tokenizer:
    from tokenizers import AddedToken, decoders, models
    from tokenizers import Tokenizer as HFTokenizer

    vocab = {EOT: 0, UNK: 1} | {c: i + 2 for i, c in enumerate(sorted(set(text)))}
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (EOT, UNK)])
    tok.decoder = decoders.Fuse()  # concatenate the pieces, do not join them with spaces
    return Tokenizer(tok.to_str(), _tokenizer_config(context, UNK))


def bpe_tokenizer(text: str, vocab_size: int, context: int) -> Tokenizer:
    """A byte-level BPE (GPT-2's scheme) of `vocab_size` tokens trained on the text itself."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator([text], trainer)
    return Tokenizer(tok.to_str(), _tokenizer_config(context, None))


def _tokenizer_config(context: int, unk: str | None) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOT,
        "eos_token": EOT,
        **({"unk_token": unk} if unk else {}),
        "model_max_length": context,
        "clean_up_tokenization_spaces": False,  # or transformers would remove spaces before punctuation
    }


def folder_tokenizer(folder: Path) -> Tokenizer:
    """The tokenizer of a model folder (--from, --resume), with its tokenizer_config.json if any."""
    from ..files import TEMPLATE_BYTES, TOKENIZER_BYTES, read_small_text
    from ..errors import TokenizerError

    text = read_small_text(Path(folder) / "tokenizer.json", TOKENIZER_BYTES, TokenizerError)
    cfg_path = Path(folder) / "tokenizer_config.json"
    try:
        cfg = None
        if os.path.lexists(cfg_path):
            cfg = json.loads(read_small_text(cfg_path, TEMPLATE_BYTES, TokenizerError))
    except (ValueError, RecursionError):
        raise TrainError(f"{folder}/tokenizer_config.json is not valid JSON", "re-save the tokenizer") from None
    try:
        return Tokenizer(text, cfg)
    except Exception as e:  # the tokenizers library raises bare Exceptions on a malformed file
        raise TrainError(f"{folder}/tokenizer.json cannot be read ({str(e).splitlines()[0][:80]})",
                         "re-save the tokenizer") from None


def read_text(path: Path) -> tuple[str, str]:
    """A training text and its sha256: a regular UTF-8 file with something in it."""
    from ..files import open_file

    path = Path(path)
    with open_file(path, TrainError, missing=("does not exist", "give a UTF-8 text file to train on")) as f:
        data = f.read(TEXT_BYTES + 1)
    if len(data) > TEXT_BYTES:
        raise TrainError(f"{path} is more than {TEXT_BYTES:,} bytes", "train on a part of it (head -c)")
    if not data.strip():
        raise TrainError(f"{path} is empty" if not data else f"{path} holds only white space",
                         "give a file with some text to train on")
    nul = data.find(b"\x00")
    try:
        if nul >= 0:
            raise UnicodeDecodeError("utf-8", data, nul, nul + 1, "NUL")
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TrainError(f"{path} is not a UTF-8 text file (byte {data[e.start]:#04x} at offset {e.start:,})",
                         "train on text; convert it to UTF-8 first") from None
    return text, hashlib.sha256(data).hexdigest()


@dataclass
class Split:
    train: np.ndarray  # [N_train] token ids
    val: np.ndarray  # [N_val]

    @classmethod
    def of(cls, ids: np.ndarray, val_fraction: float) -> Split:
        cut = int(len(ids) * (1 - val_fraction))
        return cls(ids[:cut], ids[cut:])

    def check(self, path: Path, batch_size: int, seq_len: int, order: str) -> None:
        """Enough tokens for one batch of windows of seq_len + 1 (inputs and the next token)."""
        need = (batch_size * seq_len if order == "sequential" else seq_len) + 1
        if len(self.train) < need:
            raise TrainError(
                f"{path} is too short: its training split is {len(self.train):,} tokens, one batch needs {need:,}",
                "give a longer text, or a smaller --seq-len" + (" or --batch-size" if order == "sequential" else ""),
            )
        if len(self.val) and len(self.val) < seq_len + 1:
            raise TrainError(
                f"{path} is too short: its validation split is {len(self.val):,} tokens, "
                f"one window needs {seq_len + 1:,}",
                "give a longer text, a larger --val-fraction, or --val-fraction 0",
            )


def batch(ids: np.ndarray, step: int, batch_size: int, seq_len: int, order: str, seed: int
          ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Inputs x [B, T] and targets y [B, T] (x shifted by one) for step `step` (0-based).

    random: B windows at random starts, drawn from a generator seeded by (seed, step), so that a
    resumed run sees the batches it would have seen. sequential: sequence b starts at token
    (step * B + b) * T, the windows side by side through the split (wrapping round at its end)."""
    if order == "sequential":
        n_windows = (len(ids) - 1) // seq_len
        starts = (step * batch_size + np.arange(batch_size)) % n_windows * seq_len  # [B]
    else:
        starts = np.random.default_rng([seed, step]).integers(0, len(ids) - seq_len, batch_size)  # [B]
    rows = ids[starts[:, None] + np.arange(seq_len + 1)]  # [B, T+1]
    return rows[:, :-1], rows[:, 1:]


def eval_batches(ids: np.ndarray, batch_size: int, seq_len: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The same EVAL_BATCHES random batches of the validation split at every evaluation, so that
    the curve shows the model changing, not the batches."""
    if len(ids) < seq_len + 1:
        return []
    return [batch(ids, 1_000_000_000 + k, batch_size, seq_len, "random", seed) for k in range(EVAL_BATCHES)]
