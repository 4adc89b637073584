"""tfcli features: the known answer through --activations for both kinds, the SAE folder as SAELens
names it, show/top/quality and their JSON, --feature in generate/steer/ablate, steering files tied
to their model, and one-line errors for bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import TINY_GPT2, one_line_error
from test_features_train import known_directions, recovered

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer.\n" * 60


@pytest.fixture(scope="module")
def sae_dir(tmp_path_factory):
    """A small SAE on tiny-gpt2's block 1, trained once for the module."""
    from typer.testing import CliRunner

    from tfcli.cli import app

    d = tmp_path_factory.mktemp("sae")
    (d / "text.txt").write_text(TEXT)
    r = CliRunner().invoke(app, ["features", "train", "-m", str(TINY_GPT2), str(d / "text.txt"), "--block", "1", "-o", str(d / "sae"),
                                 "--features", "128", "--steps", "30", "--batch-size", "256", "--buffer", "2048", "--json", "--threads", "1"])  # fmt: skip
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    return d


@pytest.mark.parametrize("kind", ["relu", "topk"])
def test_known_directions_through_activations(cli, tmp_path, kind):
    x, true = known_directions()
    np.save(tmp_path / "x.npy", x)
    r = cli("features", "train", "--activations", tmp_path / "x.npy", "-o", tmp_path / "sae", "--kind", kind, "--k", "4", "--features", "128",
            "--steps", "600", "--batch-size", "256", "--lr", "3e-3", "--json", "--threads", "1")  # fmt: skip
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    from safetensors.numpy import load_file

    w = load_file(tmp_path / "sae" / "sae.safetensors")
    assert {k: v.shape for k, v in w.items()} == {"W_enc": (32, 128), "b_enc": (128,), "W_dec": (128, 32), "b_dec": (32,)}
    assert recovered(w["W_dec"], true) >= 0.9
    doc = json.loads(r.stdout)
    assert doc["explained_variance"] > 0.3 and doc["dead_features"] < 0.5  # relu's L1 shrinks activations: 0.48 here


def test_the_folder_is_named_as_saelens_names_it(sae_dir):
    cfg = json.loads((sae_dir / "sae" / "cfg.json").read_text())
    for key, want in {"d_in": 64, "d_sae": 128, "hook_name": "blocks.1.hook_resid_post", "hook_layer": 1, "architecture": "standard",
                      "activation_fn_str": "relu", "apply_b_dec_to_input": True, "model_name": "tiny-gpt2"}.items():  # fmt: skip
        assert cfg[key] == want, key
    assert len(cfg["tfcli"]["model_hash"]) == 16 and set(cfg["tfcli"]["quality"]) >= {"mse", "explained_variance", "l0", "dead_features", "loss_recovered"}


def test_show_top_quality_json_and_page(cli, sae_dir, tmp_path):
    doc = json.loads(cli("features", "show", sae_dir / "sae", "To be, or not", "-m", TINY_GPT2, "--json").stdout)
    assert doc["block"] == 1 and "".join(t["text"] for t in doc["tokens"]).endswith("To be, or not")
    r = cli("features", "top", sae_dir / "sae", sae_dir / "text.txt", "-m", TINY_GPT2, "-n", "3", "--json", "--html", tmp_path / "p.html")
    top = json.loads(r.stdout)
    assert len(top["features"]) == 3 and all(c["contexts"] and len(c["up"]) == 8 for c in top["features"])
    page = (tmp_path / "p.html").read_text()
    assert page.count('class="card"') == 3 and "<script" not in page and "<mark>" in page
    q = json.loads(cli("features", "quality", sae_dir / "sae", sae_dir / "text.txt", "-m", TINY_GPT2, "--json").stdout)
    assert {"loss_clean", "loss_sae", "loss_zero", "loss_recovered", "l0"} <= set(q) and 0 <= q["dead_features"] <= 1  # tiny-gpt2 is random: no sign to expect


def test_a_feature_steers_and_ablates(cli, sae_dir):
    from tfcli.analysis.features import ablate_feature, load_features, site_rows
    from tfcli.store import load

    lm = load(str(TINY_GPT2))
    f = load_features(sae_dir / "sae", lm.model, None)
    ids = lm.tokenizer.prompt("To be, or not")
    acts = f.encode(site_rows(lm.model, np.array(ids), 1, "resid_post"))
    idx = int(np.argmax(acts[-1]))
    r = ablate_feature(lm.model, f, idx, ids, None)
    assert r["activation_last"] > 0 and r["logprob"] != r["logprob_ablated"]
    # An inactive feature's ablation changes nothing: the SAE's error is kept.
    dead = int(np.argmin(acts.max(axis=0)))
    if acts[:, dead].max() == 0:
        r0 = ablate_feature(lm.model, f, dead, ids, None)
        assert r0["logprob_ablated"] == pytest.approx(r0["logprob"], abs=1e-5)
    plain = cli("generate", "-m", TINY_GPT2, "To be", "-n", "8", "-t", "0", "-q").stdout
    pushed = cli("generate", "-m", TINY_GPT2, "To be", "-n", "8", "-t", "0", "-q", "--feature", f"{sae_dir / 'sae'}:{idx}", "--scale", "50").stdout
    assert plain != pushed
    doc = json.loads(cli("ablate", "-m", TINY_GPT2, "To be, or not", "--feature", f"{sae_dir / 'sae'}:{idx}", "--json").stdout)
    assert doc["answer"]["logprob_ablated"] == pytest.approx(r["logprob_ablated"], rel=1e-3)  # JSON keeps 4 digits


def _retrained_copy(tmp_path):
    """tiny-gpt2 with every weight changed a little: the same shape, another model."""
    from safetensors.numpy import load_file, save_file

    other = tmp_path / "other"
    shutil.copytree(TINY_GPT2, other)
    w = load_file(other / "model.safetensors")
    save_file({k: (v * np.float32(1.01)).astype(v.dtype) for k, v in w.items()}, other / "model.safetensors", metadata={"format": "pt"})
    return other


def test_files_made_on_another_model_are_refused(cli, sae_dir, tmp_path):
    other = _retrained_copy(tmp_path)
    one_line_error(cli("features", "show", sae_dir / "sae", "To be", "-m", other), 1, "trained on tiny-gpt2", "--any-model")
    assert cli("features", "show", sae_dir / "sae", "To be", "-m", other, "--any-model").exit_code == 0
    v = tmp_path / "v.npz"
    assert cli("steer", "-m", TINY_GPT2, "To be", "--toward", "be", "--away", "not", "--layer", "1", "-n", "2", "--save", v).exit_code == 0
    one_line_error(cli("generate", "-m", other, "To be", "-n", "2", "--steer", v), 2, "was made on another model", "--any-model")
    assert cli("generate", "-m", other, "To be", "-n", "2", "--steer", v, "--any-model").exit_code == 0
    assert cli("generate", "-m", TINY_GPT2, "To be", "-n", "2", "--steer", v).exit_code == 0


def test_bad_steering_files_are_one_line(cli, tmp_path):
    import zipfile

    huge = tmp_path / "huge.npz"
    with zipfile.ZipFile(huge, "w") as z:  # a header declaring 10^12 elements and no data
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }"
        z.writestr("vector.npy", b"\x93NUMPY\x01\x00" + len(header + " " * (63 - len(header)) + "\n").to_bytes(2, "little") + (header + " " * (63 - len(header)) + "\n").encode())
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hi", "--steer", huge), 2, "not a steering vector", "1,000,000,000,000 elements")
    good = tmp_path / "g.npz"
    np.savez(good, vector=np.ones(64, np.float32), layer=np.int64(0), scale=np.float64(1))
    data = good.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hi", "--steer", tmp_path / "cut.npz"), 2, "not a steering vector")
    np.savez(tmp_path / "wide.npz", vector=np.ones(65, np.float32), layer=np.int64(0), scale=np.float64(1))
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hi", "--steer", tmp_path / "wide.npz"), 2, "width 64")


def test_bad_input_is_one_line(cli, sae_dir, tmp_path):
    (tmp_path / "short.txt").write_text("To be")
    one_line_error(cli("features", "train", "-m", TINY_GPT2, tmp_path / "short.txt", "-o", tmp_path / "a", "--batch-size", "256"), 2, "fewer than one batch")
    one_line_error(cli("features", "train", "-m", TINY_GPT2, sae_dir / "text.txt", "-o", tmp_path / "b", "--features", "0"), 2, "--features must be")
    one_line_error(cli("features", "train", "-m", TINY_GPT2, sae_dir / "text.txt", "-o", tmp_path / "c", "--features", "1000000"), 1, "would need")
    np.save(tmp_path / "x.npy", np.ones((10, 3), np.float32))
    (tmp_path / "x.npy").write_bytes((tmp_path / "x.npy").read_bytes()[:-20])
    one_line_error(cli("features", "train", "--activations", tmp_path / "x.npy", "-o", tmp_path / "d"), 2, "truncated")
    bad = tmp_path / "bad"
    shutil.copytree(sae_dir / "sae", bad)
    (bad / "sae.safetensors").write_bytes(b"\xff" * 40)
    one_line_error(cli("features", "show", bad, "To be", "-m", TINY_GPT2), 1, "corrupt")
    from tfcli.engine.train.sae import init_params
    from tfcli.engine.train.saefolder import sae_config, write_sae

    narrow = tmp_path / "narrow"  # an SAE of width 32 (another model's), whole and consistent
    write_sae(narrow, init_params(32, 16, "relu", np.random.default_rng(0)), sae_config(32, 16, "relu", 0, "other", 1, "resid_post", 128, {"block": 1}))
    one_line_error(cli("features", "show", narrow, "To be", "-m", TINY_GPT2), 1, "width 32, this model's are 64")
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hi", "--feature", f"{narrow}:3"), 1, "width 32")
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hi", "--feature", "nope"), 2, "SAE:IDX")
    one_line_error(cli("generate", "-m", TINY_GPT2, "Hi", "--feature", f"{sae_dir / 'sae'}:999"), 2, "out of range")


def test_the_page_in_a_real_browser(cli, sae_dir, tmp_path):
    """The cards of `features top --html` in headless Chromium: drawn from the file alone (no
    request), no console error, each card with its marked tokens."""
    from test_explore import _assert_clean, _driver_or_skip

    page = tmp_path / "features.html"
    assert cli("features", "top", sae_dir / "sae", sae_dir / "text.txt", "-m", TINY_GPT2, "-n", "4", "--html", page).exit_code == 0
    browser = _driver_or_skip()
    try:
        browser.get_log("browser")
        browser.get(page.as_uri())
        assert browser.execute_script("return document.readyState") == "complete"
        cards = browser.execute_script("return [...document.querySelectorAll('.card')].map(c => [c.id, c.querySelectorAll('mark').length, c.getBoundingClientRect().height])")
        assert len(cards) == 4 and all(c[0].startswith("f") and c[1] >= 1 and c[2] > 50 for c in cards), cards
        _assert_clean(browser)
    finally:
        browser.quit()
