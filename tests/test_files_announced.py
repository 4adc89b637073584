"""Every file a command writes is announced (issue 49 item 4): one line on stderr, "wrote FILE"
(已写入 under zh) with what it holds, never on stdout, and the file is there."""

from __future__ import annotations

import pytest

from conftest import TINY_LLAMA

WRITES = [
    ["attn", "To be", "--png", "{f}.png"],
    ["attn", "To be", "--svg", "{f}.svg"],
    ["attn", "To be", "--csv", "{f}.csv"],
    ["attn", "--steps", "To be", "--png", "{f}.png"],
    ["attn", "--show-mask", "To be", "--svg", "{f}.svg"],
    ["lens", "To be", "--png", "{f}.png"],
    ["geometry", "--svg", "{f}.svg"],
    ["ablate", "To be", "--png", "{f}.png"],
    ["patch", "hello world", "hello wirld", "--answer", "d", "--wrong", "x", "-m", TINY_LLAMA, "--svg", "{f}.svg"],
    ["explore", "To be", "-o", "{f}.html"],
    ["steer", "To be", "--toward", "love", "--away", "hate", "--block", "1", "-n", "2", "-t", "0", "--save", "{f}.npz"],
]  # fmt: skip


@pytest.mark.parametrize("args", WRITES, ids=[" ".join([a[0], *a[1:2] * a[1].startswith("--"), a[-2]]) for a in WRITES])
def test_a_written_file_is_announced(cli, tmp_path, args):
    path = str(tmp_path / "out")
    args = [str(a).replace("{f}", path) for a in args]
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    written = args[-1]
    flat = " ".join(r.stderr.split())
    assert f"wrote {written}" in flat and written not in r.stdout, r.stderr
    assert (tmp_path / written.rsplit("/", 1)[1]).stat().st_size > 0


def test_features_top_html_is_announced_in_either_language(cli, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("ROMEO: But soft, what light through yonder window breaks? It is the east. " * 30, encoding="utf-8")
    r = cli("features", "train", text, "-o", tmp_path / "sae", "--steps", "4", "--batch-size", "64", "--buffer",
            "512", "--features", "32")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    for lang, said in (("en", "wrote"), ("zh", "已写入")):
        page = tmp_path / f"cards-{lang}.html"
        r = cli("features", "top", tmp_path / "sae", text, "-n", "2", "--html", page, "--lang", lang)
        assert r.exit_code == 0 and page.stat().st_size > 0, r.stderr
        assert f"{said} {page}" in " ".join(r.stderr.split()) and str(page) not in r.stdout, r.stderr
