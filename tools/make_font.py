"""Write tfcli/fonts/: a subset of Noto Sans CJK SC for the labels of `tfcli attn --png`.

The subset holds the characters the shipped models know (the vocabulary of every weights/*/tokenizer.json),
printable ASCII and Latin-1, the label marks of cli/views/attn.py (␣ ⏎ → ¹ ² ³ ⁴ …) and the common
punctuation and symbol blocks, so that a PNG of Chinese labels needs no font installed by hand.
Characters outside it fall back to a system font (tfcli/draw/images.py).

Noto Sans CJK is under the SIL Open Font License 1.1, which allows a modified (subset) copy to be
shipped with software, with its copyright notice and licence beside it: this script writes both.
The subset is renamed so that it is never mistaken for the full font.

Needs fontTools, which tfcli itself does not (`pip install fonttools`). Debian/Ubuntu ship the source
font as fonts-noto-cjk. Run from the repository root:

    python tools/make_font.py [--source /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc --face 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tfcli" / "fonts"
NAME = "tfcli-cjk-subset.otf"  # tfcli/draw/fonts.py looks for this name
FAMILY = "tfcli CJK Subset"  # a new name: a modified font must not pass for the original (OFL 1.1, condition 3)
SOURCE = "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"
FACE = 2  # the faces of NotoSansCJK-Regular.ttc: 0 JP, 1 KR, 2 SC, 3 TC, 4 HK
# Beyond the vocabularies: ASCII and Latin-1, general punctuation, superscripts, arrows, maths,
# technical and control pictures (⏎ ␣), box drawing and blocks, CJK punctuation, fullwidth forms.
BLOCKS = [(0x20, 0x7E), (0xA0, 0xFF), (0x2010, 0x205E), (0x2070, 0x209F), (0x2190, 0x21FF), (0x2200, 0x22FF),
          (0x2300, 0x23FF), (0x2400, 0x243F), (0x2500, 0x259F), (0x3000, 0x303F), (0xFF00, 0xFFEF)]  # fmt: skip


def vocabulary_characters(weights: Path) -> set[str]:
    """Every character of every token of the shipped models' tokenizers."""
    chars: set[str] = set()
    for path in sorted(weights.glob("*/tokenizer.json")):
        vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
        chars.update(ch for token in vocab for ch in token)
    return chars


def main() -> int:
    from fontTools import subset
    from fontTools.ttLib import TTCollection, TTFont

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=SOURCE, help="a Noto Sans CJK .ttc or .otf (default: Debian's fonts-noto-cjk)")
    ap.add_argument("--face", type=int, default=FACE, help="the face inside a .ttc (default 2: Simplified Chinese)")
    ap.add_argument("--out", type=Path, default=OUT, help="the folder to write (default tfcli/fonts)")
    args = ap.parse_args()

    font = TTCollection(args.source).fonts[args.face] if args.source.endswith(".ttc") else TTFont(args.source)
    have = font.getBestCmap()
    vocab = {ord(c) for c in vocabulary_characters(ROOT / "weights")}
    wanted = vocab | {cp for a, b in BLOCKS for cp in range(a, b + 1)}
    missing = sorted(cp for cp in vocab if cp not in have and chr(cp).isprintable())  # rare CJK (Extension B on), private use
    codepoints = sorted(cp for cp in wanted if cp in have)

    options = subset.Options()
    options.layout_features = ["kern", "liga", "locl", "vert", "vrt2"]  # horizontal text; vertical forms for the few who use them
    options.hinting = False  # labels are drawn at 9-16 px by FreeType's autohinter anyway; hints are a third of the size
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 14]  # keep the copyright, trademark and licence records
    options.notdef_outline = True  # a visible box for characters the subset lacks
    sub = subset.Subsetter(options)
    sub.populate(unicodes=codepoints)
    sub.subset(font)
    _rename(font)

    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / NAME
    font.save(target)
    _licence(args.out / "OFL.txt", font)
    size = target.stat().st_size
    print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}: {len(codepoints):,} characters, {size / 1e6:.2f} MB")
    if missing:
        print(f"{len(missing)} of the {len(vocab):,} vocabulary characters are not in the source font (they fall back to a system font): "
              f"{''.join(chr(c) for c in missing[:20])}{' …' if len(missing) > 20 else ''}")  # fmt: skip
    return 0


def _rename(font) -> None:
    """Family, full and PostScript names of the subset; the copyright and licence records stay."""
    version = font["name"].getDebugName(5) or ""
    names = {1: FAMILY, 4: FAMILY, 6: FAMILY.replace(" ", ""), 16: FAMILY, 3: f"{FAMILY.replace(' ', '')};{version}"}
    names[5] = f"{version}; subset of Noto Sans CJK SC for tfcli"
    for rec in list(font["name"].names):
        if rec.nameID in names:
            rec.string = names[rec.nameID]
    cff = font["CFF "].cff
    cff.fontNames = [FAMILY.replace(" ", "")]
    top = cff.topDictIndex[0]
    for key in ("FamilyName", "FullName"):
        if hasattr(top, key):
            setattr(top, key, FAMILY)


def _licence(path: Path, font) -> None:
    copyright_ = font["name"].getDebugName(0)
    trademark = font["name"].getDebugName(7)
    path.write_text(
        f"{NAME} is a subset of Noto Sans CJK SC (Regular), made by tools/make_font.py.\n"
        f"Source: https://github.com/notofonts/noto-cjk (as packaged by Debian: fonts-noto-cjk).\n\n"
        f"{copyright_}\n{trademark}\n\n{OFL}",
        encoding="utf-8",
    )


OFL = """This Font Software is licensed under the SIL Open Font License, Version 1.1.
This license is copied below, and is also available with a FAQ at: https://openfontlicense.org


-----------------------------------------------------------
SIL OPEN FONT LICENSE Version 1.1 - 26 February 2007
-----------------------------------------------------------

PREAMBLE
The goals of the Open Font License (OFL) are to stimulate worldwide
development of collaborative font projects, to support the font creation
efforts of academic and linguistic communities, and to provide a free and
open framework in which fonts may be shared and improved in partnership
with others.

The OFL allows the licensed fonts to be used, studied, modified and
redistributed freely as long as they are not sold by themselves. The
fonts, including any derivative works, can be bundled, embedded,
redistributed and/or sold with any software provided that any reserved
names are not used by derivative works. The fonts and derivatives,
however, cannot be released under any other type of license. The
requirement for fonts to remain under this license does not apply
to any document created using the fonts or their derivatives.

DEFINITIONS
"Font Software" refers to the set of files released by the Copyright
Holder(s) under this license and clearly marked as such. This may
include source files, build scripts and documentation.

"Reserved Font Name" refers to any names specified as such after the
copyright statement(s).

"Original Version" refers to the collection of Font Software components as
distributed by the Copyright Holder(s).

"Modified Version" refers to any derivative made by adding to, deleting,
or substituting -- in part or in whole -- any of the components of the
Original Version, by changing formats or by porting the Font Software to a
new environment.

"Author" refers to any designer, engineer, programmer, technical
writer or other person who contributed to the Font Software.

PERMISSION & CONDITIONS
Permission is hereby granted, free of charge, to any person obtaining
a copy of the Font Software, to use, study, copy, merge, embed, modify,
redistribute, and sell modified and unmodified copies of the Font
Software, subject to the following conditions:

1) Neither the Font Software nor any of its individual components,
in Original or Modified Versions, may be sold by itself.

2) Original or Modified Versions of the Font Software may be bundled,
redistributed and/or sold with any software, provided that each copy
contains the above copyright notice and this license. These can be
included either as stand-alone text files, human-readable headers or
in the appropriate machine-readable metadata fields within text or
binary files as long as those fields can be easily viewed by the user.

3) No Modified Version of the Font Software may use the Reserved Font
Name(s) unless explicit written permission is granted by the corresponding
Copyright Holder. This restriction only applies to the primary font name as
presented to the users.

4) The name(s) of the Copyright Holder(s) or the Author(s) of the Font
Software shall not be used to promote, endorse or advertise any
Modified Version, except to acknowledge the contribution(s) of the
Copyright Holder(s) and the Author(s) or with their explicit written
permission.

5) The Font Software, modified or unmodified, in part or in whole,
must be distributed entirely under this license, and must not be
distributed under any other license. The requirement for fonts to
remain under this license does not apply to any document created
using the Font Software.

TERMINATION
This license becomes null and void if any of the above conditions are
not met.

DISCLAIMER
THE FONT SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND,
EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO ANY WARRANTIES OF
MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT
OF COPYRIGHT, PATENT, TRADEMARK, OR OTHER RIGHT. IN NO EVENT SHALL THE
COPYRIGHT HOLDER BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY,
INCLUDING ANY GENERAL, SPECIAL, INDIRECT, INCIDENTAL, OR CONSEQUENTIAL
DAMAGES, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING
FROM, OUT OF THE USE OR INABILITY TO USE THE FONT SOFTWARE OR FROM
OTHER DEALINGS IN THE FONT SOFTWARE.
"""

if __name__ == "__main__":
    sys.exit(main())
