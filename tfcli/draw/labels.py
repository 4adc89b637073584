"""How a token is written in a picture's labels (and the terminal's): its text with whitespace and
control characters made visible, the pieces of a character split over several tokens numbered."""

from __future__ import annotations

import unicodedata

_SUPERSCRIPTS = "¹²³⁴"  # the ones CJK fonts have too
_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "→", "\r": "␍"}


def visible(s: str) -> str:
    """A token's text with whitespace and control characters made visible, for a label."""
    return "".join(_VISIBLE.get(c, c if c.isprintable() else f"\\x{ord(c):02x}") for c in s)


def token_labels(tokenizer, ids: list[int]) -> list[str]:
    """One label per token: its text, made visible.

    With byte-level BPE a character can be split over several tokens (a Chinese character is three
    UTF-8 bytes), and each piece alone decodes to U+FFFD. Such tokens are grouped until their text
    is whole again, and each is labelled with the character it belongs to and its place in it: 今¹ 今² 今³.
    """
    labels: list[str] = []
    i = 0
    while i < len(ids):
        j, text = i + 1, tokenizer.decode(ids[i : i + 1])
        if "\ufffd" in text:
            for k in range(i + 2, min(i + 8, len(ids)) + 1):
                whole = tokenizer.decode(ids[i:k])
                if "\ufffd" not in whole:
                    j, text = k, whole
                    break
        if j - i == 1:
            labels.append(visible(text) or f"<{tokenizer.piece(ids[i])}>")
        else:
            labels += _part_labels(tokenizer, ids[i:j], text)
        i = j
    return labels


def _part_labels(tokenizer, group: list[int], text: str) -> list[str]:
    """Labels for tokens that only together spell `text`: each names the character it starts in
    (and any it completes), numbered when that character spans several tokens."""
    done = [
        len(tokenizer.decode(group[: k + 1]).rstrip("\ufffd")) for k in range(len(group))
    ]  # whole characters so far
    first = [0] + done[:-1]  # the character each token starts in
    labels = []
    for k, a in enumerate(first):
        label = visible(text[a : max(done[k], a + 1)])
        if first.count(a) > 1:
            n = first[:k].count(a)
            label += _SUPERSCRIPTS[n] if n < len(_SUPERSCRIPTS) else f"#{n + 1}"
        labels.append(label)
    return labels


def token_str(tokenizer, token_id: int) -> str:
    """A vocabulary token as the text it adds, whitespace made visible; a piece of a character
    (a byte-level token that decodes to U+FFFD alone) is shown as its vocabulary piece in <...>."""
    text = tokenizer.token_text(int(token_id))
    if text == "" or "\ufffd" in text:
        return f"<{tokenizer.piece(int(token_id))}>"
    return visible(text)


def cells(s: str) -> int:
    """Terminal cells of a text: a wide (CJK) character two, a combining mark none."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def clip_cells(label: str, width: int) -> str:
    """Cut a label to at most `width` cells (cells()), ending in '…'."""
    if cells(label) <= width:
        return label
    while label and cells(label) > width - 1:
        label = label[:-1]
    return label + "…"
