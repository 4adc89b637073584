"""The notebooks of examples/: stored without outputs, run top to bottom in a real Jupyter kernel
(nbclient + ipykernel) under 3 minutes each, their last cells asserting the numbers their prose
states; and their HTML views drawn by a real headless Chromium (skipped, as the explorer's page
tests are, when it or Selenium is missing).

The kernel is this interpreter's Python with this checkout first on its path (PYTHONPATH), so it
imports the tfcli under test, not another installed one: a cell appended to each run checks it.
A notebook whose metadata says {"tfcli": {"slow": true}} (the SmolLM2 ones) is marked slow, as the
suite's other SmolLM2 tests are, and gets the model the way they do (tests/conftest.py, pulled once
into the test cache; skipped when it cannot be had). Its Chinese twin runs the same program (a test
compares their code with the words taken out), so only the English one runs unless
TFCLI_TEST_ALL_NOTEBOOKS=1: together the SmolLM2 notebooks are the file's longest minutes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
BUDGET = 180.0  # seconds a notebook may take, top to bottom, on 2 cores
CELL_TIMEOUT = 600


def _is_slow(path: Path) -> bool:
    meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    return bool(meta.get("tfcli", {}).get("slow"))


def _params():
    return [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if _is_slow(p) else []) for p in NOTEBOOKS]


def _english_twin(path: Path) -> Path | None:
    return path.with_name(path.name.replace(".zh.ipynb", ".ipynb")) if path.name.endswith(".zh.ipynb") else None


def _skip_slow_twin(path: Path) -> None:
    """A Chinese notebook on SmolLM2 runs the same program as its English twin (held by
    test_twins_run_the_same_code); running both would double the suite's longest minutes."""
    if _is_slow(path) and _english_twin(path) and not os.environ.get("TFCLI_TEST_ALL_NOTEBOOKS"):
        pytest.skip(f"the same code as {_english_twin(path).name}, which runs (TFCLI_TEST_ALL_NOTEBOOKS=1 runs this one too)")


def test_there_are_notebooks_in_english_and_chinese():
    names = {p.name for p in NOTEBOOKS}
    assert "self-attention.zh.ipynb" in names and "self-attention.ipynb" in names
    for p in NOTEBOOKS:
        if p.name.endswith(".zh.ipynb"):
            assert p.name.replace(".zh.ipynb", ".ipynb") in names, f"{p.name} has no English twin"


def _program(cell_source: str) -> str:
    """A code cell's program with its words taken out: every string constant emptied (comments are
    not in the tree), so that two cells that differ only in the language they speak compare equal."""
    import ast

    tree = ast.parse(cell_source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
        elif isinstance(node, ast.JoinedStr):
            node.values = [v for v in node.values if not isinstance(v, ast.Constant)]
    return ast.dump(tree)


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if _english_twin(p)], ids=lambda p: p.name)
def test_twins_run_the_same_code(path):
    """A Chinese notebook and its English twin differ in their prose, comments and printed words only."""
    def programs(p):
        return [_program("".join(c["source"])) for c in json.loads(p.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]

    assert programs(path) == programs(_english_twin(path))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_stored_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has stored outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    prose = [c for c in nb["cells"] if c["cell_type"] == "markdown"]
    assert len(prose) >= 4 and len(code) >= 4, "a notebook is a document: prose that teaches, and code"
    assert "assert" in "".join(code[-1]["source"]), "its last cell asserts the numbers its prose states"


# --- running them -------------------------------------------------------------------------------


def _kernel_manager(tmp: Path):
    """A kernel of this very interpreter (the installed 'python3' kernelspec may name another)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    spec = tmp / "kernels" / "tfcli-test"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "tfcli test", "language": "python"}))
    return AsyncKernelManager(kernel_name="tfcli-test", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)]))


def _smollm2_home(request, tmp_path_factory) -> str:
    """The TFCLI_HOME that holds SmolLM2 as the suite pulls it (tests/conftest.py), or a skip; its
    compiled kernels built first, here, into the suite's kernel cache the kernel shares
    (TFCLI_KERNEL_CACHE): a machine's one-time compile (minutes on a busy one) is not the notebook's."""
    folder = request.getfixturevalue("smollm2_folder")  # pulled, or the test skipped
    if not WARM:
        import tfcli

        tfcli.load(folder)("warm up")
        WARM.append(folder)
    return str(Path(folder).parent.parent)  # TFCLI_HOME/models/smollm2


WARM: list[Path] = []


CHECK = "import tfcli, pathlib\nprint(pathlib.Path(tfcli.__file__).resolve())"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Each notebook run once for this file's tests: path -> (the notebook with its outputs, seconds)."""
    runs: dict[Path, tuple[object, float]] = {}

    def run(path: Path, home: str | None):
        if path in runs:
            return runs[path]
        nbformat = pytest.importorskip("nbformat")
        nbclient = pytest.importorskip("nbclient")
        pytest.importorskip("ipykernel")
        from jupyter_core.utils import run_sync
        tmp = tmp_path_factory.mktemp(path.stem.replace(".", "-"))
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(CHECK))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        env["TFCLI_HOME"] = home or str(tmp / "tfcli-home")  # never the user's model cache
        env["NO_COLOR"] = "1"
        env.pop("PYTHONSTARTUP", None)
        km = _kernel_manager(tmp)
        client = nbclient.NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, resources={"metadata": {"path": str(tmp)}})
        start = time.monotonic()
        try:
            client.execute(env=env)
        finally:  # a kernel manager given to nbclient is the caller's to stop: else each kernel, its model loaded, lives on
            seconds = time.monotonic() - start
            if km.has_kernel:
                run_sync(km.shutdown_kernel)(now=True)
        runs[path] = (nb, seconds)
        return runs[path]

    return run


@pytest.mark.parametrize("path", _params())
def test_runs_top_to_bottom_in_a_kernel(path, executed, request, tmp_path_factory):
    _skip_slow_twin(path)
    home = _smollm2_home(request, tmp_path_factory) if _is_slow(path) else None
    nb, seconds = executed(path, home)
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    assert Path(printed.strip()).is_relative_to(ROOT / "tfcli"), f"the kernel imported {printed.strip()}, not this checkout's tfcli"
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert seconds < BUDGET, f"{path.name} took {seconds:.0f} s (budget {BUDGET:.0f} s)"


# --- their views in a real browser ----------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser():
    """The system's headless Chromium driven by Selenium, as tests/test_explore.py drives it."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            pytest.skip(f"{path} is missing: the browser tests need the system's {package} (apt install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def _page(nb) -> str:
    """The executed notebook as one self-contained HTML page: each cell's richest output (HTML,
    SVG, PNG or text) in order, nothing fetched from the network (nbconvert's full templates load
    scripts from CDNs; the views must draw without them)."""
    import html

    parts = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if "text/html" in data:
                body = data["text/html"]
            elif "image/svg+xml" in data:
                body = data["image/svg+xml"]
            elif "image/png" in data:
                body = f'<img src="data:image/png;base64,{data["image/png"]}">'
            else:
                text = o.get("text") or data.get("text/plain", "")
                body = f"<pre>{html.escape(text if isinstance(text, str) else ''.join(text))}</pre>"
            parts.append(f'<div class="output" data-cell="{i}">{"".join(body) if isinstance(body, list) else body}</div>')
    return '<!doctype html><html><head><meta charset="utf-8"></head><body>' + "\n".join(parts) + "</body></html>"


def _views(nb) -> list[str]:
    return [o["data"]["text/html"] for c in nb.cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})]


@pytest.mark.parametrize("path", _params())
def test_views_are_well_formed(path, executed, request, tmp_path_factory):
    """Each HTML view the results drew: its SVG pictures parse as XML with a size and shapes, the
    whole view as HTML (what a browser, or a docs build, gets)."""
    import re
    import xml.etree.ElementTree as ET
    from html.parser import HTMLParser

    _skip_slow_twin(path)
    home = _smollm2_home(request, tmp_path_factory) if _is_slow(path) else None
    nb, _ = executed(path, home)
    views = _views(nb)
    assert views, f"{path.name} shows no HTML view"
    pictures = 0
    for view in views:
        HTMLParser().feed(view)
        for svg in re.findall(r"<svg.*?</svg>", view, flags=re.S):
            root = ET.fromstring(svg)
            assert float(root.get("width", "0").rstrip("px")) > 20 and float(root.get("height", "0").rstrip("px")) > 20, root.attrib
            assert sum(1 for e in root.iter() if e.tag.split("}")[-1] in ("rect", "path", "line", "text")) > 0
            pictures += 1
    assert pictures, f"{path.name} draws no picture"


@pytest.mark.parametrize("path", _params())
def test_views_render_in_chromium(path, executed, browser, request, tmp_path_factory):
    _skip_slow_twin(path)
    home = _smollm2_home(request, tmp_path_factory) if _is_slow(path) else None
    nb, _ = executed(path, home)
    assert _views(nb), f"{path.name} shows no HTML view; a notebook of tfcli shows its pictures"
    page = tmp_path_factory.mktemp("page") / (path.stem + ".html")
    page.write_text(_page(nb), encoding="utf-8")
    browser.get_log("browser")  # forget what earlier pages logged
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    logs = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not logs, logs
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched
    # Every picture is drawn with a size, and holds drawn shapes or text.
    svgs = browser.execute_script(
        "return Array.from(document.querySelectorAll('svg'), s => { const r = s.getBoundingClientRect();"
        " return [r.width, r.height, s.querySelectorAll('rect,path,line,text,circle').length]; })"
    )
    assert svgs, f"{path.name}: no SVG view on the page"
    for width, height, shapes in svgs:
        assert width > 20 and height > 20 and shapes > 0, svgs
    shot = page.with_suffix(".png")
    assert browser.save_screenshot(str(shot))
    from PIL import Image

    with Image.open(shot) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 8, "the screenshot is blank"


def test_stored_notebooks_are_the_ones_their_cells_write():
    """examples/*.ipynb are written by tools/make_notebooks.py from tools/notebooks/ (the English and
    Chinese prose of each notebook beside one copy of its code): edited by hand, they would drift apart."""
    import subprocess

    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_notebooks.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
