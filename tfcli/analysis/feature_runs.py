"""Where `tfcli features train` gets its vectors: a model reading a text (piece by piece: neither
the text, its tokens nor its vectors are ever held whole), or an [N, D] array given directly; and the
steps the command and tfcli.train_features share: the checks, a training's start, its save."""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfcli.engine.errors import UsageError
from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.train import TrainError

from .features import activations

PIECE = 1 << 20  # bytes of text tokenized at a time
HELDOUT_TOKENS = 8_192  # the held-out text measured at the end: three scored passes of it take a few seconds


@dataclass
class Source:
    """Vectors to train on, as a function that starts a pass over them, and what is held out."""

    start: Callable[[], Iterator[np.ndarray]]  # a pass: blocks of vectors [rows, D]
    d: int
    heldout: np.ndarray  # token ids [T] (a text) or vectors [R, D] (an array)
    describe: str


def check_text(path: Path) -> int:
    """A text file's size, refused in one line unless it is a non-empty UTF-8 file."""
    from tfcli.engine.files import open_regular

    fd = open_regular(Path(path), TrainError)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(PIECE)
    if not head.strip():
        raise TrainError(f"{path} is empty" if not head else f"{path} holds only white space",
                         "give a file with some text")
    try:
        if b"\x00" in head:
            raise UnicodeDecodeError("utf-8", head, head.index(b"\x00"), head.index(b"\x00") + 1, "NUL")
        # a character cut at the end is fine
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < PIECE)
    except UnicodeDecodeError as e:
        raise TrainError(f"{path} is not a UTF-8 text file (byte {head[e.start]:#04x} at offset {e.start:,})",
                         "convert it to UTF-8 first") from None
    return size


def text_pieces(path: Path, start: int, end: int) -> Iterator[str]:
    """The text between byte offsets start and end, in pieces that end at a line's end."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    carry = ""
    from tfcli.engine.files import open_file

    with open_file(Path(path), TrainError) as f:
        f.seek(start)
        left = end - start
        while left > 0:
            data = f.read(min(PIECE, left))
            if not data:
                break
            left -= len(data)
            text = carry + decoder.decode(data, final=left <= 0)
            cut = text.rfind("\n") + 1 if left > 0 else len(text)
            carry = text[cut:] if cut else ""
            if cut:
                yield text[:cut]
            elif len(carry) > PIECE:  # no line end in a whole piece: cut anywhere
                yield carry
                carry = ""
    if carry:
        yield carry


def token_windows(tokenizer, path: Path, start: int, end: int, window: int) -> Iterator[np.ndarray]:
    """Token ids [window] (the last one shorter), the text tokenized piece by piece."""
    ids: list[int] = []
    for piece in text_pieces(path, start, end):
        ids.extend(tokenizer.encode(piece))
        while len(ids) >= window:
            yield np.array(ids[:window])
            del ids[:window]
    if len(ids) > 1:
        yield np.array(ids)


def text_source(lm, path: Path, block: int, site: str, val_fraction: float, window: int, run: Plain = PLAIN) -> Source:
    """The model's vectors at (block, site) over the first 1 - val_fraction of the text; the start
    of the rest (HELDOUT_TOKENS at most) held out for the quality measures. `run`: the passes'
    executor."""
    size = check_text(path)
    cut = int(size * (1 - val_fraction))
    model, tok = lm.model, lm.tokenizer

    def start() -> Iterator[np.ndarray]:
        for w in token_windows(tok, path, 0, cut, window):
            if len(w) > 1:
                yield from activations(model, w, block, site, window, run)

    held: list[int] = []
    for w in token_windows(tok, path, cut, size, window):
        held.extend(int(i) for i in w)
        if len(held) >= HELDOUT_TOKENS:
            break
    what = f"{lm.name}, block {block}, {site}, windows of {window} tokens of {Path(path).name}"
    return Source(start, model.config.d_model, np.array(held[:HELDOUT_TOKENS], dtype=np.int64), what)


def array_source(path: Path, val_fraction: float, limit: int) -> Source:
    """--activations FILE.npy: [N, D] vectors, memory-mapped; the last val_fraction held out."""
    from tfcli.engine.npyfile import open_npy

    x = open_npy(Path(path), UsageError, limit)
    n, d = x.shape
    cut = max(1, int(n * (1 - val_fraction)))
    chunk = max(1, (1 << 22) // max(d, 1))  # 16 MB of float32 a block

    def start() -> Iterator[np.ndarray]:
        for a in range(0, cut, chunk):
            block = np.asarray(x[a : min(cut, a + chunk)], dtype=np.float32)  # [rows, D]
            if not np.isfinite(block).all():
                raise UsageError(f"{path} holds NaN or infinite values (rows {a:,} to {min(cut, a + chunk):,})",
                                 "give finite vectors")
            yield block

    held = np.asarray(x[cut : cut + 65_536], dtype=np.float32)
    return Source(start, d, held, f"{n:,} vectors of width {d} from {Path(path).name}")


def array_quality(sae, x: np.ndarray) -> dict:
    """mse, explained variance, L0 and dead features of an SAE on vectors x [R, D]."""
    if not len(x):
        return {}
    f = sae.encode(x)  # [R, N]
    err = sae.decode(f) - x  # [R, D]
    sq = float(np.vdot(err, err))
    var = float(((x - x.mean(axis=0)) ** 2).sum())
    return {"tokens": len(x), "mse": sq / x.size, "explained_variance": 1 - sq / var if var > 0 else float("nan"),
            "l0": float((f > 0).sum()) / len(x), "dead_features": float(1 - (f > 0).any(axis=0).mean())}  # fmt: skip


def save_training(folder: Path, trainer, lm, block: int | None, site: str, source, seconds: float, data: str,
                  run) -> dict:
    """Write a finished training's SAE folder (weights, config and the record of how it was trained),
    as `features train` and tfcli.train_features both save it; -> the quality measures on the held-out
    rows (on `run`, the executor of the model's passes; vectors without a model need none)."""
    import dataclasses

    from tfcli.engine.identity import identity_of
    from tfcli.engine.train.sae import SAE
    from tfcli.engine.train.saefolder import sae_config, write_sae

    from .features import WINDOW, Features, quality

    s = trainer.s
    params = trainer.export()
    sae = SAE(params, s.kind, s.k)
    window = min(WINDOW, lm.config.n_ctx) if lm else 0
    if lm is not None:
        q = (
            quality(lm.model, Features(folder, {}, sae, block, site), source.heldout, window, run)
            if len(source.heldout) > 1
            else {}
        )
    else:
        q = array_quality(sae, source.heldout)
    t = {
        "model_hash": identity_of(lm) if lm else None,
        "block": block,
        "site": site,
        "kind": s.kind,
        "k": s.k if s.kind == "topk" else None,
        "data": data,
        "settings": dataclasses.asdict(s),
        "scale": trainer.scale,
        "steps": trainer.step,
        "seconds": round(seconds, 2),
        "quality": q,
    }
    cfg = sae_config(source.d, s.n, s.kind, s.k, lm.name if lm else "(vectors)", block, site, window, t)
    write_sae(folder, params, cfg)
    return q


def check_folder(folder: Path, force: bool, force_hint: str) -> None:
    """The SAE's folder: new, empty, or written into with force (`force_hint`: how the caller says it)."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} is a file, not a folder", "give a folder for the SAE")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise UsageError(
            f"{folder} already exists and is not empty", f"give a new folder, or {force_hint} to write into it"
        )


def check_training(s, buffer: int, d: int, named: Callable[[str], str], hint: str) -> None:
    """The ranges a training's settings (engine/train/sae.py's Settings) must be in, then the memory it
    needs: one UsageError naming a setting as the caller spells it (`named("batch_size")`: "--batch-size"
    for `features train`, "batch_size" for tfcli.train_features; `hint` may say {name})."""
    import math

    from tfcli.engine.memory import check_allocation

    from .features import training_bytes

    checks = (
        ("kind", s.kind, s.kind in ("relu", "topk")),
        ("lr", s.lr, 0 < s.lr < 10),
        ("eps", s.eps, 0 < s.eps < 1),
        ("l1", s.l1, 0 <= s.l1 < 1e6),
        ("clip", s.clip, s.clip >= 0),
        ("weight_decay", s.weight_decay, 0 <= s.weight_decay < 1e3),
        ("warmup", s.warmup, 0 <= s.warmup <= 1 << 24),
        ("batch_size", s.batch_size, 1 <= s.batch_size <= 1 << 20),
        ("steps", s.steps, 1 <= s.steps <= 1 << 30),
        ("buffer", buffer, s.batch_size <= buffer <= 1 << 30),
        ("k", s.k, s.kind == "relu" or 1 <= s.k <= s.n),
        ("lr_schedule", s.lr_schedule, s.lr_schedule in ("constant", "cosine")),
        ("betas", s.betas, len(s.betas) == 2 and all(0 <= b < 1 for b in s.betas)),
    )
    for field, value, ok in checks:
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            shown = repr(value) if isinstance(value, str) else value
            at_least = f" (at least {named('batch_size')})" if field == "buffer" else ""
            raise UsageError(f"{named(field)} {shown} is out of range", hint.format(name=named(field)) + at_least)
    check_allocation(
        training_bytes(d, s.n, s.batch_size, buffer),
        f"an SAE of {s.n:,} features on width {d} (batch {s.batch_size:,}, buffer {buffer:,})",
        f"use fewer {named('features')}, a smaller {named('batch_size')} or {named('buffer')}",
    )


def first_batch(s, source: Source, buffer_rows: int):
    """A training's start, as the command and the API take it: the shuffled buffer filled, one batch
    checked to fit in what the source gives, the trainer made on the first rows -> (buffer, trainer)."""
    from tfcli.engine.train.sae import Trainer

    from .features import Buffer

    buf = Buffer(source.start, buffer_rows, s.batch_size, s.seed)
    first = buf.fill()
    buf.check()  # one batch fits in what the text gives, before the first step
    return buf, Trainer(s, first)
