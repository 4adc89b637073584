"""A request's body: read up to a bound, then parsed as JSON with limits on nesting and digits.

Nothing here trusts the client: a `Content-Length` past `--max-body` is refused before a byte of
the body is read (413), and so is a body that turns out longer while it arrives (chunked, or a
lying header); a client that leaves half-way is `Gone`, not a traceback. JSON nested deeper than
MAX_DEPTH is refused before it is parsed; an integer of more than Huge.MAX_DIGITS digits is kept
as a `Huge` (its text), which every range check of api.py refuses by name, instead of Python's own
limit on int() (4,300 digits) or an OverflowError when it meets a float.
"""

from __future__ import annotations

import json
import re

import numpy as np

from .api import ApiError, Huge, bad

MAX_BODY_MB = 16  # --max-body's default, in MiB: a prompt far past any context this engine runs, as text
MAX_DEPTH = 64  # arrays and objects inside each other; OpenAI's bodies need 5
DEPTH_PART = 1 << 20  # bytes of the body scanned for nesting at a time

_STRINGS = re.compile(rb'"(?:[^"\\]++|\\.)*+"')  # a JSON string, escapes included (possessive: linear time)
_OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


class Gone(Exception):
    """The client closed the connection before its body was complete: there is nobody to answer."""


async def read(request, limit: int) -> bytes:
    """The whole body, or a 413 as soon as it is known to be longer than `limit` bytes."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)
    parts, n = [], 0
    try:
        async for part in request.stream():
            n += len(part)
            if n > limit:
                raise too_large(n, limit, more=True)
            parts.append(part)
    except ClientDisconnect:
        raise Gone from None
    return b"".join(parts)


def too_large(n: int, limit: int, more: bool = False) -> ApiError:
    size = f"more than {limit:,}" if more else f"{n:,}"
    return ApiError(
        413,
        f"the body is {size} bytes; this server takes at most {limit:,} (tfcli serve --max-body)",
        None,
        "body_too_large",
    )


def parse(raw: bytes) -> dict:
    """The body as a JSON object, or a 400 that says what is wrong with it. Runs off the event loop."""
    depth = nesting(raw)
    if depth > MAX_DEPTH:
        raise bad(
            f"the body nests arrays and objects {depth:,} deep; at most {MAX_DEPTH} are accepted", None, "invalid_json"
        )
    try:
        body = json.loads(raw, parse_int=_integer)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad(f"the body is not valid JSON ({str(e)[:200]})", None, "invalid_json") from None
    except RecursionError:  # not reached after the depth check; kept so that no body can reach a traceback
        raise bad(
            f"the body nests arrays and objects too deeply; at most {MAX_DEPTH} are accepted", None, "invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object", None, "invalid_json")
    return body


def nesting(raw: bytes) -> int:
    """How deep arrays and objects nest in a JSON text (brackets inside strings do not count)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:  # the common case, at C speed: it cannot nest deeper
        return 0
    bare = _STRINGS.sub(b'""', raw)
    deepest = depth = 0
    for at in range(0, len(bare), DEPTH_PART):  # a part at a time: a few MB of temporaries, whatever the body
        part = np.frombuffer(bare, np.uint8, min(DEPTH_PART, len(bare) - at), at)
        steps = np.isin(part, _OPEN).astype(np.int32) - np.isin(part, _CLOSE)  # [n] +1 opens, -1 closes
        levels = depth + np.cumsum(steps)
        deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
    return deepest


def _integer(text: str):
    return int(text) if len(text.lstrip("-")) <= Huge.MAX_DIGITS else Huge(text)
