"""One escaping function per medium: every text from a file, a name or a model that reaches a page,
a picture, a table or a terminal passes the one for its medium, and nothing else does the job.

    terminal   printable() (engine/errors.py): controls, bidi overrides and lone surrogates escaped;
               the consoles apply it once more to whatever they draw (console.py)
    HTML       html(): & < > " ' as entities, after unicode_safe()
    SVG, XML   xml(): the same, and the characters XML 1.0 forbids (controls, U+FFFE/FFFF) escaped
    JSON       json_text(): valid UTF-8 whatever a name holds; json_in_html(): one that cannot end
               its <script> element either
    CSV        csv_cell(): a text cell that a spreadsheet would run as a formula (OWASP's CSV
               injection guidance: a first character = + - @ tab or CR) starts with a quote

Names that are not UTF-8 (a folder named with bytes like \\xff\\xfe reaches Python as lone surrogates,
PEP 383) cannot be encoded as UTF-8: unicode_safe() writes each such byte as the text \\xff.
"""

from __future__ import annotations

import json
import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate(m: re.Match) -> str:
    code = ord(m.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def unicode_safe(text: str) -> str:
    """`text` with every lone surrogate (an undecodable byte of a file name) written visibly: encodable as UTF-8."""
    return _SURROGATE.sub(_surrogate, text)


def html(text: object) -> str:
    """Text for HTML content or a quoted attribute."""
    from html import escape

    return escape(unicode_safe(str(text)), quote=True)


# XML 1.0 allows tab, LF, CR and U+0020 on, but not surrogates, U+FFFE or U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")


def xml(text: object) -> str:
    """Text for SVG/XML content or a quoted attribute: well-formed whatever it holds."""
    safe = _NOT_XML.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
        unicode_safe(str(text)),
    )
    return (
        safe.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&apos;")
    )


def json_text(data: object, **options) -> str:
    """JSON for stdout or a file: characters as themselves, and a name's undecodable bytes (lone
    surrogates, which no UTF-8 reader accepts) as the text \\xff inside their string."""
    text = json.dumps(data, ensure_ascii=False, **options)
    return _SURROGATE.sub(lambda m: _surrogate(m).replace("\\", "\\\\"), text) if _SURROGATE.search(text) else text


def json_in_html(data: object) -> str:
    """JSON for a <script> element: '<' as \\u003c (so '</script>' cannot end it), U+2028/9 escaped,
    lone surrogates written visibly."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    # A surrogate can only stand inside a JSON string: its visible form's backslash is written as \\.
    return _SURROGATE.sub(lambda m: _surrogate(m).replace("\\", "\\\\"), text)


# The first characters a spreadsheet reads as the start of a formula (OWASP), with their full-width
# forms, which some spreadsheets fold into them.
_FORMULA = tuple("=+-@\t\r\n") + tuple("＝＋－＠")


def csv_cell(value: object) -> object:
    """A CSV cell: numbers as they are; a text that a spreadsheet would run as a formula gets a
    leading apostrophe (shown as text, the formula inert), also behind leading spaces."""
    if not isinstance(value, str):
        return value
    text = unicode_safe(value)
    if text.lstrip(" ").startswith(_FORMULA):
        return "'" + text
    return text
