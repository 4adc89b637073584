"""tfcli explore: the numbers the page stores, the command's errors, and the page itself in a real
headless Chromium (driven by Selenium; skipped with the reason when either is missing)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tfcli.analysis import explore as ex
from tfcli.engine.inspect import Recorder
from tfcli.engine.sampling import Sampler, SamplingParams
from tfcli.store import load

from conftest import EPS32, TINY_GPT2, TINY_LLAMA, one_line_error
from tfcli.engine.fast import FAST

ROOT = Path(__file__).resolve().parent.parent
CHINESE = "今天天气很好"
SHAKESPEARE = "To be, or not to be, that is the question"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# A weight the page holds against tfcli's own, computed apart (the command's threaded prompt pass
# sums in another order): half a step of 1/65535, and 24 float32 steps of the largest weight (1).
DRAWN = 0.5 / ex.QUANT + 24 * EPS32


# --- what the page stores -------------------------------------------------------------------


def _weights(model, ids):
    rec = Recorder(attention=True)
    model.forward(np.asarray(ids), model.new_cache(len(ids)), hooks=rec, run=FAST)
    return np.stack([rec.attn[i] for i in range(model.config.n_layer)])  # [L, H, T, T]


@pytest.mark.parametrize("path", [TINY_GPT2, TINY_LLAMA])
def test_exploration_is_the_forward_pass(path):
    lm = load(path)
    ids = lm.tokenizer.prompt("hello world, hello there")
    run = ex.explore(lm.model, ids, run=FAST)  # as the page runs it
    t_len, cfg = len(ids), lm.config
    np.testing.assert_array_equal(run.attn, _weights(lm.model, ids))
    logits = lm.model.forward(np.asarray(ids), lm.model.new_cache(t_len), all_logits=True, run=FAST)  # [T, V]
    order = np.argsort(-logits, axis=1, kind="stable")[:, : ex.NEXT_TOP]
    np.testing.assert_array_equal(run.next_ids, order)
    np.testing.assert_array_equal(run.next_logits, np.take_along_axis(logits, order, axis=1))
    p = np.exp(logits.astype(np.float64) - run.next_lse[:, None])
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5)
    # The lens of the last layer is the model's own output; of the embeddings, the norm of the embeddings.
    top = np.exp(np.take_along_axis(logits, order[:, : ex.LENS_TOP], axis=1) - run.next_lse[:, None])
    np.testing.assert_array_equal(run.lens_ids[-1], order[:, : ex.LENS_TOP])
    np.testing.assert_allclose(run.lens_p[-1], top, rtol=1e-4, atol=1e-7)
    assert run.lens_ids.shape == (cfg.n_layer + 1, t_len, ex.LENS_TOP)


def test_packed_attention_is_the_lower_triangle_in_steps_of_one_65535th():
    lm = load(TINY_LLAMA)
    ids = lm.tokenizer.prompt("one two three four")
    run = ex.explore(lm.model, ids)
    packed = ex.packed(run)["attn"]  # [L, H, T(T+1)/2]
    t_len = len(ids)
    assert packed.dtype == np.dtype("<u2") and packed.shape[-1] == t_len * (t_len + 1) // 2
    for q in range(t_len):
        row = packed[..., q * (q + 1) // 2 : q * (q + 1) // 2 + q + 1] / ex.QUANT  # [L, H, q+1]
        np.testing.assert_allclose(row, run.attn[..., q, : q + 1], atol=0.5 / ex.QUANT + 1e-7)


def test_parameter_totals_are_the_tensors_in_the_file():
    from tfcli.engine.weightfile import read_header

    for path in (TINY_GPT2, TINY_LLAMA, ROOT / "weights" / "tang"):
        lm = load(path)
        _, tensors = read_header(path / "model.safetensors")
        assert ex.parameter_totals(lm.config)["exact"] == sum(t.numel for t in tensors.values())


def test_token_limit_follows_the_attention_budget():
    from dataclasses import replace

    cfg = load(TINY_GPT2).config
    assert ex.token_limit(cfg) == min(ex.MAX_TOKENS, cfg.n_ctx)
    smollm2 = replace(cfg, n_layer=30, n_head=9, n_kv_head=3, n_ctx=8192)
    assert ex.token_limit(smollm2) == ex.MAX_TOKENS  # 270 heads x 128 x 129 / 2 fits the budget
    deep = replace(cfg, n_layer=80, n_head=64, n_kv_head=8, n_ctx=8192)
    t = ex.token_limit(deep)
    assert 80 * 64 * t * (t + 1) // 2 <= ex.CELL_BUDGET < 80 * 64 * (t + 1) * (t + 2) // 2


# --- the command ----------------------------------------------------------------------------


def _page_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="tfcli-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def _array(data: dict, name: str) -> np.ndarray:
    a = data["arrays"][name]
    return np.frombuffer(base64.b64decode(a["b64"]), dtype=a["dtype"]).reshape(a["shape"])


def test_page_is_one_file_that_asks_for_nothing(cli, tmp_path):
    page = tmp_path / "page.html"
    r = cli("explore", SHAKESPEARE, "-o", page)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "" and f"wrote {page}" in " ".join(r.stderr.split())  # a long path goes on a line of its own
    html = page.read_text(encoding="utf-8")
    assert "default-src 'none'" in html  # the browser itself refuses any fetch
    assert not re.search(r"https?://", html)  # no address of anything anywhere
    assert not re.search(r"<(link|script|img|iframe)[^>]+(src|href)=\"(?!data:)", html)
    assert "{{" not in html.replace(json.dumps(SHAKESPEARE), "")
    data = _page_data(html)
    assert data["text"] == SHAKESPEARE and data["model"] == "shakespeare"
    assert [t["label"] for t in data["tokens"]][:3] == ["T", "o", "␣"]
    assert not list(tmp_path.glob(".page.html.*"))  # the temporary file is gone


def test_page_to_stdout_and_escaped_text(cli):
    text = "</script><b>x & y</b>"
    r = cli("explore", text, "-o", "-")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.count("</script>") == 2  # the data's and the code's, not the text's
    assert _page_data(r.stdout)["text"] == text


def test_shipped_model_pages_are_small(cli, tmp_path):
    for model, text in (("shakespeare", (SHAKESPEARE + " ") * 3), ("tang", CHINESE * 10)):
        page = tmp_path / f"{model}.html"
        r = cli("explore", "-m", model, text[:64], "-o", page)
        assert r.exit_code == 0, r.stderr
        assert page.stat().st_size < 400_000, (model, page.stat().st_size)  # SmolLM2's may be 5 MB




def test_bad_input_is_one_line_and_leaves_no_page(cli, tmp_path):
    page = tmp_path / "page.html"
    one_line_error(cli("explore", "", "-o", page), 2, "empty")
    one_line_error(cli("explore", "-o", page), 2, "Missing argument")
    one_line_error(cli("explore", "x" * 200, "-o", page), 2, "200 tokens", "at most 128", "shorten")
    one_line_error(cli("explore", "-m", "tang", "好" * 200, "-o", page), 2, "200 tokens but tang's context is 128")
    one_line_error(cli("explore", "hello", "-o", tmp_path / "no" / "such" / "page.html"), 1, "cannot write")
    (tmp_path / "file").write_text("")
    one_line_error(cli("explore", "hello", "-o", tmp_path / "file" / "page.html"), 1, "cannot write")
    one_line_error(cli("explore", "hello", "-o", tmp_path), 2, "is a directory")
    bare = tmp_path / "bare"
    shutil.copytree(TINY_GPT2, bare)
    (bare / "tokenizer.json").unlink()
    one_line_error(cli("explore", "hello", "-m", bare, "-o", page), 1, "tokenizer.json")
    one_line_error(cli("explore", "hello", "--lang", "fr", "-o", page), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare", "file"]  # no page, no temporary file


def test_the_limit_of_a_model_with_many_heads_says_why(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "CELL_BUDGET", 32 * 10 * 11 // 2)  # shakespeare's 4 x 8 heads over 10 tokens
    one_line_error(cli("explore", "To be, or not", "-o", tmp_path / "p.html"), 2, "13 tokens", "at most 10", "4 x 8 heads")
    assert cli("explore", "To be, or", "-o", tmp_path / "p.html").exit_code == 0


def test_an_old_page_survives_a_failed_run(cli, tmp_path, monkeypatch):
    page = tmp_path / "page.html"
    page.write_text("old")
    one_line_error(cli("explore", "x" * 200, "-o", page), 2)
    assert page.read_text() == "old"

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr("tfcli.cli.explore.page_html", interrupted)  # Ctrl-C while the page is made
    assert cli("explore", "hello", "-o", page).exit_code == 130  # (the test runner takes the Ctrl-C's message)
    assert page.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_text_from_stdin(cli):
    r = cli("explore", "-", "-o", "-", input="To be\n")
    assert r.exit_code == 0, r.stderr
    data = _page_data(r.stdout)
    assert data["text"] == "To be\n" and data["tokens"][-1]["label"] == "⏎"


# --- the page in a real browser ---------------------------------------------------------------


def _driver_or_skip():
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
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


@pytest.fixture(scope="module")
def browser():
    driver = _driver_or_skip()
    yield driver
    driver.quit()


def _open(browser, page: Path, timeout: float = 10.0) -> float:
    """Load the page from its file, as a double click would; -> seconds until it drew everything."""
    browser.get_log("browser")  # forget what earlier pages logged
    start = time.monotonic()
    browser.get(page.as_uri())
    while browser.execute_script("return document.body && document.body.dataset.ready") != "1":
        assert time.monotonic() - start < timeout, browser.get_log("browser")
        time.sleep(0.05)
    return time.monotonic() - start


def _assert_clean(browser):
    logs = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not logs, logs
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Pages made by the command for the shipped models and the GQA test checkpoint, with their data."""
    from typer.testing import CliRunner

    from tfcli.cli import app

    out = tmp_path_factory.mktemp("pages")
    made = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TFCLI_HOME", str(out / "tfcli-home"))  # never the user's model cache
        for name, args in (
            ("shakespeare", [SHAKESPEARE]),
            ("tang", ["-m", "tang", CHINESE, "--lang", "zh"]),
            ("llama", ["-m", str(TINY_LLAMA), "hello world, hello there"]),
        ):
            page = out / f"{name}.html"
            r = CliRunner().invoke(app, ["explore", *args, "-o", str(page)])
            assert r.exit_code == 0, r.stderr
            made[name] = (page, _page_data(page.read_text(encoding="utf-8")))
    return made


def test_page_loads_without_errors_or_requests(browser, pages):
    for page, _ in pages.values():
        _open(browser, page)
        _assert_clean(browser)
        for tab in ("lens", "next", "model", "attention"):
            browser.find_element("id", f"tab-{tab}").click()
            assert browser.find_element("id", f"view-{tab}").is_displayed()
        _assert_clean(browser)


def test_picking_a_layer_and_a_head_draws_its_weights(browser, pages):
    from selenium.webdriver.support.ui import Select

    page, data = pages["shakespeare"]
    lm = load("shakespeare")
    ids = [t["id"] for t in data["tokens"]]
    ref = _weights(lm.model, ids)  # [L, H, T, T], computed by tfcli here, apart from the page
    _open(browser, page)
    t_len = len(ids)
    for layer, head in ((2, 5), (3, 1), (0, 7)):
        Select(browser.find_element("id", "layer")).select_by_value(str(layer))
        Select(browser.find_element("id", "head")).select_by_value(str(head))
        cells = browser.execute_script(
            "return Array.from(document.querySelectorAll('#heatmap-svg rect.c'), r => [+r.dataset.q, +r.dataset.k, +r.dataset.w])"
        )
        svg = browser.find_element("id", "heatmap-svg")
        assert (svg.get_attribute("data-layer"), svg.get_attribute("data-head")) == (str(layer), str(head))
        assert len(cells) == t_len * (t_len + 1) // 2
        drawn = np.zeros((t_len, t_len))
        for q, k, w in cells:
            drawn[q, k] = w
        np.testing.assert_allclose(drawn, ref[layer, head], atol=DRAWN)
        lines = browser.execute_script(
            "return Array.from(document.querySelectorAll('#headview-svg line.w'), l => [+l.dataset.h, +l.dataset.q, +l.dataset.k, +l.dataset.w, +l.getAttribute('stroke-opacity')])"
        )
        assert {h for h, *_ in lines} == {head}
        # drawn: [T, T] what the page holds; the faint are cut
        assert {(q, k) for _, q, k, _, _ in lines} == {(int(q), int(k)) for q, k in zip(*np.nonzero(drawn >= 0.005))}
        for _, q, k, w, opacity in lines:
            assert abs(w - ref[layer, head, q, k]) <= DRAWN and abs(opacity - w) < 1e-4
    browser.find_element("id", "allheads").click()
    assert browser.execute_script("return new Set(Array.from(document.querySelectorAll('#headview-svg line.w'), l => l.dataset.h)).size") == 8


def test_hovering_a_token_isolates_its_row(browser, pages):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    page, data = pages["llama"]
    ref = _weights(load(TINY_LLAMA).model, [t["id"] for t in data["tokens"]])  # [L, H, T, T]
    _open(browser, page)
    t_len = len(data["tokens"])
    visible = "return Array.from(document.querySelectorAll('#headview-svg line.w')).filter(l => l.style.display !== 'none').map(l => [+l.dataset.q, +l.dataset.k])"
    everything = browser.execute_script(visible)
    for i in (t_len - 1, 2):
        token = browser.find_element("css selector", f'#headview-svg .tok[data-side="q"][data-i="{i}"]')
        ActionChains(browser).move_to_element(token).perform()
        row = browser.execute_script(visible)
        assert row and {q for q, _ in row} == {i}
        assert sorted(row) == sorted(x for x in everything if x[0] == i)  # all of the row, nothing else
        values = browser.execute_script("return Array.from(document.querySelectorAll('#headview-svg .tok[data-side=\"k\"] .wv'), t => t.textContent)")
        assert values == [f"{w:.3f}" for w in ref[0, 0, i, : i + 1]] + [""] * (t_len - i - 1)  # the row's weights, beside its keys
    ActionChains(browser).move_to_element(browser.find_element("id", "layer")).perform()
    assert len(browser.execute_script(visible)) == len(everything)
    # The keyboard reaches the same: focus a token, arrow down to the next one.
    browser.execute_script("document.querySelector('#headview-svg .tok[data-i=\"0\"]').focus()")
    browser.switch_to.active_element.send_keys(Keys.ARROW_DOWN)
    assert {q for q, _ in browser.execute_script(visible)} == {1}
    # GQA: the page says which query heads share a key/value head (tiny-llama: 6 heads, 2 kv heads).
    assert "heads 0, 1, 2 share kv head 0" in browser.find_element("id", "gqa").text


def _shown_probs(browser) -> dict[int, float]:
    rows = browser.execute_script("return Array.from(document.querySelectorAll('#next-table tbody tr'), r => [+r.dataset.id, r.dataset.p])")
    return {i: float(p) for i, p in rows}


def _sampler(logits, ids, **knobs) -> dict[int, float]:
    """tfcli's Sampler on the stored candidates' logits (as a vocabulary of N tokens)."""
    s = Sampler(SamplingParams(repetition_penalty=1.0, **knobs))
    keep, probs = s.candidates(logits.copy(), [])
    out = {int(i): 0.0 for i in ids}
    out.update({int(ids[j]): float(p) for j, p in zip(keep, probs)})
    return out


def test_moving_the_temperature_gives_the_samplers_probabilities(browser, pages):
    from selenium.webdriver.common.keys import Keys

    page, data = pages["shakespeare"]
    logits_all, ids_all = _array(data, "next_logits"), _array(data, "next_ids")
    _open(browser, page)
    browser.find_element("id", "tab-next").click()
    s = data["sampling"]
    pos = len(data["tokens"]) - 1
    knobs = {"temperature": s["temperature"], "top_k": s["top_k"], "top_p": s["top_p"], "min_p": s["min_p"]}
    np.testing.assert_allclose(list(_shown_probs(browser).values()), list(_sampler(logits_all[pos], ids_all[pos], **knobs).values()), atol=1e-6)
    slider = browser.find_element("id", "temperature")
    before = _shown_probs(browser)
    for _ in range(40):  # the keyboard moves it, 0.01 a step
        slider.send_keys(Keys.ARROW_RIGHT)
    knobs["temperature"] = float(slider.get_attribute("value"))
    assert abs(knobs["temperature"] - (s["temperature"] + 0.4)) < 1e-9
    shown = _shown_probs(browser)
    assert shown != before
    want = _sampler(logits_all[pos], ids_all[pos], **knobs)
    assert shown.keys() == want.keys()
    np.testing.assert_allclose([shown[i] for i in want], list(want.values()), atol=1e-6)
    # Other positions and settings, set the way a user's input would (an input event).
    for pos, knobs in (
        (3, {"temperature": 1.7, "top_k": 0, "top_p": 1.0, "min_p": 0.0}),
        (10, {"temperature": 0.35, "top_k": 3, "top_p": 1.0, "min_p": 0.0}),
        (20, {"temperature": 1.2, "top_k": 0, "top_p": 0.6, "min_p": 0.0}),
        (20, {"temperature": 1.0, "top_k": 20, "top_p": 0.9, "min_p": 0.1}),
        (5, {"temperature": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05}),
    ):
        browser.find_element("css selector", f'#positions button[data-pos="{pos}"]').click()
        for name, value in knobs.items():
            browser.execute_script("const e = document.getElementById(arguments[0]); e.value = arguments[1]; e.dispatchEvent(new Event('input'))", name, str(value))
        assert json.loads(browser.find_element("id", "next-table").get_attribute("data-knobs")) == knobs
        shown, want = _shown_probs(browser), _sampler(logits_all[pos], ids_all[pos], **knobs)
        np.testing.assert_allclose([shown[i] for i in want], list(want.values()), atol=1e-6, err_msg=str((pos, knobs)))
    _assert_clean(browser)


def test_the_pages_sampler_is_tfcli_sampler_on_random_logits(browser, pages):
    """The page's sampler function against Sampler.candidates on 300 random cases, ties included."""
    rng = np.random.default_rng(0)
    cases = []
    for n in range(300):
        size = int(rng.integers(1, 60))
        logits = rng.normal(0, 3, size).astype(np.float32)
        if n % 3 == 0:
            logits = np.round(logits).astype(np.float32)  # many ties, for top-k's "ties with the k-th are kept"
        knobs = {
            "temperature": float(rng.choice([0.0, 0.3, 0.8, 1.0, 1.7])),
            "top_k": int(rng.choice([0, 1, 3, 10, 40, 80])),
            "top_p": float(rng.choice([1.0, 0.95, 0.5, 0.1])),
            "min_p": float(rng.choice([0.0, 0.05, 0.3])),
        }
        cases.append((logits, knobs))
    _open(browser, pages["llama"][0])
    got = browser.execute_script(
        "return arguments[0].map(([x, k]) => Array.from(samplerProbs(Float32Array.from(x), k.temperature, k.top_k, k.top_p, k.min_p)))",
        [[c[0].tolist(), c[1]] for c in cases],
    )
    for (logits, knobs), probs in zip(cases, got):
        want = _sampler(logits, np.arange(len(logits)), **knobs)
        np.testing.assert_allclose(probs, [want[i] for i in range(len(logits))], atol=1e-6, err_msg=str(knobs))


def _cjk_font() -> bool:
    r = subprocess.run(["fc-list", ":lang=zh-cn", "file"], capture_output=True, text=True) if shutil.which("fc-list") else None
    return bool(r and r.stdout.strip())


def test_chinese_labels_are_drawn(browser, pages):
    if not _cjk_font():
        pytest.skip("no CJK font for the browser (apt install fonts-noto-cjk)")
    page, data = pages["tang"]
    _open(browser, page)
    assert [t["label"] for t in data["tokens"]] == list(CHINESE)
    assert browser.find_element("id", "tab-attention").text == "注意力"
    labels = browser.execute_script("return Array.from(document.querySelectorAll('#headview-svg .tok[data-side=\"q\"] text'), t => [t.textContent, t.getBBox().width])")
    assert [s for s, _ in labels] == list(CHINESE) and all(w > 5 for _, w in labels)
    # Drawn with real glyphs, not the font's "missing" box: each character's pixels differ from a
    # private-use character's, in the page's own font.
    pixels = browser.execute_script(
        """
        const font = '24px ' + getComputedStyle(document.documentElement).fontFamily;
        return Array.from(arguments[0], ch => {
          const c = document.createElement('canvas'); c.width = 32; c.height = 32;
          const g = c.getContext('2d'); g.font = font; g.fillText(ch, 2, 26);
          return Array.from(g.getImageData(0, 0, 32, 32).data.filter((_, i) => i % 4 === 3)).join(',');
        });""",
        list(CHINESE) + ["\U000f0000"],
    )
    tofu = pixels[-1]
    assert all(p != tofu and any(x != "0" for x in p.split(",")) for p in pixels[:-1])
    _assert_clean(browser)


def test_the_lens_shows_tfcli_top_tokens_on_hover(browser, pages):
    from selenium.webdriver.common.action_chains import ActionChains

    page, data = pages["shakespeare"]
    lm = load("shakespeare")
    ids = [t["id"] for t in data["tokens"]]
    rec = Recorder(residual=True)
    lm.model.forward(np.asarray(ids), lm.model.new_cache(len(ids)), hooks=rec, run=FAST)
    _open(browser, page)
    browser.find_element("id", "tab-lens").click()
    for layer, pos in ((2, 7), (-1, 0), (3, 20)):  # -1: the embeddings
        logits = lm.model.unembed(lm.model.final_norm(rec.embedded if layer < 0 else rec.post[layer]), run=FAST)[pos]  # [V]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        top = np.argsort(-p, kind="stable")[: ex.LENS_TOP]
        cell = browser.find_element("css selector", f'#lens-grid td[data-row="{layer + 1}"][data-pos="{pos}"]')
        assert int(cell.get_attribute("data-id")) == top[0]
        assert abs(float(cell.get_attribute("data-p")) - p[top[0]]) <= DRAWN
        ActionChains(browser).move_to_element(cell).perform()
        tip = browser.find_element("id", "lens-tip")
        assert tip.is_displayed()
        rows = [r.text.split()[-1] for r in tip.find_elements("css selector", "tr")]  # '#id' last in each row
        assert rows == [f"#{i}" for i in top]


def test_controls_are_reachable_by_keyboard(browser, pages):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    page, _ = pages["llama"]
    _open(browser, page)
    reached = []
    for _ in range(30):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        reached.append(browser.execute_script("const e = document.activeElement; return e.classList.contains('tok') ? 'tok' : e.id || e.dataset.head || e.tagName"))
    assert reached.index("tab-attention") < reached.index("layer") < reached.index("tok") < reached.index("0")
    for want in ("tab-attention", "layer", "head", "allheads", "heatmap-svg", "0"):  # "0": the first thumbnail
        assert want in reached, reached
    cycle = reached[: reached.index("BODY")]  # once round the page
    assert cycle.count("tok") == 1  # the head view's tokens: one stop, then the arrow keys
    browser.find_element("id", "tab-attention").send_keys(Keys.ARROW_RIGHT)  # the tabs move with arrows too
    assert browser.find_element("id", "view-lens").is_displayed()
    browser.find_element("id", "tab-lens").send_keys(Keys.ARROW_RIGHT)
    reached = []
    for _ in range(12):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        reached.append(browser.execute_script("return document.activeElement.id || document.activeElement.tagName"))
    for want in ("temperature", "top_k", "top_p", "min_p", "reset"):
        assert want in reached, reached
    # A thumbnail picks its head with Enter.
    browser.find_element("id", "tab-attention").click()
    browser.find_element("css selector", '#thumbs button[data-head="4"]').send_keys(Keys.ENTER)
    assert browser.find_element("id", "heatmap-svg").get_attribute("data-head") == "4"


def test_the_page_fits_a_phone_and_every_label_has_a_translation(browser, pages):
    page, _ = pages["tang"]
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
    try:
        _open(browser, page)
        for tab in ("attention", "lens", "next", "model"):
            browser.find_element("id", f"tab-{tab}").click()
            # Wide things (the lens grid, the head view) scroll inside their box; the page itself never does.
            assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1"), tab
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert browser.execute_script("return Object.keys(STRINGS.en).filter(k => !(k in STRINGS.zh))") == []
    assert browser.execute_script("return Object.keys(STRINGS.zh).filter(k => !(k in STRINGS.en))") == []
    assert browser.execute_script("return Array.from(document.querySelectorAll('[data-t]')).filter(e => !e.textContent.trim()).length") == 0


# --- SmolLM2 (slow: the real model, pulled once like tests/test_smollm2.py does) --------------


@pytest.fixture(scope="module")
def smollm2(smollm2_folder):
    return load(smollm2_folder)


@pytest.mark.slow
def test_smollm2_page_of_64_tokens_is_at_most_5_mb_and_renders_in_seconds(smollm2, browser, tmp_path):
    from tfcli.cli.explore import page_html

    text = "The quick brown fox jumps over the lazy dog. " * 12
    ids = smollm2.tokenizer.prompt(text)[:64]
    assert len(ids) == 64
    page = tmp_path / "smollm2.html"
    page.write_text(page_html(smollm2, smollm2.tokenizer.decode(ids), ids, "en"), encoding="utf-8")
    size = page.stat().st_size
    assert size <= 5_000_000, size
    seconds = _open(browser, page)
    assert seconds < 5, seconds
    _assert_clean(browser)
    assert "share kv head" in browser.find_element("id", "gqa").text
    for tab in ("lens", "next", "model"):
        browser.find_element("id", f"tab-{tab}").click()
    _assert_clean(browser)


def test_the_page_language_follows_the_locale_unless_given(cli, tmp_path, monkeypatch):
    """Like the other See-inside commands: --lang, else LC_ALL / LC_MESSAGES / LANG."""
    for env, flag, want in (({"LANG": "zh_CN.UTF-8"}, [], "zh-Hans"), ({"LANG": "en_US.UTF-8"}, [], "en"), ({"LANG": "zh_CN.UTF-8"}, ["--lang", "en"], "en")):
        for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
            monkeypatch.delenv(var, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        page = tmp_path / f"p-{want}-{len(flag)}.html"
        r = cli("explore", "hello", *flag, "-o", page)
        assert r.exit_code == 0, r.output
        assert f'<html lang="{want}"' in page.read_text(encoding="utf-8")



def test_a_chinese_page_says_how_it_draws_chinese(cli, tmp_path):
    r = cli("explore", "-m", "tang", "今天天气很好", "--lang", "zh", "-o", tmp_path / "p.html")
    assert r.exit_code == 0 and "没有嵌入字体" in r.stderr  # --lang zh: said in Chinese
    r = cli("explore", "-m", "tang", "今天天气很好", "--lang", "en", "-o", tmp_path / "p.html")
    assert r.exit_code == 0 and "no font is embedded" in r.stderr
    assert "no font is embedded" not in cli("explore", "To be", "-o", tmp_path / "q.html").stderr


def test_the_pages_heatmap_axes_name_the_tokens():
    from pathlib import Path

    js = (Path(__file__).resolve().parent.parent / "tfcli" / "explore" / "attention.js").read_text(encoding="utf-8")
    body = js[js.index("function drawHeatmap()") : js.index("function drawThumbs()")]
    assert body.count("clip(labels[i], 8)") == 1 and "rotate(-90" in body  # rows and columns: the tokens, not positions
