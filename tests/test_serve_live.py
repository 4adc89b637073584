"""The live explorer page of tfcli serve (GET /): the explore page for a text typed into it."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

from conftest import assert_f32_close  # noqa: E402
from test_explore import _driver_or_skip  # noqa: E402  the same system Chromium as the explore tests
from test_serve import TIMEOUT, serving  # noqa: E402
from tfcli.engine.fast import FAST  # noqa: E402

SHAKESPEARE = Path(__file__).parent.parent / "weights" / "shakespeare"


@pytest.fixture(scope="module")
def live():
    from tfcli.analysis.experiments.steer import from_texts
    from tfcli.cli import explore
    from tfcli.serve.live import Page
    from tfcli.store import load

    lm = load(SHAKESPEARE)
    page = Page(
        lambda text, hooks: explore.page_html(lm, text, explore.page_tokens(lm, text), "en", hooks),
        lambda toward, away, layer, scale: from_texts(lm.model, lm.tokenizer, toward, away, layer, scale, FAST),
        lm.config.n_layer,
    )
    with serving(lm, "shakespeare", page=page) as (url, _):
        yield url, lm


def _data(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="tfcli-data">(.*?)</script>', html, re.S).group(1))


def test_the_page_is_the_explore_page_of_the_text_asked_for(live):
    url, lm = live
    with urllib.request.urlopen(url + "/?" + urllib.parse.urlencode({"text": "ROMEO: hi"}), timeout=TIMEOUT) as r:
        html = r.read().decode()
    data = _data(html)
    assert data["text"] == "ROMEO: hi" and [t["id"] for t in data["tokens"]] == lm.tokenizer.prompt("ROMEO: hi")
    assert '<form id="live"' in html and 'value="ROMEO: hi"' in html
    assert set(data["arrays"]) and data["model"] == lm.name


def test_a_text_the_page_cannot_hold_is_refused_on_the_page(live):
    url, _ = live
    try:
        urllib.request.urlopen(url + "/?" + urllib.parse.urlencode({"text": "x" * 3000}), timeout=TIMEOUT)
        raise AssertionError("a 3000-token page was drawn")
    except urllib.error.HTTPError as e:
        assert e.code == 400
        html = e.read().decode()
    assert 'id="live-error"' in html and "tokens" in html and "<form" in html


def _page(url: str, **query) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url + "/?" + urllib.parse.urlencode(query), timeout=TIMEOUT) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_steering_box_gives_the_pass_of_the_steered_model(live):
    """The page's next-token logits are those of the steered forward pass, which tests/test_experiments.py
    checks against transformers with a forward hook; a zero strength changes nothing."""
    from tfcli.analysis import explore as ex
    from tfcli.analysis.experiments.steer import from_texts

    url, lm = live
    text, toward, away = "ROMEO: I", "love", "hate"
    status, plain = _page(url, text=text)
    status2, steered = _page(url, text=text, toward=toward, away=away, layer=2, scale=8)
    assert status == status2 == 200
    assert 'id="live-steered"' in steered and "after block 2" in steered and 'value="love"' in steered
    s = from_texts(lm.model, lm.tokenizer, toward, away, 2, 8.0, FAST)
    want = ex.explore(lm.model, lm.tokenizer.prompt(text), hooks=s.hooks(), run=FAST)
    import base64

    import numpy as np

    def logits(html):  # the page's next-token candidates: [T, N] ids and their logits (stored exactly)
        a = _data(html)["arrays"]
        return [np.frombuffer(base64.b64decode(a[k]["b64"]), dtype=a[k]["dtype"]).reshape(a[k]["shape"]) for k in ("next_ids", "next_logits")]

    ids, got = logits(steered)
    assert np.array_equal(ids, want.next_ids)
    assert_f32_close(got, want.next_logits)
    assert not np.allclose(logits(plain)[1], got, atol=0.05)
    assert np.array_equal(logits(_page(url, text=text, toward=toward, away=away, layer=2, scale=0)[1])[1], logits(plain)[1])


@pytest.mark.parametrize("query, needle", [
    ({"toward": "love"}, "both texts"),
    ({"toward": "love", "away": "hate", "layer": "9"}, "out of range"),
    ({"toward": "love", "away": "hate", "scale": "nan"}, "strength"),
    ({"toward": "love", "away": "hate", "scale": "1e9"}, "strength"),
    ({"toward": "love", "away": "hate", "layer": "two"}, "whole number"),
])
def test_bad_steering_fields_are_said_on_the_page(live, query, needle):
    url, _ = live
    status, html = _page(url, text="ROMEO:", **query)
    assert status == 400 and 'id="live-error"' in html and needle in html and "<form" in html


def test_typing_a_text_redraws_attention_and_lens_with_its_tokens(live):
    from selenium.webdriver.common.by import By

    url, _ = live
    browser = _driver_or_skip()
    try:
        browser.get(url + "/")
        box = browser.find_element(By.ID, "live-text")
        box.clear()
        box.send_keys("JULIET: O Romeo")
        browser.find_element(By.ID, "live-run").click()
        start = time.monotonic()
        while browser.execute_script("return document.body && document.body.dataset.ready") != "1" or "JULIET" not in browser.current_url:
            assert time.monotonic() - start < 30
            time.sleep(0.05)
        tokens = browser.execute_script("return JSON.parse(document.getElementById('tfcli-data').textContent).tokens.map(t => t.label)")
        assert "".join(tokens).replace("\u2423", " ") == "JULIET: O Romeo" or len(tokens) > 3
        assert all(t in browser.find_element(By.ID, "headview").text for t in tokens[-3:] if t.strip())
        browser.execute_script("document.querySelector('[data-view=lens], #tab-lens')?.click()")
        assert any(t in browser.find_element(By.ID, "lens-grid").get_attribute("textContent") for t in tokens if t.strip())
    finally:
        browser.quit()


def test_the_steering_box_in_the_browser_redraws_the_steered_pass(live):
    from selenium.webdriver.common.by import By

    url, _ = live
    browser = _driver_or_skip()
    try:
        browser.get(url + "/?" + urllib.parse.urlencode({"text": "ROMEO: I"}))
        plain = browser.execute_script("return JSON.parse(document.getElementById('tfcli-data').textContent).arrays.next_logits.b64")
        browser.find_element(By.CSS_SELECTOR, "#live-steer summary").click()
        browser.find_element(By.ID, "live-toward").send_keys("love")
        browser.find_element(By.ID, "live-away").send_keys("hate")
        browser.execute_script("const s = document.getElementById('live-scale'); s.value = 8; s.dispatchEvent(new Event('input'))")
        assert browser.find_element(By.CSS_SELECTOR, "#live-steer output").text == "8"  # the slider shows its value
        browser.find_element(By.ID, "live-steer-run").click()
        start = time.monotonic()
        while "toward=love" not in browser.current_url or browser.execute_script("return document.body && document.body.dataset.ready") != "1":
            assert time.monotonic() - start < 30
            time.sleep(0.05)
        assert "steered: 8" in browser.find_element(By.ID, "live-steered").text
        steered = browser.execute_script("return JSON.parse(document.getElementById('tfcli-data').textContent).arrays.next_logits.b64")
        assert steered != plain
    finally:
        browser.quit()
