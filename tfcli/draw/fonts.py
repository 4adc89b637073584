"""Which font draws each text of a PNG: $TFCLI_FONT, then the CJK subset shipped in tfcli/fonts/, then the system's.

The shipped subset (tools/make_font.py) holds every character of the shipped models' vocabularies,
ASCII and the label marks, so that Chinese labels render with nothing installed by hand. A text
with a character the subset lacks (another model's vocabulary) is drawn with the first system font
that has all its characters. Whether a font has a character is read from what it draws: a missing
character is drawn as the font's .notdef glyph, the same for every missing character.
"""

from __future__ import annotations

import os
import subprocess
import unicodedata
from pathlib import Path

from tfcli.engine.errors import TfcliError

SHIPPED_FONT = Path(__file__).resolve().parents[1] / "fonts" / "tfcli-cjk-subset.otf"  # tfcli/fonts/
# Fonts with CJK glyphs where the usual packages put them (Debian/Ubuntu, Fedora, Arch, macOS, Windows);
# the number is the face inside a .ttc collection (Noto Sans CJK: 0 JP, 1 KR, 2 SC, 3 TC).
CJK_FONTS = [
    ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2),
    ("/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc", 2),
    ("/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc", 2),
    ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0),
    ("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc", 0),
    ("/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf", 0),
    ("/usr/share/fonts/truetype/arphic/uming.ttc", 0),
    ("/System/Library/Fonts/PingFang.ttc", 0),
    ("/System/Library/Fonts/STHeiti Light.ttc", 0),
    ("C:/Windows/Fonts/msyh.ttc", 0),
]
LATIN_FONTS = [
    ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 0),
    ("/usr/share/fonts/dejavu/DejaVuSans.ttf", 0),
    ("/System/Library/Fonts/Helvetica.ttc", 0),
    ("C:/Windows/Fonts/arial.ttf", 0),
]
INSTALL_HINT = (
    "set TFCLI_FONT to a .ttf/.otf/.ttc file that has them, or install one (Debian/Ubuntu: apt install fonts-noto-cjk)"
)
_NOTDEF_PROBE = "\U0010fffd"  # a noncharacter: no font maps it, so it draws the font's .notdef
_PROBE_SIZE = 24


def wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in "WF"


def needs_cjk_font(strings) -> bool:
    return any(wide(ch) for s in strings for ch in s)


def estimate(s: str, size: int) -> float:
    """A text's width in pixels without a font: CJK characters are square, the rest about 0.62 of the size."""
    return sum(size if wide(ch) else 0.62 * size for ch in s)


def env_font() -> tuple[str, int] | None:
    """$TFCLI_FONT as (file, face); FILE.ttc:2 picks a face of a collection. A one-line error if it is no file."""
    env = os.environ.get("TFCLI_FONT")
    if not env:
        return None
    path, index = env, 0
    head, _, tail = env.rpartition(":")
    if head and tail.isdigit():
        path, index = head, int(tail)
    if not Path(path).is_file():
        raise TfcliError(f"TFCLI_FONT={env} is not a file", "point it at a .ttf, .otf or .ttc font file")
    return path, index


def system_fonts() -> list[tuple[str, int]]:
    """The system's fonts worth trying, CJK first: fontconfig's choice for Chinese, the usual paths, Latin ones."""
    found = [f for f in [_fontconfig_cjk()] if f] + [(p, i) for p, i in CJK_FONTS + LATIN_FONTS if Path(p).is_file()]
    return list(dict.fromkeys(found))


def _fontconfig_cjk() -> tuple[str, int] | None:
    """fontconfig's best sans-serif face for Simplified Chinese, if it really covers Chinese."""
    try:
        best = subprocess.run(
            ["fc-match", "-f", "%{file}\n%{index}", "sans:lang=zh-cn"], capture_output=True, text=True, timeout=10
        )
        zh = subprocess.run(["fc-list", ":lang=zh-cn", "file"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    path, _, index = best.stdout.partition("\n")
    covering = {line.rstrip().rstrip(":") for line in zh.stdout.splitlines()}
    if path and path in covering and Path(path).is_file():
        return path, int(index) if index.strip().isdigit() else 0
    return None


class Fonts:
    """The fonts a drawing's texts are measured and drawn with, tried in order; needs Pillow.

    `missing` collects the characters that no font had (they are drawn as the first font's box).
    """

    def __init__(self, files: list[tuple[str, int]] | None = None):
        from PIL import ImageFont  # ImportError without Pillow: the caller decides what that means

        self._pil = ImageFont
        given = files is not None
        self._files = (
            list(files) if given else [f for f in (env_font(), (str(SHIPPED_FONT), 0)) if f and Path(f[0]).is_file()]
        )
        self._system_added = given  # system fonts are looked up only when the first ones lack a character
        self._faces: dict[tuple[int, int], object] = {}
        self._has: dict[tuple[int, str], bool] = {}
        self._notdef: dict[int, tuple] = {}  # each font's drawing of a character it lacks
        self.missing: set[str] = set()

    @property
    def files(self) -> list[tuple[str, int]]:
        return list(self._files)

    def _face(self, k: int, size: int):
        if (k, size) not in self._faces:
            path, index = self._files[k]
            try:
                self._faces[k, size] = self._pil.truetype(path, size, index=index, layout_engine=self._pil.Layout.BASIC)
            except OSError as e:
                raise TfcliError(
                    f"cannot open the font {path} (face {index}): {e}",
                    "set TFCLI_FONT to a .ttf, .otf or .ttc font file",
                ) from None
        return self._faces[k, size]

    def _covers(self, k: int, ch: str) -> bool:
        if ch.isspace():
            return True
        if (k, ch) not in self._has:
            face = self._face(k, _PROBE_SIZE)
            drawn = lambda c: (face.getmask(c).size, bytes(face.getmask(c)))  # noqa: E731
            if k not in self._notdef:
                self._notdef[k] = drawn(_NOTDEF_PROBE)
            self._has[k, ch] = drawn(ch) != self._notdef[k]
        return self._has[k, ch]

    def face(self, text: str, size: int):
        """The first font that has every character of text (looking at system fonts only if needed);
        else the one that has the most, and the rest go to `missing`. Pillow's own font if there is none."""
        chars = set(text)
        best, best_n = None, -1
        k = 0
        while True:
            if k == len(self._files):
                if self._system_added:
                    break
                self._system_added = True
                self._files += [f for f in system_fonts() if f not in self._files]
                continue
            n = sum(self._covers(k, ch) for ch in chars)
            if n == len(chars):
                return self._face(k, size)
            if n > best_n:
                best, best_n = k, n
            k += 1
        if best is None:
            return self._pil.load_default(size)
        self.missing |= {ch for ch in chars if not any(self._covers(j, ch) for j in range(len(self._files)))}
        return self._face(best, size)

    def measure(self, text: str, size: int) -> float:
        """The text's advance width in pixels, as drawn."""
        return float(self.face(text, size).getlength(text))
