"""The JSON shapes: one shape for one thing, whichever command prints it or result saves it.

`tfcli ... --json` prints these documents (cli/json.py's emit) and the Python API's `.save("x.json")`
writes them (api/result.py); neither the API nor the drawings import the command line's layer, so
the shapes live here, beside numbers.py and output.py.

- a model's shape is `model_shape(cfg)`, the object `tfcli params` has always printed (the keys of
  analysis/params/shape.py's shape_dict: sizes, traits, d_attn and d_kv);
- a token is `token(tokenizer, id)`: {"id", "text"} and, where the bytes matter, "bytes" (the
  token's UTF-8 bytes in hex, as `tfcli tokenize` shows them);
- every document names its model (`"model": NAME` at the top);
- floats are rounded to what they mean (`rounded`): a probability printed as 0.20000000298023224
  is float32 noise, not information. A float32 value (attention weights, probabilities from NumPy)
  is printed as the shortest decimal that reads back as the same float32 (0.2, 0.16666667): what
  it holds, no more and no less; figures worked out in Python (speeds, seconds, ratios) keep
  SIGNIFICANT digits.

No NumPy import at the top: callers pass NumPy values, which are converted by duck typing.
"""

from __future__ import annotations

import functools
import math
from typing import Any

SIGNIFICANT = 4  # digits kept of a Python float: log-probabilities, speeds, seconds, ratios


def model_shape(cfg) -> dict[str, Any]:
    """The shape of a model (a tfcli.engine ModelConfig), as params, models, show and attn print it."""
    from tfcli.analysis.params.shape import shape_dict

    return shape_dict(cfg)


def token(tokenizer, token_id: int, *, with_bytes: bool = False) -> dict[str, Any]:
    """One token: its id, the text it adds (token_text), and with_bytes its UTF-8 bytes in hex."""
    token_id = int(token_id)
    text = tokenizer.token_text(token_id)
    row: dict[str, Any] = {"id": token_id, "text": text}
    if with_bytes:
        row["bytes"] = " ".join(f"{b:02x}" for b in token_bytes(tokenizer, token_id, text))
    return row


@functools.cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: printable bytes stand for themselves, the rest are shifted
    past 255 (built once, on first use)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(tokenizer, token_id: int, text: str | None = None) -> bytes:
    """The token's bytes: exact for byte-level BPE pieces (GPT-2's printable byte alphabet), which
    may be part of a character, and for SentencePiece's byte tokens; else its text's UTF-8."""
    decoder = byte_decoder()
    text = tokenizer.token_text(int(token_id)) if text is None else text
    piece = tokenizer.piece(int(token_id))
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):  # SentencePiece's byte fallback, <0xE4>
        return bytes([int(piece[3:5], 16)])
    if "\ufffd" in text and all(ch in decoder for ch in piece):
        return bytes(decoder[ch] for ch in piece)
    return text.encode("utf-8")


def generated(tokenizer, step) -> dict[str, Any]:
    """One new token of `generate --json`: id, text and its log-probability under the model
    (temperature 1, no filters), when the step carries the candidates (Generation(show_top>=1))."""
    row = token(tokenizer, step.token)
    row["text"] = step.text  # what this step printed (a stop string or a split character can hold text back)
    row["logprob"] = None
    choice = getattr(step, "choice", None)
    if choice is not None:
        p = getattr(choice, "p_token", None)  # the chosen token's probability, when the sampler reports it
        if p is None:
            ids = [int(i) for i in choice.top_ids]
            p = float(choice.p_model[ids.index(int(step.token))]) if int(step.token) in ids else None
        if p is not None and p > 0:
            row["logprob"] = math.log(float(p))
    return row


def stats(s, *, load_seconds: float | None = None, threads: int | None = None,
          seed: int | None = None) -> dict[str, Any]:
    """A generation's statistics (tfcli.engine.generate.Stats) as generate prints them on stderr;
    "seed": what the sample drew with (null when greedy), to draw it again with --seed."""
    out: dict[str, Any] = {
        "prompt_tokens": s.prompt_tokens,
        "new_tokens": s.new_tokens,
        "prefill_seconds": s.prefill_seconds,
        "decode_seconds": s.decode_seconds,
        "prefill_tokens_per_second": s.prefill_tps,
        "decode_tokens_per_second": s.decode_tps,
        "stop_reason": s.stop_reason or "interrupted",
    }
    if s.slides:
        out["slides"] = s.slides
    if load_seconds is not None:
        out["load_seconds"] = load_seconds
    if threads is not None:
        out["threads"] = threads
    out["seed"] = seed
    return out


def generation(model: str, prompt: str, text: str, tokens: list[dict[str, Any]],
               stats_: dict[str, Any]) -> dict[str, Any]:
    """The document `generate --json` prints."""
    return {"model": model, "prompt": prompt, "text": text, "tokens": tokens, "stats": stats_}


def rounded(value: Any, digits: int = SIGNIFICANT) -> Any:
    """value with every float cut to `digits` significant digits (NumPy scalars and arrays included);
    ints, bools, strings and None unchanged. NaN and infinities become None (JSON has no such numbers)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    if hasattr(value, "tolist"):  # a NumPy array or scalar
        dtype = getattr(value, "dtype", None)
        if dtype is not None and dtype.kind == "f" and dtype.itemsize <= 4:
            return _shortest(value)
        return rounded(value.tolist(), digits)
    return value


def _shortest(a) -> Any:
    """A float32/float16 array or scalar as nested lists of the shortest decimals that read back as
    the same values (NumPy's str of a float32 is that decimal); NaN and infinities as None."""
    import numpy as np

    flat = np.asarray(a).ravel()
    values = [float(str(x)) if np.isfinite(x) else None for x in flat]
    if np.ndim(a) == 0:
        return values[0]
    nested = np.array(values, dtype=object).reshape(np.shape(a))
    return nested.tolist()


def dumps(document: dict[str, Any], *, indent: int | None = None, digits: int = SIGNIFICANT) -> str:
    """The JSON text of a document: floats rounded, characters as themselves (not \\u escapes)."""
    from tfcli.draw.escape import json_text

    return json_text(rounded(document, digits), indent=indent)
