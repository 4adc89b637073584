"""Everyday use, fourth round (issue 35), the rest:

- generate shows the prompt, then its continuation, at a terminal and piped alike; a slow writer's
  prompt is waited for; a list's samples are printed as the README says;
- patch --png draws signed effects on a signed scale, under a plain title;
- models says what a cache entry made from a GGUF file is; train --png's last label sits at the
  curve's end;
- --lang zh leaves no English phrase in the commands that offer it (params, bilingual, says each
  in Chinese too).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TFCLI_HOME=str(tmp_path))


# --- generate: one rule for the prompt --------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--show-probs", "2"]], ids=["streamed", "show-probs"])
def test_piped_generate_shows_the_prompt_then_its_continuation(cli, extra):
    r = cli("generate", "ROMEO:", "-n", "5", "-t", "0", *extra)
    assert r.exit_code == 0, r.stderr
    alone = cli("generate", "ROMEO:", "-n", "5", "-t", "0", "--json").stdout
    import json

    assert r.stdout == "ROMEO:" + json.loads(alone)["text"] + "\n"


def test_a_prompt_piped_in_is_shown_too_and_no_prompt_shows_none(cli):
    piped = cli("generate", "-n", "5", "-t", "0", input="ROMEO:")
    assert piped.exit_code == 0 and piped.stdout.startswith("ROMEO:")
    bare = cli("generate", "-n", "5", "-t", "0")  # a newline starts it: nothing to show before the text
    assert bare.exit_code == 0 and not bare.stdout.startswith("ROMEO:") and "1 prompt token ·" in bare.stderr


def test_each_sample_of_a_list_is_a_whole_text(cli):
    r = cli("generate", "ROMEO:", "-t", "0.2,0.8,1.5", "-n", "5", "--seed", "1")
    assert r.exit_code == 0, r.stderr
    blocks = r.stdout.split("── sample ")[1:]
    assert len(blocks) == 3 and all(b.split("──\n", 1)[1].startswith("ROMEO:") for b in blocks)  # piped: one after another


def test_a_list_fits_side_by_side_in_80_columns():
    from tfcli.cli.views.generate import side_by_side

    assert side_by_side(3, 80) and not side_by_side(4, 80)  # the README's -t 0.2,0.8,1.5 at a terminal of 80


def test_the_help_says_the_prompt_is_shown(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    help_text = " ".join(cli("generate", "--help").stdout.split())
    assert "stdout holds the prompt and then its continuation" in help_text and "piped" in help_text


def test_a_slow_writers_prompt_is_waited_for(tmp_path):
    """`(sleep 1.5; echo ROMEO:) | tfcli generate`: the wait is said, and the prompt that arrives
    after it is used, not dropped. The prompt is written once tfcli has said it waits (on a loaded
    machine its start-up alone can outlast a fixed sleep)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "tfcli", "generate", "-n", "3", "-t", "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path), cwd=ROOT,
    )  # fmt: skip
    said: list[bytes] = []

    def read_until_the_wait_is_said() -> None:
        while not said or (said[-1] and b"waiting for the prompt" not in said[-1]):
            said.append(p.stderr.readline())

    reader = threading.Thread(target=read_until_the_wait_is_said, daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert said and b"waiting for the prompt piped to stdin" in said[-1], said  # the wait was said
    out, err = p.communicate(b"ROMEO:", timeout=60)
    assert p.returncode == 0, err
    assert b"6 prompt tokens" in err and out.startswith(b"ROMEO:")


def test_an_empty_pipe_starts_from_a_newline(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tfcli", "generate", "-n", "3", "-t", "0"], input=b"", capture_output=True, env=_env(tmp_path), cwd=ROOT, timeout=60)
    assert r.returncode == 0 and b"1 prompt token \xc2\xb7" in r.stderr


# --- patch --png: a signed scale, a plain title --------------------------------------------------


def test_a_signed_picture_draws_negatives_blue_and_has_no_masked_swatch():
    import numpy as np

    from tfcli.cli.views import images

    values = np.array([[-0.2, 0.0, 1.0]])
    panel = images.Panel("t", values, np.ones(values.shape, dtype=bool), ["emb"], ["a", "b", "c"])
    d = images.layout([[panel]], "h", measure=images.estimate, signed=1.0)
    cells = d.bitmaps[0][4][0]  # [C, 3] of the one row
    assert tuple(cells[1]) == images.ZERO and cells[0][2] > cells[0][0]  # -0.2: bluish, not the colour of 0
    assert tuple(cells[2]) == images.POSITIVE
    texts = [t[2] for t in d.texts]
    assert images.MASKED_LABEL not in texts and "-1.00" in texts and "+1.00" in texts and "0" in texts
    masked = images.Panel("t", np.zeros((2, 2)), np.array([[True, False], [True, True]]), ["a", "b"], ["a", "b"])
    assert images.MASKED_LABEL in [t[2] for t in images.layout([[masked]], "h", measure=images.estimate).texts]  # attention: still said
    unmasked = images.Panel("t", np.zeros((2, 2)), np.ones((2, 2), dtype=bool), ["a", "b"], ["a", "b"])
    assert images.MASKED_LABEL not in [t[2] for t in images.layout([[unmasked]], "h", measure=images.estimate).texts]  # lens: nothing masked


@pytest.mark.parametrize("args", [
    ["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e"],
    ["ablate", "ROMEO:"],
])  # fmt: skip
def test_experiment_pictures_are_signed_under_a_plain_title(cli, tmp_path, args):
    r = cli(*args, "-m", "shakespeare", "--svg", tmp_path / "x.svg")
    assert r.exit_code == 0, r.stderr
    svg = (tmp_path / "x.svg").read_text()
    assert "masked" not in svg and "activation patching (" not in svg
    assert ">0</text>" in svg and ">-" in svg  # a bar from -top through 0 to +top
    assert "how much of the answer" in svg or "taken out" in svg


# --- models: a cache entry made by -m FILE.gguf --------------------------------------------------


def test_models_says_a_gguf_entry_is_not_pulled(cli, tmp_path):
    import json

    from test_gguf import MIXED, write_gguf

    gguf = write_gguf(tmp_path / "tiny-mixed.gguf", types=MIXED, alignment=64)
    assert cli("generate", "-m", gguf, "hi", "-n", "1", "-t", "0").exit_code == 0
    r = cli("models")
    line = next(x for x in r.stdout.splitlines() if x.startswith("tiny-mixed"))
    assert "gguf" in line and "pulled" not in line
    assert f"runs {gguf} in place" in " ".join(r.stdout.split())  # however the line wraps
    rows = {m["name"]: m for m in json.loads(cli("models", "--json").stdout)["models"]}
    entry = next(m for n, m in rows.items() if n.startswith("tiny-mixed"))
    assert entry["kind"] == "pulled" and entry["gguf_file"] == str(gguf.resolve())  # the kind programs read is kept
    assert rows["shakespeare"]["gguf_file"] is None
    r = cli("show", gguf)  # show labels it as models does
    assert r.exit_code == 0 and "(gguf)" in r.stdout and "(pulled)" not in r.stdout, r.stdout
    shown = json.loads(cli("show", gguf, "--json").stdout)
    assert shown["kind"] == "pulled" and shown["gguf_file"] == str(gguf.resolve())
    assert json.loads(cli("show", "shakespeare", "--json").stdout)["gguf_file"] is None


# --- train --png: the last step's label under the curve's end ------------------------------------


def test_the_last_steps_label_ends_where_the_curve_ends(tmp_path):
    import numpy as np
    from PIL import Image

    from tfcli.cli.views.curve import Series, write_png

    write_png(tmp_path / "c.png", [Series("train", list(range(1, 101)), list(np.linspace(3, 1, 100)))], "t")
    img = np.asarray(Image.open(tmp_path / "c.png").convert("L"))  # [h, w]
    h, w = img.shape
    band = img[h - 40 + 4 : h - 40 + 20]  # the labels under the x axis
    ink = np.nonzero((band < 128).any(axis=0))[0]
    curve_end = w - 16  # the plot's right edge: step 100
    assert curve_end - 8 <= ink.max() <= curve_end + 1


# --- --lang zh: no English sentence ----------------------------------------------------------------

ZH = "今天天气很好"


def english_sentences(text: str) -> list[str]:
    """Runs of three or more English words in a row (between spaces, commas, colons, brackets, '·'
    or '-'): a phrase left untranslated. Names, numbers, tokens ('…' and "…"), flags (--scale) and
    paths are not words here."""
    import re

    found = []
    for line in text.splitlines():
        line = re.sub(r"'[^']*'|\"[^\"]*\"|--?[\w-]+|\S*/\S*|\S+\.(?:html|png|svg|npz)", " ", line)
        found += [m.group(0) for m in re.finditer(r"\b[A-Za-z]{2,}(?:[ ,:;()·-]+[A-Za-z]{2,}){2,}\b", line)]
    return found


@pytest.mark.parametrize("args", [
    ["ablate", "ROMEO:", "-m", "shakespeare"],
    ["heads", "ROMEO:", "-m", "shakespeare"],
    ["patch", "ROMEO:", "JULIE:", "--answer", " ", "--wrong", "e", "-m", "shakespeare"],
    ["steer", "ROMEO:", "--toward", "love", "--away", "hate", "--block", "1", "-n", "3", "-t", "0", "-m", "shakespeare"],
    ["attn", "-m", "tang", ZH],
    ["attn", "--show-mask", ZH],
    ["lens", "-m", "tang", ZH],
    ["neurons", ZH, "-m", "tang", "--block", "1"],
    ["embed", "neighbors", "天", "-m", "tang"],
    ["geometry", "-m", "tang"],
    ["explore", "-m", "tang", ZH, "-o", "{tmp}/page.html"],
])  # fmt: skip
def test_lang_zh_leaves_no_english_sentence(cli, tmp_path, args):
    r = cli(*[a.replace("{tmp}", str(tmp_path)) for a in args], "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "tok/s" not in line]
    assert english_sentences(r.stdout) == [], r.stdout
    assert english_sentences("\n".join(said)) == [], r.stderr


def _untranslated_words(lines: list[str]) -> list[str]:
    """English words of a table (its lines are indented; its cells apart by two spaces or more)
    without Chinese under them. A word is a letter, then lowercase letters: GELU, W_Q, d_model,
    FLOPs and the axis Hkv are names. A cell with a word needs a Chinese character in its columns
    on the next line, or the line after when the English wraps once (the next line has text in
    those columns): a formula's words and a unit after a number under themselves; a note (a line of
    one cell after a Chinese name) under itself."""
    import re

    from rich.cells import cell_len

    cjk = re.compile("[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
    word = re.compile(r"(?<![\w'’])(?!Hkv\b)[A-Za-z][a-z]{2,}(?![\w'’])")

    def cells(line: str) -> list[tuple[int, int, str]]:  # (first cell, past the last cell, text)
        return [(cell_len(line[: m.start()]), cell_len(line[: m.end()]), m.group(0)) for m in re.finditer(r"\S+(?: \S+)*", line)]

    def chinese_under(line: str, a: int, b: int) -> bool:
        x = 0
        for ch in line:
            w = cell_len(ch)
            if cjk.match(ch) and x < b and x + w > a:
                return True
            x += w
        return False

    table = [line if line.startswith(" ") else "" for line in lines] + ["", ""]
    found = []
    for i, line in enumerate(table[:-2]):
        row = cells(line)
        for k, (a, b, text) in enumerate(row):
            if not word.search(text):
                continue
            note = len(row) == 1 and i > 0 and bool(cjk.search(table[i - 1]))
            nxt = [c for c in cells(table[i + 1]) if c[0] < b and c[1] > a]  # the next line's text in these columns
            wraps = bool(nxt) and not chinese_under(table[i + 1], a, b) and (len(cells(table[i + 1])) == 1 if note else True)
            if not (chinese_under(table[i + 1], a, b) or (wraps and chinese_under(table[i + 2], a, b))):
                found.append(f"{text!r} in {line.strip()!r}")
    return found


@pytest.mark.parametrize("preset", ["gpt3", "smollm2-135m", "qwen3-0.6b", "gemma-3-270m"])
def test_params_in_chinese_says_each_english_sentence_in_chinese_too(cli, monkeypatch, preset):
    """params --lang zh is bilingual (its help says so): each English sentence has its Chinese
    right under it, each English word of a table (a name, a formula's words, a note, a unit) its
    Chinese in the same columns, and the Chinese is wrapped between characters, not at its spaces."""
    import re

    monkeypatch.setenv("COLUMNS", "80")
    r = cli("params", "--preset", preset, "--lang", "zh")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    cjk = re.compile("[\u4e00-\u9fff]")

    def paragraph(i: int) -> list[str]:  # the line and those after it, up to a blank line
        end = next((j for j in range(i, len(lines)) if not lines[j].strip()), len(lines))
        return lines[i:end]

    alone = [line for i, line in enumerate(lines) if english_sentences(line) and not any(cjk.search(x) for x in paragraph(i))]
    assert alone == [], r.stdout
    assert _untranslated_words(lines) == [], r.stdout
    assert not re.search(r"…$", r.stdout, re.M), r.stdout  # nothing cut, in either language (a cut cell ends in '…')
    for head in ("个块", "词表", "公式", "参数"):
        assert head in r.stdout, head
