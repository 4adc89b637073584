"""One numbering for layers and blocks (README, "Blocks and residual indices"): blocks 0..L-1; layer i of the
residual stream is the embeddings for i = 0, the output of block i-1 after; negative numbers count
from the end. The CLI's table, its JSON and the explore page say the same number for the same row."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tfcli.store import load

from conftest import TINY_GPT2, TINY_LLAMA

ROOT = Path(__file__).resolve().parent.parent
TEXT = "hello there"


def _page_lens_ids(html: str) -> np.ndarray:
    data = json.loads(re.search(r'<script type="application/json" id="tfcli-data">(.*?)</script>', html, re.S).group(1))
    a = data["arrays"]["lens_ids"]
    return np.frombuffer(base64.b64decode(a["b64"]), dtype=a["dtype"]).reshape(a["shape"])  # [L+1, T, K]


def test_lens_table_json_and_page_number_the_same_rows(cli, tmp_path):
    from tfcli.cli.views.inside import token_str

    lm = load(TINY_GPT2)
    n_layer = lm.config.n_layer
    data = json.loads(cli("lens", "-m", TINY_GPT2, TEXT, "--json").stdout)
    assert [entry["layer"] for entry in data["layers"]] == list(range(n_layer + 1))
    last = len(data["tokens"]) - 1
    json_top = [entry["positions"][last]["token_id"] for entry in data["layers"]]  # [L+1]

    r = cli("lens", "-m", TINY_GPT2, TEXT, "--position", "-1", "--top", "1")
    assert r.exit_code == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*(\d+)(?: emb)?\s+(\S+) (?:\d+%|<1%)", line)
        if m:
            rows[int(m.group(1))] = m.group(2)
    assert rows == {i: token_str(lm.tokenizer, t) for i, t in enumerate(json_top)}
    assert re.search(r"^\s*0 emb ", r.stdout, re.M)  # layer 0 says it is the embeddings

    page = tmp_path / "page.html"
    assert cli("explore", "-m", TINY_GPT2, TEXT, "-o", page).exit_code == 0
    lens_ids = _page_lens_ids(page.read_text(encoding="utf-8"))
    assert lens_ids[:, last, 0].tolist() == json_top


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the page's own row names")
def test_the_page_names_its_lens_rows_as_the_cli_does():
    """page.js's lensRowName, run with the page's strings: layer 0 (embeddings), layer 1, ... layer L."""
    js = (ROOT / "tfcli" / "explore" / "page.js").read_text(encoding="utf-8")
    strings = (ROOT / "tfcli" / "explore" / "strings.js").read_text(encoding="utf-8")
    fn = re.search(r"function lensRowName\(row\) \{.*?\n\}", js, re.S).group(0)
    t = re.search(r"function t\(key, args\) \{.*?\n\}", js, re.S).group(0)
    script = f"{strings}\nconst S = STRINGS.en;\n{t}\n{fn}\nconsole.log(JSON.stringify([0, 1, 2, 30].map(lensRowName)));"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["layer 0 (embeddings)", "layer 1", "layer 2", "layer 30"]


def test_blocks_count_from_zero_and_negative_numbers_from_the_end(cli):
    n_layer = load(TINY_LLAMA).config.n_layer  # 3 blocks; residual indices 0-3
    attn = json.loads(cli("attn", TEXT, "-m", TINY_LLAMA, "--block", "-1", "--json").stdout)
    assert attn["blocks"] == [n_layer - 1]
    old_name = json.loads(cli("attn", TEXT, "-m", TINY_LLAMA, "--layer", "1", "--json").stdout)
    assert old_name["blocks"] == [1]
    neurons = json.loads(cli("neurons", TEXT, "-m", TINY_LLAMA, "--block", "-1", "--json").stdout)
    assert neurons["block"] == n_layer - 1
    last = json.loads(cli("embed", "similarity", "a", "b", "-m", TINY_LLAMA, "--layer", "-1", "--json").stdout)
    same = json.loads(cli("embed", "similarity", "a", "b", "-m", TINY_LLAMA, "--layer", str(n_layer), "--json").stdout)
    assert last["query"]["layer"] == same["query"]["layer"] == n_layer and last["cosine"] == same["cosine"]
    r = cli("embed", "similarity", "a", "b", "-m", TINY_LLAMA, "--layer", str(-(n_layer + 2)))
    assert r.exit_code == 2 and f"0 (the embeddings) to {n_layer} (-1 = the last)" in r.stderr


def test_the_readme_states_the_numbering_once():
    from conftest import doc_text

    readme = doc_text()  # README.md and docs/
    assert readme.count("### Blocks and residual indices") == 1
    assert "tfcli neurons \"text\" --layer" not in readme and "--layer 0 --head 0" not in readme



LAYER_WORD = __import__("re").compile(r"\blayers?\b|层")  # "layer" is never a block's name nor a residual index's


@pytest.mark.parametrize("args", [
    ["lens", "ROMEO:"], ["lens", "ROMEO:", "--position", "-1"], ["lens", "--compare", "ROMEO", "JULIET"],
    ["lens", "ROMEO:", "--lang", "zh"], ["lens", "--compare", "ROMEO", "JULIET", "--lang", "zh"],
    ["models"], ["show", "shakespeare"], ["params"], ["attn", "--explain"], ["attn", "--explain", "--lang", "zh"],
    ["embed", "similarity", "a", "b", "--resid", "2"], ["embed", "similarity", "a", "b", "--resid", "2", "--lang", "zh"],
    ["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e"], ["ablate", "ROMEO:"], ["heads", "ROMEO:"],
    ["steer", "ROMEO:", "--toward", "love", "--away", "hate", "--block", "1", "-n", "3", "-t", "0"],
])  # fmt: skip
def test_one_numbering_and_one_word_in_every_header(cli, args, tmp_path):
    """shakespeare has L = 4 blocks (0-3) and residual indices 0-4: what a command prints calls a
    block a block and a residual index a residual index, never a "layer"."""
    model = [] if args[0] in ("models", "show") else ["-m", "shakespeare"]
    r = cli(*args, *model)
    assert r.exit_code == 0, r.stderr
    said = r.stdout + r.stderr
    assert not LAYER_WORD.search(said), LAYER_WORD.search(said).group(0) + " in: " + said
    if args[0] in ("models", "show", "params") or args[:2] == ["lens", "ROMEO:"]:
        assert "4 blocks" in said or "4 个块" in said


def test_one_numbering_in_json(cli, tmp_path):
    L = 4
    lens = json.loads(cli("lens", "ROMEO:", "-m", "shakespeare", "--json").stdout)
    assert [e["resid"] for e in lens["layers"]] == [e["layer"] for e in lens["layers"]] == list(range(L + 1))  # "layer" kept for old readers
    assert json.loads(cli("params", "-m", "shakespeare", "--json").stdout)["shape"]["blocks"] == L
    assert json.loads(cli("show", "shakespeare", "--json").stdout)["shape"]["blocks"] == L
    patch = json.loads(cli("patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "-m", "shakespeare", "--json").stdout)
    assert [g["resid"] for g in patch["grid"]] == list(range(L + 1))
    mlp = json.loads(cli("patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "-m", "shakespeare", "--site", "mlp", "--json").stdout)
    assert [g["block"] for g in mlp["grid"]] == list(range(L))
    steer = json.loads(cli("steer", "ROMEO:", "--toward", "a", "--away", "b", "--block", "-1", "-n", "2", "-t", "0", "-m", "shakespeare", "--json").stdout)
    assert steer["block"] == steer["layer"] == L - 1
    old = json.loads(cli("steer", "ROMEO:", "--toward", "a", "--away", "b", "--layer", "2", "-n", "2", "-t", "0", "-m", "shakespeare", "--json").stdout)
    assert old["block"] == 2  # --layer: the older name of --block
    embed = json.loads(cli("embed", "similarity", "a", "b", "--resid", "-1", "-m", "shakespeare", "--json").stdout)
    assert embed["query"]["resid"] == embed["query"]["layer"] == L


def test_the_numbering_is_declared_once():
    from tfcli import numbering

    from conftest import doc_text

    readme = doc_text()  # README.md and docs/
    assert readme.count("### Blocks and residual indices") == 1
    assert numbering.blocks(4) == "4 blocks" and numbering.blocks(1) == "1 block" and numbering.resid_name(0) == "0 emb"
