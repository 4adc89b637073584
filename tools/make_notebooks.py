"""Write the notebooks of examples/ from their cells in tools/notebooks/ (one
module each): each notebook once, its prose in English
and, where the commands offer --lang zh, in Chinese beside it, so the two versions keep the same
code and the same checks. Stored without outputs (tests/test_notebooks.py runs them).

    python tools/make_notebooks.py            # rewrite examples/*.ipynb
    python tools/make_notebooks.py --check    # exit 1 if a stored notebook differs from this file

Edit the cells there, not the .ipynb files: --check (run by the tests) says when they disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebooks.cells import Notebook  # noqa: E402


def render(nb: Notebook, lang: str) -> str:
    cells = []
    for c in nb.cells:
        source = c.text(lang).splitlines(keepends=True)
        if c.kind == "code":
            cells.append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source})
        else:
            cells.append({"cell_type": "markdown", "metadata": {}, "source": source})
    meta = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    if nb.slow:
        meta["tfcli"] = {"slow": True}  # tests/test_notebooks.py marks it slow
    doc = {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}
    for i, cell in enumerate(doc["cells"]):
        cell["id"] = f"{nb.name}-{i}"
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def path_of(nb: Notebook, lang: str) -> Path:
    return EXAMPLES / (f"{nb.name}.ipynb" if lang == "en" else f"{nb.name}.{lang}.ipynb")


def notebooks() -> list[Notebook]:
    """Every notebook, one module each in tools/notebooks/."""
    import importlib

    mods = sorted(p.stem for p in (Path(__file__).parent / "notebooks").glob("*.py") if p.stem not in ("__init__", "cells"))
    return [importlib.import_module(f"notebooks.{m}").NOTEBOOK for m in mods]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for nb in notebooks():
        for lang in nb.langs:
            path, text = path_of(nb, lang), render(nb, lang)
            if check:
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    stale.append(path.relative_to(ROOT))
            else:
                EXAMPLES.mkdir(exist_ok=True)
                path.write_text(text, encoding="utf-8")
    if stale:
        print("not as tools/make_notebooks.py writes them: " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
