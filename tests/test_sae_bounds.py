"""Every number an SAE folder's cfg.json holds, and every count flag of the features commands, is
checked for range and finiteness before anything is made of it: one line, exit 1 for a folder
(the user fixes the file), exit 2 for a flag; never a traceback, and the folder is left as it was.
Seeds run from 0 to 2^63-1 wherever one is taken (README)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from badinput import assert_error, snapshot
from conftest import TINY_GPT2

HOSTILE = [math.inf, -math.inf, math.nan, 1e300, 10**30, 2**63, -1, 0, 3.5, "12", True, None, [64], {"v": 1}]
HOSTILE_IDS = ["inf", "-inf", "nan", "1e300", "10^30", "2^63", "-1", "0", "3.5", "string", "true", "null", "list", "object"]
# (where in cfg.json, whether 0 is a valid value there)
FIELDS = {"d_in": False, "d_sae": False, "activation_fn_kwargs.k": False, "hook_layer": True, "context_size": True,
          "tfcli.block": True, "tfcli.k": True, "tfcli.steps": True}  # fmt: skip


def _sae(folder: Path, kind: str = "topk") -> Path:
    from tfcli.engine.train.sae import init_params
    from tfcli.engine.train.saefolder import sae_config, write_sae

    write_sae(folder, init_params(64, 16, kind, np.random.default_rng(0)), sae_config(64, 16, kind, 4, "tiny", 1, "resid_post", 128, {"block": 1, "k": 4, "steps": 3}))
    return folder


def _set(folder: Path, where: str, value) -> None:
    cfg = json.loads((folder / "cfg.json").read_text())
    *path, key = where.split(".")
    target = cfg
    for p in path:
        target = target[p]
    if value is None:
        target.pop(key, None) if key in ("d_in", "d_sae", "k") else target.__setitem__(key, None)
    else:
        target[key] = value
    (folder / "cfg.json").write_text(json.dumps(cfg))  # Infinity and NaN as Python's json writes them


@pytest.fixture(scope="module")
def sae(tmp_path_factory):
    return _sae(tmp_path_factory.mktemp("sae") / "sae")


def test_the_folder_as_written_is_used(cli, sae):
    r = cli("features", "show", sae, "To be", "-m", TINY_GPT2, "--any-model", "--json")
    assert r.exit_code == 0, (r.stderr, r.exception)


@pytest.mark.parametrize("field", list(FIELDS))
@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
def test_a_hostile_number_in_cfg_json_is_one_line(cli, tmp_path, field, value):
    if value == 0 and FIELDS[field] or value is None and field.startswith(("hook", "context", "tfcli")):
        pytest.skip("a valid value there (0 or absent)")
    folder = _sae(tmp_path / "sae")
    _set(folder, field, value)
    before = snapshot(folder)
    r = cli("features", "show", folder, "To be", "-m", TINY_GPT2, "--any-model")
    assert_error(r, 1, "cfg.json")
    assert snapshot(folder) == before


@pytest.mark.parametrize("kind", ["relu", "topk"])
def test_an_activation_that_is_not_a_name_is_one_line(cli, tmp_path, kind):
    folder = _sae(tmp_path / "sae", kind)
    for value in ([1], {"a": 1}, math.inf, "gelu"):
        _set(folder, "activation_fn_str", value)
        assert_error(cli("features", "show", folder, "To be", "-m", TINY_GPT2, "--any-model"), 1, "activation")
    _set(folder, "activation_fn_str", kind)
    _set(folder, "activation_fn_kwargs", [4])
    assert_error(cli("features", "show", folder, "To be", "-m", TINY_GPT2, "--any-model"), 1, "activation_fn_kwargs is not an object")


def test_a_cfg_json_that_is_not_an_object_is_one_line(cli, tmp_path):
    folder = _sae(tmp_path / "sae")
    for text in ("[1, 2]", "Infinity", '"x"', "1" * 5000):
        (folder / "cfg.json").write_text(text)
        assert_error(cli("features", "show", folder, "To be", "-m", TINY_GPT2, "--any-model"), 1, "cfg.json")


# --- count flags -------------------------------------------------------------------------------------

DIGITS = "9" * 5000


@pytest.mark.parametrize(
    "args, needle",
    [(["features", "top", "{sae}", "{text}", "--contexts", "1000000000"], "--contexts must be between"),
     (["features", "top", "{sae}", "{text}", "--contexts", "0"], "--contexts must be between"),
     (["features", "top", "{sae}", "{text}", "-n", "-3"], "-n must be between"),
     (["features", "top", "{sae}", "{text}", "-n", "0"], "-n must be between"),
     (["features", "top", "{sae}", "{text}", "--tokens", "-5"], "--tokens must be between"),
     (["features", "top", "{sae}", "{text}", "--feature", "-1"], "--feature must be between"),
     (["features", "top", "{sae}", "{text}", "--feature", str(10**30)], "--feature must be between"),
     (["features", "show", "{sae}", "To be", "--top", "-1"], "--top must be between"),
     (["features", "show", "{sae}", "To be", "--top", "0"], "--top must be between"),
     (["features", "quality", "{sae}", "{text}", "--tokens", "-1"], "--tokens must be between"),
     (["generate", "Hi", "--feature", "{sae}:" + DIGITS], "out of range"),
     (["generate", "Hi", "--feature", "{sae}:-3"], "SAE:IDX"),
     (["generate", "Hi", "--feature", "{sae}:\u00b2"], "SAE:IDX"),
     (["steer", "Hi", "--feature", "{sae}:" + DIGITS], "out of range"),
     (["ablate", "Hi", "--feature", "{sae}:" + DIGITS], "out of range"),
     (["features", "train", "{text}", "-o", "{out}", "--seed", "-1"], "--seed must be between 0 and"),
     (["features", "train", "{text}", "-o", "{out}", "--seed", str(2**70)], "--seed must be between 0 and"),
     (["features", "train", "{text}", "-o", "{out}", "--seed", str(2**63)], "--seed must be between 0 and"),
     (["train", "{text}", "-o", "{out}", "--seed", "-1"], "--seed"),
     (["train", "{text}", "-o", "{out}", "--seed", str(2**70)], "--seed"),
     (["heads", "Hi", "--seed", "-1"], "--seed must be between 0 and"),
     (["heads", "Hi", "--seed", str(2**63)], "--seed must be between 0 and"),
     (["generate", "Hi", "--seed", str(2**70)], "seed"),
     (["geometry", "--seed", str(2**70)], "--seed")],
    ids=lambda v: None if isinstance(v, str) else " ".join(a if len(a) < 16 else a[:8] + "..." for a in v[:1] + v[3:] if "{" not in a),
)  # fmt: skip
def test_a_count_flag_out_of_range_is_one_line_exit_2(cli, sae, tmp_path, args, needle):
    text = tmp_path / "text.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 20)
    args = [a.format(sae=sae, text=text, out=tmp_path / "out") for a in args]
    before = snapshot(sae)
    model = [] if args[0] == "train" else ["-m", TINY_GPT2]
    r = cli(*args, *model, *(["--any-model"] if args[0] == "features" and args[1] != "train" else []))
    assert_error(r, 2, needle)
    assert snapshot(sae) == before and not (tmp_path / "out").exists()


def test_the_largest_seed_is_taken(cli, tmp_path):
    """2^63-1, the end of the range the README gives, trains."""
    x = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = cli("features", "train", "--activations", tmp_path / "x.npy", "-o", tmp_path / "sae", "--features", "4", "--steps", "1",
            "--batch-size", "8", "--buffer", "16", "--seed", str(2**63 - 1), "--json")  # fmt: skip
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert json.loads((tmp_path / "sae" / "cfg.json").read_text())["tfcli"]["settings"]["seed"] == 2**63 - 1


def test_contexts_that_would_not_fit_in_memory_are_refused_before_they_are_made(monkeypatch, sae):
    """The bound on --contexts is a flag's; the memory check beside it covers an SAE of many features."""
    from tfcli.analysis import features as feats
    from tfcli.engine import memory
    from tfcli.engine.errors import ResourceError
    from tfcli.engine.loader import load_folder

    lm = load_folder(TINY_GPT2)
    f = feats.load_features(sae, lm.model, None, any_model=True)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 16)  # 16 features x 1,000 contexts need ~400 KB
    with pytest.raises(ResourceError, match="contexts"):
        feats.top_contexts(lm.model, f, np.arange(10), 1000, 64)
