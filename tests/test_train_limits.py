"""tfcli train, round 4 (issue 34): a run's cost estimated and refused before anything is
allocated, --seed checked, and a checkpoint validated as a whole before --resume."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from conftest import one_line_error
from test_train_bad import TINY, text  # noqa: F401  (text: a fixture)


@pytest.mark.parametrize(
    "flags, needles",
    [
        (["--layers", "1000000", "--d-model", "16", "--heads", "2", "--context", "16"], ["1,000,000 layers", "would need", "GB", "--layers"]),
        (["--d-model", "1000000"], ["d_model 1,000,000", "would need", "TB"]),
        (["--batch-size", "65536", "--context", "4096"], ["batches of 65,536 x 4,096", "would need"]),
    ],
)
def test_a_run_the_memory_cannot_hold_is_refused_at_once_with_the_figures(cli, text, tmp_path, flags, needles):
    t0 = time.monotonic()
    r = cli("train", text, "-o", tmp_path / "m", *flags)
    one_line_error(r, 1, *needles)
    assert time.monotonic() - t0 < 10
    assert not (tmp_path / "m").exists()


def test_a_run_says_its_estimate_before_it_starts(cli, text, tmp_path):
    r = cli("train", text, "-o", tmp_path / "m", *TINY, "--steps", "2")
    assert r.exit_code == 0, r.stderr
    assert "estimate: " in r.stderr and "of memory" in r.stderr and "a step" in r.stderr


def test_the_estimate_bounds_what_a_step_takes(text, tmp_path):
    """The memory estimate is not a wild guess: a small run's first steps (AdamW's moments made,
    activations kept) peak under it (tracemalloc sees NumPy's allocations) and above half of it."""
    import tracemalloc

    from tfcli.engine.train import run as runs
    from tfcli.engine.train.run import Settings

    s = Settings(text=str(text), layers=2, d_model=64, heads=4, context=64, tokenizer="char", from_model=None, dropout=0.0,
                 optimizer="adamw", lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, warmup=0, lr_schedule="constant",
                 clip=1.0, batch_size=8, seq_len=64, steps=3, seed=0, val_fraction=0.1, data_order="random", eval_every=10)  # fmt: skip
    text.write_text("To be, or not to be, that is the question.\n" * 200, encoding="utf-8")
    run = runs.start(s, tmp_path / "m")
    tracemalloc.start()
    try:
        run.train_step()
        run.train_step()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert run.cost.nbytes / 2 < peak < run.cost.nbytes, (peak, run.cost.nbytes)


@pytest.mark.parametrize("seed", ["-5", "-1", str(1 << 63), "9" * 400])
def test_a_seed_out_of_range_is_a_usage_error(cli, text, tmp_path, seed):
    one_line_error(cli("train", text, "-o", tmp_path / "m", *TINY, "--seed", seed), 2, "--seed")


# ---------------------------------------------------------------- --resume checks the checkpoint


@pytest.fixture
def saved(cli, text, tmp_path):
    out = tmp_path / "m"
    r = cli("train", text, "-o", out, *TINY, "--steps", "2")
    assert r.exit_code == 0, r.stderr
    return out


def _state(out, **changes):
    state = json.loads((out / "trainer_state.json").read_text())
    state.update(changes)
    (out / "trainer_state.json").write_text(json.dumps(state))


def _raw_state(out, text):
    (out / "trainer_state.json").write_text(text)


BAD_STATES = [
    (lambda out: _raw_state(out, "[1, 2, 3]"), "holds list"),
    (lambda out: _raw_state(out, "{}"), "'settings'"),
    (lambda out: _raw_state(out, "{\"step\": " + "1" * 5000 + "}"), "cannot be read"),
    (lambda out: _raw_state(out, "[" * 100_000), "cannot be read"),
    (lambda out: _state(out, step=-5), "'step' is -5"),
    (lambda out: _state(out, step="x"), "'step' is 'x'"),
    (lambda out: _state(out, step=10**30), "'step' is 1000000000000000000000000000000"),
    (lambda out: _state(out, step=3), "'losses' is not 3"),
    (lambda out: _state(out, losses=[1.0, "x"]), "'losses'"),
    (lambda out: _state(out, seconds=-1), "'seconds'"),
    (lambda out: _state(out, evals=[[99, 1.0]]), "'evals'"),
    (lambda out: _state(out, settings={**json.loads((out / "trainer_state.json").read_text())["settings"], "layers": "two"}), "settings.layers is 'two'"),
    (lambda out: _state(out, settings={**json.loads((out / "trainer_state.json").read_text())["settings"], "batch_size": 0}), "settings.batch_size is 0"),
    (lambda out: _state(out, settings={**json.loads((out / "trainer_state.json").read_text())["settings"], "layers": 3}), "the weights are 1 layers"),
]


@pytest.mark.parametrize("spoil, needle", BAD_STATES, ids=[n for _, n in BAD_STATES])
def test_a_spoilt_trainer_state_is_one_line(cli, text, saved, spoil, needle):
    spoil(saved)
    one_line_error(cli("train", text, "-o", saved, "--resume", "--steps", "4"), 1, needle, "without --resume")


def _optimizer(out, arrays):
    from tfcli.engine.train.folder import safetensors_bytes

    (out / "optimizer.safetensors").write_bytes(safetensors_bytes(arrays))


def _loaded(out):
    from safetensors.numpy import load_file

    return load_file(str(out / "optimizer.safetensors"))


BAD_OPTIMIZERS = [
    (lambda out: (out / "optimizer.safetensors").unlink(), "holds no optimizer.safetensors", "moments"),
    (lambda out: (out / "optimizer.safetensors").write_bytes(b""), "cannot be read", ""),
    (lambda out: (out / "optimizer.safetensors").write_bytes((out / "optimizer.safetensors").read_bytes()[:300]), "cannot be read", ""),
    (lambda out: _optimizer(out, {k: np.zeros((3, 3), np.float32) for k in _loaded(out)}), "the model needs float32", ""),
    (lambda out: _optimizer(out, {k: a for k, a in list(_loaded(out).items())[1:]}), "does not belong to this model", ""),
    (lambda out: _optimizer(out, {k: (a - 1 if k.startswith("v.") else a) for k, a in _loaded(out).items()}), "negative v", ""),
    (lambda out: _optimizer(out, {k: a * np.float32("nan") for k, a in _loaded(out).items()}), "not finite", ""),
]


@pytest.mark.parametrize("spoil, needle, also", BAD_OPTIMIZERS, ids=[n for _, n, _ in BAD_OPTIMIZERS])
def test_a_missing_or_spoilt_optimizer_is_one_line_never_a_silent_restart(cli, text, saved, spoil, needle, also):
    spoil(saved)
    r = cli("train", text, "-o", saved, "--resume", "--steps", "4")
    one_line_error(r, 1, needle, also)
    assert json.loads((saved / "trainer_state.json").read_text())["step"] == 2  # nothing was trained or written


def test_a_whole_checkpoint_resumes(cli, text, saved):
    r = cli("train", text, "-o", saved, "--resume", "--steps", "4")
    assert r.exit_code == 0, r.stderr
    assert json.loads((saved / "trainer_state.json").read_text())["step"] == 4
