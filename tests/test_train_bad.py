"""tfcli train on bad input: one line `error: ...` on stderr, exit 1 for a problem with a file or a
model, exit 2 for a bad flag value; the last good checkpoint survives a NaN and a full disk, and
files tfcli did not write are never touched."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

from conftest import TINY_GPT2, one_line_error

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--context", "16", "--batch-size", "2", "--eval-every", "2"]


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("To be, or not to be, that is the question.\n" * 20, encoding="utf-8")
    return path


def last_line_error(r, code: int, *needles: str) -> None:
    """An error after some training: the progress lines, then one `error: ...` line, no traceback."""
    assert r.exit_code == code, (r.exit_code, r.stderr, r.exception)
    last = r.stderr.rstrip("\n").split("\n")[-1]
    assert last.startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in last, (needle, last)


def test_empty_file(cli, tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    one_line_error(cli("train", tmp_path / "empty.txt", "-o", tmp_path / "m", *TINY), 1, "is empty")


def test_binary_file(cli, tmp_path):
    (tmp_path / "x.bin").write_bytes(bytes(range(256)) * 4)
    one_line_error(cli("train", tmp_path / "x.bin", "-o", tmp_path / "m", *TINY), 1, "not a UTF-8 text file", "0x00")


def test_missing_file(cli, tmp_path):
    one_line_error(cli("train", tmp_path / "nope.txt", "-o", tmp_path / "m", *TINY), 1, "does not exist")


def test_too_short_for_one_batch(cli, tmp_path):
    (tmp_path / "short.txt").write_text("To be, or not to be.")
    one_line_error(cli("train", tmp_path / "short.txt", "-o", tmp_path / "m", *TINY, "--val-fraction", "0", "--data-order", "sequential"), 1, "too short", "is 20 tokens, one batch needs 33")
    one_line_error(cli("train", tmp_path / "short.txt", "-o", tmp_path / "m", *TINY), 1, "too short", "validation split is 2 tokens")
    (tmp_path / "short.txt").write_text("To be.")
    one_line_error(cli("train", tmp_path / "short.txt", "-o", tmp_path / "m", *TINY), 1, "too short", "training split is 5 tokens, one batch needs 17")


@pytest.mark.parametrize(
    "flags, needles",
    [
        (["--seq-len", "32"], ["--seq-len 32 is beyond the context of 16"]),
        (["--heads", "3"], ["--d-model 16 is not a multiple of --heads 3"]),
        (["--tokenizer", "bpe:10"], ["--tokenizer"]),
        (["--tokenizer", "words"], ["--tokenizer"]),
        (["--betas", "0.9"], ["--betas"]),
        (["--lr", "0"], ["--lr"]),
        (["--lr", "nan"], ["--lr"]),
        (["--val-fraction", "1"], ["--val-fraction"]),
        (["--dropout", "1"], ["--dropout"]),
        (["--steps", "0"], ["--steps"]),
        (["--optimizer", "lion"], ["--optimizer"]),
    ],
)
def test_bad_flag_values_exit_2(cli, text, tmp_path, flags, needles):
    one_line_error(cli("train", text, "-o", tmp_path / "m", *TINY, *flags), 2, *needles)


def test_context_beyond_a_from_model(cli, text, tmp_path):
    one_line_error(cli("train", text, "-o", tmp_path / "m", "--from", TINY_GPT2, "--context", "4096"), 2, "--context 4,096 is beyond", "(128)")
    one_line_error(cli("train", text, "-o", tmp_path / "m", "--from", TINY_GPT2, "--seq-len", "200"), 2, "--seq-len 200 is beyond the context of 128")
    one_line_error(cli("train", text, "-o", tmp_path / "m", "--from", TINY_GPT2, "--layers", "2"), 2, "--layers cannot be given with --from")


def test_from_a_family_it_cannot_train(cli, text, tmp_path):
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 16}))
    one_line_error(cli("train", text, "-o", tmp_path / "m", "--from", folder), 1, "model_type 'bert' is not supported")


def test_an_existing_folder_is_refused_without_force_and_kept_with_it(cli, text, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    one_line_error(cli("train", text, "-o", out, *TINY, "--steps", "2"), 1, "already exists", "--force")
    assert os.listdir(out) == ["notes.txt"]
    r = cli("train", text, "-o", out, *TINY, "--steps", "2", "--force")
    assert r.exit_code == 0, r.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.safetensors").is_file()


def test_output_is_a_file(cli, text, tmp_path):
    (tmp_path / "f").write_text("x")
    one_line_error(cli("train", text, "-o", tmp_path / "f", *TINY), 1, "is a file")


def test_resume_without_a_run(cli, text, tmp_path):
    (tmp_path / "m").mkdir()
    one_line_error(cli("train", text, "-o", tmp_path / "m", "--resume"), 1, "holds no trainer_state.json")


def test_resume_on_another_text(cli, text, tmp_path):
    assert cli("train", text, "-o", tmp_path / "m", *TINY, "--steps", "2").exit_code == 0
    other = tmp_path / "other.txt"
    other.write_text("Something else entirely, long enough to train on. " * 20)
    one_line_error(cli("train", other, "-o", tmp_path / "m", "--resume", "--steps", "4"), 1, "is not the text the run")


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(cli, text, tmp_path, monkeypatch):
    from tfcli.engine.train.model import Trainable

    real, calls = Trainable.loss_and_grads, [0]

    def poisoned(self, x, y, rng=None):
        calls[0] += 1
        loss, grads = real(self, x, y, rng)
        return (float("nan") if calls[0] == 5 else loss), grads

    monkeypatch.setattr(Trainable, "loss_and_grads", poisoned)
    out = tmp_path / "m"
    r = cli("train", text, "-o", out, *TINY, "--steps", "10")
    last_line_error(r, 1, "the loss became nan at step 5", "last good checkpoint (step 4)", str(out))
    assert json.loads((out / "trainer_state.json").read_text())["step"] == 4
    assert np.isfinite(json.loads((out / "trainer_state.json").read_text())["losses"]).all()


def test_disk_full_while_saving_keeps_the_previous_checkpoint(cli, text, tmp_path, monkeypatch):
    from tfcli.engine.train import folder

    real_open, opened = open, [0]

    def full_disk(path, mode="r", *a, **kw):
        if "w" in mode and str(path).endswith(".model.safetensors.tmp-" + str(os.getpid())):
            opened[0] += 1
            if opened[0] == 2:  # the second checkpoint's weights
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, mode, *a, **kw)

    monkeypatch.setattr(folder, "open", full_disk, raising=False)
    out = tmp_path / "m"
    r = cli("train", text, "-o", out, *TINY, "--steps", "10")
    last_line_error(r, 1, "no space left")
    assert json.loads((out / "trainer_state.json").read_text())["step"] == 2
    assert not [n for n in os.listdir(out) if ".tmp-" in n]  # no half-written file left behind
    g = cli("generate", "-m", out, "To", "-n", "3")
    assert g.exit_code == 0, g.stderr
