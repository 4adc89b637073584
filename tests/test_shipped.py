"""The models that ship in weights/: they load, equal transformers, and are what their cards say."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import DATA
from tfcli.engine.inspect import Recorder
from tfcli.store import load
from tfcli.engine.generate import Generation, Session
from tfcli.store.registry import shipped_dir
from tfcli.engine.sampling import Sampler, SamplingParams
from tfcli.engine.fast import FAST

SHIPPED = ["shakespeare", "tang"]


def _folder(name):
    folder = shipped_dir() / name
    if not (folder / "model.safetensors").exists():
        pytest.skip(f"weights/{name} is not trained yet")
    return folder


@pytest.fixture(scope="module", params=SHIPPED)
def shipped(request):
    folder = _folder(request.param)
    with np.load(DATA / f"{request.param}.reference.npz") as z:
        ref = dict(z)
    return request.param, load(request.param), ref, folder


def test_logits_equal_transformers(shipped):
    _, lm, ref, _ = shipped
    ids = ref["ids"]
    assert lm.tokenizer.encode(lm.tokenizer.decode(list(ids))) == list(ids)
    logits = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)  # [T, V]
    assert np.abs(logits - ref["logits"]).max() <= 1e-4


def test_attention_equals_transformers(shipped):
    _, lm, ref, _ = shipped
    rec = Recorder(attention=True)
    lm.model.forward(ref["ids"], lm.model.new_cache(len(ref["ids"])), hooks=rec, run=FAST)
    assert np.abs(np.stack([rec.attn[i] for i in sorted(rec.attn)]) - ref["attn"]).max() <= 1e-5


def test_greedy_continuation_equals_transformers(shipped):
    _, lm, ref, _ = shipped
    gen = Generation(Session(lm.model), lm.tokenizer, list(ref["ids"]), Sampler(SamplingParams(temperature=0)), len(ref["greedy"]))
    assert [s.token for s in gen] == list(ref["greedy"])


def test_parameter_count_equals_the_model_card(cli, shipped):
    import json

    _, _, _, folder = shipped
    card = (folder / "README.md").read_text(encoding="utf-8")
    row = re.search(r"\| n_layer \| n_embd .*?\n\|[-|]+\n(\|.*\|)", card).group(1)
    in_card = int(row.strip("|").split("|")[-1].strip().replace(",", ""))
    r = cli("params", "--from", folder, "--json")
    assert r.exit_code == 0, r.stderr
    found = json.loads(r.stdout)["from"]
    assert found["agree"] and found["actual_total"] == found["analytic_total"] == in_card


def test_the_card_shows_losses_below_the_unigram_baseline(shipped):
    _, _, _, folder = shipped
    card = (folder / "README.md").read_text(encoding="utf-8")
    val = float(re.search(r"validation \(whole split[^|]*\| ([0-9.]+)", card).group(1))
    unigram = float(re.search(r"unigram baseline[^|]*\| ([0-9.]+)", card).group(1))
    assert val <= unigram - 1.0  # at least a nat per character better than character frequencies alone


def test_default_model_is_shakespeare(cli):
    _folder("shakespeare")
    r = cli("generate", "ROMEO:", "-n", "60", "--seed", "0")
    assert r.exit_code == 0, r.stderr
    assert len(r.stdout) > 40 and "\n" in r.stdout  # a play's lines


def test_tang_continues_in_chinese(cli):
    _folder("tang")
    r = cli("generate", "-m", "tang", "床前明月光", "-n", "40", "--seed", "0")
    assert r.exit_code == 0, r.stderr
    han = [c for c in r.stdout if "\u4e00" <= c <= "\u9fff"]
    assert len(han) >= 15
