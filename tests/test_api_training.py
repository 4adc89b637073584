"""`tfcli.train_features` trains the SAE `tfcli features train` trains: the same settings give the
same weights and quality; vectors given without a block are recorded as from no block, and such an
SAE is refused on a model instead of silently reading block 0 (from Python and from the command)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

import tfcli
from tfcli.engine.errors import TfcliError

from conftest import TINY_GPT2

TEXT = ("First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. First Citizen: You are all "
        "resolved rather to die than to famish? All: Resolved. resolved. ") * 6  # fmt: skip
SETTINGS = ["--features", "64", "--steps", "12", "--batch-size", "64", "--buffer", "256", "--seed", "3"]


def test_python_and_the_command_train_the_same_sae(cli, tmp_path):
    (tmp_path / "text.txt").write_text(TEXT)
    r = cli("features", "train", "-m", TINY_GPT2, tmp_path / "text.txt", "--block", "1", "-o", tmp_path / "by-cli", *SETTINGS, "--json", "--threads", "1")
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    model = tfcli.load(TINY_GPT2)
    got = tfcli.train_features(model, tmp_path / "text.txt", tmp_path / "by-python", block=1, features=64, steps=12, batch_size=64, buffer=256, seed=3)
    theirs, ours = load_file(tmp_path / "by-cli" / "sae.safetensors"), load_file(tmp_path / "by-python" / "sae.safetensors")
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    doc = json.loads(r.stdout)  # its floats to 4 significant digits
    four = lambda d: {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in d.items() if k not in ("folder", "seconds")}  # noqa: E731
    assert four(got.to_dict()) == four(doc)
    a, b = (json.loads((tmp_path / f / "cfg.json").read_text()) for f in ("by-cli", "by-python"))
    for cfg in (a, b):
        del cfg["tfcli"]["seconds"], cfg["tfcli"]["data"]
    assert a == b
    assert tfcli.features(model, got.folder).block == 1 and "steps" in str(got) and "<table>" in got._repr_html_()


def test_a_text_needs_its_block_said(tmp_path):
    (tmp_path / "text.txt").write_text(TEXT)
    with pytest.raises(TfcliError, match="block=B"):
        tfcli.train_features(tfcli.load(TINY_GPT2), tmp_path / "text.txt", tmp_path / "sae", steps=2)
    with pytest.raises(TfcliError, match="one of them"):
        tfcli.train_features(None, None, tmp_path / "sae")
    with pytest.raises(TfcliError, match="steps 0 is out of range"):
        tfcli.train_features(tfcli.load(TINY_GPT2), tmp_path / "text.txt", tmp_path / "sae", block=0, steps=0)


def test_vectors_without_a_block_are_refused_on_a_model(cli, tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((600, 64)).astype(np.float32))  # tiny-gpt2's width
    model = tfcli.load(TINY_GPT2)
    r = tfcli.train_features(None, None, tmp_path / "none", activations=tmp_path / "x.npy", features=32, steps=3, batch_size=64, buffer=128)
    cfg = json.loads((r.folder / "cfg.json").read_text())
    assert cfg["tfcli"]["block"] is None and cfg["hook_layer"] is None and cfg["hook_name"] is None
    with pytest.raises(TfcliError, match="no recorded block"):
        tfcli.features(model, r.folder, any_model=True)
    said = tfcli.train_features(None, None, tmp_path / "one", activations=tmp_path / "x.npy", block=1, features=32, steps=3, batch_size=64, buffer=128)
    assert tfcli.features(model, said.folder, any_model=True).block == 1
    # the command: --activations without --block records no block, and `features show` refuses it in one line
    r = cli("features", "train", "--activations", tmp_path / "x.npy", "-o", tmp_path / "cli", "--features", "32", "--steps", "3",
            "--batch-size", "64", "--buffer", "128", "--json")  # fmt: skip
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    assert json.loads((tmp_path / "cli" / "cfg.json").read_text())["hook_layer"] is None
    r = cli("features", "show", tmp_path / "cli", "To be", "-m", TINY_GPT2, "--any-model")
    assert r.exit_code == 1 and "no recorded block" in r.stderr and len(r.stderr.strip().splitlines()) <= 2, r.stderr
