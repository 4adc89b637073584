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

from test_explore import _driver_or_skip  # noqa: E402  the same system Chromium as the explore tests
from test_serve import TIMEOUT, serving  # noqa: E402

SHAKESPEARE = Path(__file__).parent.parent / "weights" / "shakespeare"


@pytest.fixture(scope="module")
def live():
    from tfcli.cli import explore
    from tfcli.serve.live import Page
    from tfcli.store import load

    lm = load(SHAKESPEARE)
    page = Page(lambda text: explore.page_html(lm, text, explore.page_tokens(lm, text), "en"))
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
