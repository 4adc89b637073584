"""mkdocs hooks: the site is README.md, docs/, the benchmarks' pages, the model cards and the notebooks.

The Markdown stays written for GitHub, where README.md links `docs/serve.md` and docs/speed.md links
`../benchmarks/RESULTS.md`. Here those pages join the site (README.md as its home page) and every
relative link is read as GitHub reads it, against the linking file's place in the repository, then
written as the site's path to the same page. A link to a repository file that is not a page of the
site (a source file) keeps its text and loses the link. A link to nothing is left as written, so
that `mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
# repository path -> the site's path for pages that live outside docs/
EXTRA = {
    "README.md": "index.md",
    "benchmarks/README.md": "benchmarks/README.md",
    "benchmarks/RESULTS.md": "benchmarks/RESULTS.md",
    "weights/shakespeare/README.md": "models/shakespeare.md",
    "weights/tang/README.md": "models/tang.md",
}
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def notebooks() -> list[str]:
    """The notebooks under examples/ (stored without outputs), English and Chinese."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").glob("*.ipynb"))


def site_path(repo_path: str) -> str | None:
    if repo_path in EXTRA:
        return EXTRA[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    if repo_path in notebooks():
        return repo_path  # examples/NAME.ipynb
    return None


def repo_path(site: str) -> str:
    back = {v: k for k, v in EXTRA.items()}
    if site in back:
        return back[site]
    if site.startswith("examples/"):
        return site
    return "docs/" + site


@event_priority(50)  # before mkdocs-jupyter's on_files, which makes the notebooks pages
def on_files(files: Files, config) -> Files:
    for repo, site in EXTRA.items():
        files.append(File.generated(config, site, content=(ROOT / repo).read_text(encoding="utf-8")))
    listing = ["# Notebooks", ""]
    found = notebooks()
    if found:
        listing += ["The notebooks under `examples/`, stored without outputs (the site built with", "`TFCLI_DOCS_EXECUTE=true` runs them and shows their outputs):", ""]
        listing += [f"- [{Path(n).stem}](../{n})" for n in found]
        for n in found:  # files of the repository's root, at the same path in the site
            files.append(File(n, src_dir=str(ROOT), dest_dir=config["site_dir"], use_directory_urls=config["use_directory_urls"]))
    else:
        listing += ["The notebooks will live under `examples/` (none in this tree yet)."]
    files.append(File.generated(config, "notebooks.md", content="\n".join(listing) + "\n"))
    return files


def rewrite(markdown: str, page_site: str) -> str:
    """Links read against the page's place in the repository, written as site paths."""
    here = posixpath.dirname(repo_path(page_site))
    page_dir = posixpath.dirname(page_site)

    def one(m: re.Match) -> str:
        bang, text, target = m.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):  # a URL, an anchor, an absolute path
            return m.group(0)
        path, _, anchor = target.partition("#")
        repo = posixpath.normpath(posixpath.join(here, path))
        site = site_path(repo)
        if site is not None:
            new = posixpath.relpath(site, page_dir or ".") + (f"#{anchor}" if anchor else "")
            return f"{bang}[{text}]({new})"
        if (ROOT / repo).exists() and not bang and not repo.startswith(".."):
            return text  # a repository file that is no page of the site: its name, unlinked
        return m.group(0)  # nothing there: mkdocs reports it

    out, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(one, line))
    return "\n".join(out)


def public_names() -> list[tuple[str, str]]:
    """(name, where it is defined) for each name of `tfcli.__all__`: the reference documents each
    where it lives (a static look-up needs no import of tfcli's commands), under its public name."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT))
    try:
        tfcli = importlib.import_module("tfcli")
        found = []
        for name in getattr(tfcli, "__all__", []):
            obj = getattr(tfcli, name)
            module = getattr(obj, "__module__", None)
            found.append((name, f"{module}.{name}" if module and getattr(obj, "__name__", None) == name else f"tfcli.{name}"))
        return found
    finally:
        sys.path.remove(str(ROOT))


def api_reference(markdown: str) -> str:
    """`::: tfcli` alone on a line: the module's docstring, then one entry per public name."""
    entries = ["::: tfcli", "    options:", "      members: false", ""]
    for name, where in public_names():
        entries += [f"::: {where}", "    options:", "      show_root_heading: true", "      show_root_full_path: false", ""]
    return re.sub(r"^::: tfcli$", "\n".join(entries), markdown, flags=re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == "api.md":
        markdown = api_reference(markdown)
    return rewrite(markdown, page.file.src_uri)
