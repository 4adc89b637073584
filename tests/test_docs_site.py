"""The docs site builds with `mkdocs build --strict`, and strict means strict.

The site is README.md, docs/, the benchmarks' pages, the model cards and the notebooks of examples/
(mkdocs.yml, tools/mkdocs_hooks.py), with the API reference rendered from the docstrings of what `tfcli`
exports. A broken link, a link to a missing heading or a reference mkdocstrings cannot resolve
makes the build fail; the second test proves it on a copy with broken links (a page, an anchor, a file
outside docs/), built without the plugins that draw the notebooks and the API reference.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MISSING = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers", "mkdocs_jupyter") if importlib.util.find_spec(m.split(".")[0]) is None]
needs_mkdocs = pytest.mark.skipif(bool(MISSING), reason=f"the docs tools are not installed ({', '.join(MISSING)}): pip install -e '.[docs]'")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        cwd=root, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def copy_of_the_sources(dest: Path) -> Path:
    """What the site is built from, copied (tfcli/ for the API reference)."""
    dest.mkdir()
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    for folder in ("docs", "tools", "tfcli", "benchmarks", "examples"):
        if (ROOT / folder).exists():
            shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]", "*.so", "*.o"))
    for card in ROOT.glob("weights/*/README.md"):
        (dest / card.parent.relative_to(ROOT)).mkdir(parents=True, exist_ok=True)
        shutil.copy(card, dest / card.relative_to(ROOT))
    return dest


@needs_mkdocs
def test_the_site_builds_strictly(tmp_path):
    """The site of this tree, plus a notebook under examples/ (rendered as a page by mkdocs-jupyter)."""
    import nbformat

    src = copy_of_the_sources(tmp_path / "src")
    (src / "examples").mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A test notebook"), nbformat.v4.new_code_cell("1 + 1")])
    nbformat.write(nb, src / "examples" / "zz-test.ipynb")
    r = build(src, tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr
    site = tmp_path / "site"
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="serve/"' in index  # README's docs/serve.md, as the site's page
    import tfcli

    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in getattr(tfcli, "__all__", []):  # each public name has its entry in the reference
        assert re.search(rf'id="(?:[\w.]+\.)?{re.escape(name)}"', api), f"tfcli.{name} is not in the API reference"
    speed = (site / "speed" / "index.html").read_text(encoding="utf-8")
    assert 'href="../benchmarks/RESULTS/"' in speed  # ../benchmarks/RESULTS.md from docs/, as GitHub reads it
    assert "A test notebook" in (site / "examples" / "zz-test" / "index.html").read_text(encoding="utf-8")
    assert 'href="../examples/zz-test/"' in (site / "notebooks" / "index.html").read_text(encoding="utf-8")


BROKEN = {  # each way a link breaks, and what the build's message names
    "a page": ("[the server](serve-api.md)", "serve-api.md"),
    "a heading": ("[the JSON shapes](conventions.md#no-such-heading)", "no-such-heading"),
    "a file outside docs/": ("[results](../benchmarks/NOTHING.md)", "NOTHING.md"),
}


def without_the_page_plugins(src: Path) -> Path:
    """The copy's mkdocs.yml with only the search plugin: the notebooks' pages (mkdocs-jupyter) and the
    API reference (mkdocstrings) were most of a build's minute, and no link below goes through them.
    What checks links stays as written: mkdocs itself, its validation settings, the hooks."""
    config = src / "mkdocs.yml"
    text = config.read_text(encoding="utf-8")
    start, end = text.index("\nplugins:\n") + 1, text.index("\nmarkdown_extensions:") + 1
    config.write_text(text[:start] + "plugins:\n  - search\n" + text[end:], encoding="utf-8")
    assert "\nvalidation:\n" in text[end:] and "\nhooks:\n" in text[:start]
    return src


@needs_mkdocs
def test_a_broken_link_fails_the_build(tmp_path):
    """Each broken link is reported, and nothing else is: the build fails because of them."""
    src = without_the_page_plugins(copy_of_the_sources(tmp_path / "src"))
    page = src / "docs" / "development.md"
    links = "\n".join(f"See {link}." for link, _ in BROKEN.values())
    page.write_text(page.read_text(encoding="utf-8") + "\n" + links + "\n", encoding="utf-8")
    r = build(src, tmp_path / "site")
    assert r.returncode != 0, "a broken link went through the strict build"
    warnings = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("WARNING")]
    for kind, (_, named) in BROKEN.items():
        assert any(named in w for w in warnings), f"a broken link to {kind} was not reported"
    assert len(warnings) == len(BROKEN), "\n".join(warnings)


def test_every_public_name_has_a_docstring():
    """What `tfcli` exports (its `__all__`) is what the API reference renders: each name documented."""
    import tfcli

    assert inspect.getdoc(tfcli)
    for name in getattr(tfcli, "__all__", []):
        assert inspect.getdoc(getattr(tfcli, name)), f"tfcli.{name} has no docstring"
