"""tfcli train end to end: a checkpoint that tfcli and transformers load with the same logits,
Ctrl-C and --resume that continue exactly, the summary, the curve, the tokenizers, --from."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import TINY_LLAMA, interrupt_call

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = ["--layers", "2", "--d-model", "16", "--heads", "2", "--context", "16", "--batch-size", "4", "--warmup", "2", "--lr", "3e-3"]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "tiny.txt"
    lines = ["First Citizen:", "Before we proceed any further, hear me speak.", "All:", "Speak, speak.", "Resolved. resolved."]
    path.write_text("\n".join(lines * 30) + "\n", encoding="utf-8")
    return path


def logits_both(folder, ids):
    from transformers import AutoModelForCausalLM

    from tfcli.engine.loader import load_folder

    lm = load_folder(folder)
    ours = lm.model.forward(np.array(ids), lm.model.new_cache(len(ids)), all_logits=True)  # [T, V]
    with torch.no_grad():
        ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()(torch.tensor([ids])).logits[0].numpy()
    return lm, ours, ref


def test_a_new_model_loads_in_tfcli_and_transformers_with_the_same_logits(cli, text, tmp_path):
    out = tmp_path / "m"
    r = cli("train", text, "-o", out, *TINY, "--steps", "12", "--eval-every", "6", "--json")
    assert r.exit_code == 0, (r.stderr, r.exception)
    summary = json.loads(r.stdout)
    assert set(summary) == {"steps", "tokens", "seconds", "train_loss", "val_loss", "folder"}
    assert summary["steps"] == 12 and summary["tokens"] == 12 * 4 * 16 and summary["folder"] == str(out)
    state = json.loads((out / "trainer_state.json").read_text())
    assert summary["train_loss"] == pytest.approx(np.mean(state["losses"][-10:]), abs=1e-6)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md"):
        assert (out / name).is_file(), name
    lm, ours, ref = logits_both(out, [5, 9, 2, 7, 7, 11, 3])
    assert not lm.warnings
    assert np.abs(ours - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    card = (out / "README.md").read_text()
    assert "tfcli train" in card and f"{summary['val_loss']:.4f}" in card
    g = cli("generate", "-m", out, "Speak", "-n", "5", "--seed", "1")
    assert g.exit_code == 0 and g.stdout, g.stderr


def test_the_loss_falls_and_progress_goes_to_stderr(cli, text, tmp_path):
    r = cli("train", text, "-o", tmp_path / "m", *TINY, "--steps", "40", "--eval-every", "20")
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert r.stdout == ""
    assert "step 20:" in r.stderr and "val " in r.stderr and "┤" in r.stderr  # the evaluation and the curve
    state = json.loads((tmp_path / "m" / "trainer_state.json").read_text())
    assert np.mean(state["losses"][-5:]) < state["losses"][0] - 0.5


def test_ctrl_c_saves_and_resume_continues_exactly(cli, text, tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    from tfcli.engine.train.run import Run

    args = [*TINY, "--steps", "6", "--eval-every", "100", "--seed", "3"]
    whole = cli("train", text, "-o", tmp_path / "whole", *args)
    assert whole.exit_code == 0, whole.stderr
    real = Run.train_step
    interrupt_call(monkeypatch, Run, "train_step", 4)  # Ctrl-C after 3 steps
    r = cli("train", text, "-o", tmp_path / "cut", *args)
    assert r.exit_code == 130 and "interrupted at step 3" in r.stderr and "--resume" in r.stderr, r.stderr
    assert json.loads((tmp_path / "cut" / "trainer_state.json").read_text())["step"] == 3
    monkeypatch.setattr(Run, "train_step", real)
    again = cli("train", text, "-o", tmp_path / "cut", "--resume")
    assert again.exit_code == 0, again.stderr
    a, b = load_file(str(tmp_path / "whole" / "model.safetensors")), load_file(str(tmp_path / "cut" / "model.safetensors"))
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    commands = json.loads((tmp_path / "cut" / "trainer_state.json").read_text())["commands"]
    assert [step for step, _ in commands] == [0, 3]  # the card shows how the run was started, then resumed
    assert "# resumed after step 3:" in (tmp_path / "cut" / "README.md").read_text(encoding="utf-8")


def test_a_resume_on_another_thread_count_says_it_is_not_exact(cli, text, tmp_path):
    from tfcli.engine.threads import available_cpus

    if available_cpus() < 2:
        pytest.skip("one core: there is no other thread count to resume on")
    args = ["--layers", "1", "--d-model", "16", "--heads", "2", "--context", "16", "--steps", "2", "--eval-every", "100"]
    assert cli("train", text, "-o", tmp_path / "m", *args, "--threads", "1").exit_code == 0
    r = cli("train", text, "-o", tmp_path / "m", "--resume", "--steps", "3", "--threads", "2")
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert "trained on 1 thread and resumes on 2" in r.stderr and "--threads 1 continues it exactly" in r.stderr
    assert json.loads((tmp_path / "m" / "trainer_state.json").read_text())["threads"] == 2


def test_bpe_tokenizer_and_png(cli, text, tmp_path):
    out, png = tmp_path / "m", tmp_path / "curve.png"
    r = cli("train", text, "-o", out, *TINY, "--tokenizer", "bpe:300", "--steps", "4", "--eval-every", "2", "--png", png)
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from tfcli.engine.tokenizer import Tokenizer

    tok = Tokenizer(out / "tokenizer.json")
    assert tok.vocab_size == 300 and tok.decode(tok.encode("Speak, speak.")) == "Speak, speak."


def test_from_a_llama_continues_it_and_transformers_agrees(cli, text, tmp_path):
    out = tmp_path / "m"
    r = cli("train", text, "-o", out, "--from", TINY_LLAMA, "--steps", "2", "--seq-len", "16", "--batch-size", "2", "--eval-every", "100", "--json")
    assert r.exit_code == 0, (r.stderr, r.exception)
    _, ours, ref = logits_both(out, [17, 3, 250, 99, 42])
    assert np.abs(ours - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    assert (out / "generation_config.json").read_bytes() == (TINY_LLAMA / "generation_config.json").read_bytes()


def test_no_mask_and_dropout_train(cli, text, tmp_path):
    r = cli("train", text, "-o", tmp_path / "m", *TINY, "--steps", "3", "--no-mask", "--dropout", "0.1", "--json")
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert "without the causal mask" in (tmp_path / "m" / "README.md").read_text()
    assert np.isfinite(json.loads(r.stdout)["train_loss"])


def test_the_char_vocabulary_is_the_shipped_models(tmp_path):
    """tinyshakespeare's character vocabulary is weights/shakespeare's own (tools/train.py made it),
    and the table lookup that encodes a long text gives the tokenizers library's ids."""
    from pathlib import Path

    from tokenizers import Tokenizer

    from tfcli.engine.train.data import char_tokenizer

    corpus = Path("/work/shared/data/tinyshakespeare.txt")
    shipped = Path(__file__).parent.parent / "weights" / "shakespeare" / "tokenizer.json"
    if not corpus.is_file():
        pytest.skip("the corpus is not on this machine")
    text = corpus.read_text(encoding="utf-8")
    ours = char_tokenizer(text, 256)
    assert json.loads(ours.json_text)["model"]["vocab"] == json.loads(shipped.read_text())["model"]["vocab"]
    sample = text[:2000] + "é€"  # two characters outside the vocabulary: <unk>
    lib = Tokenizer.from_file(str(shipped)).encode(sample, add_special_tokens=False).ids
    assert ours.encode(sample).tolist() == lib


@pytest.mark.parametrize("signum, code, said", [(2, 130, "interrupted"), (15, 143, "terminated (SIGTERM)")], ids=["ctrl-c", "sigterm"])
def test_a_real_ctrl_c_or_sigterm_stops_after_the_step_and_saves(text, tmp_path, signum, code, said):
    """SIGINT or SIGTERM to a real process: the step in progress finishes, the checkpoint is saved,
    exit 130 or 143 (a background job ignores Ctrl-C, so `kill` is how it is stopped there)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1", "TFCLI_HOME": str(tmp_path / "home")}
    out = tmp_path / "m"
    cmd = [sys.executable, "-m", "tfcli", "train", str(text), "-o", str(out), *TINY, "--steps", "100000", "--eval-every", "10", "--threads", "1"]
    restore = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731 - a background shell may have ignored SIGINT
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=restore)
    seen = ""
    deadline = time.monotonic() + 60
    while "step 4/" not in seen and time.monotonic() < deadline:
        seen += p.stderr.readline()
    p.send_signal(signum)
    _, rest = p.communicate(timeout=60)
    assert p.returncode == code, seen + rest
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["step"] >= 4 and f"{said} at step {state['step']:,}" in rest and "--resume" in rest
    assert rest.rstrip().endswith("--resume") and "Traceback" not in rest


def test_the_closing_line_names_the_folder_so_generate_reads_it(cli, text, tmp_path, monkeypatch):
    """-o NAME in the current folder: `-m NAME` would be a model name, so the line says -m ./NAME,
    and that command runs the model just trained."""
    import re

    monkeypatch.chdir(tmp_path)
    r = cli("train", text, "-o", "masked", *TINY, "--steps", "2", "--eval-every", "100")
    assert r.exit_code == 0, r.stderr
    shown = re.search(r"\(tfcli generate -m (\S+)\)", r.stderr.replace("\n", " "))
    assert shown and shown.group(1) == "./masked", r.stderr
    g = cli("generate", "-m", shown.group(1), "ab", "-n", "3", "--seed", "1")
    assert g.exit_code == 0, g.stderr



def test_the_last_steps_label_ends_where_the_curve_ends(tmp_path):
    import numpy as np
    from PIL import Image

    from tfcli.cli.views.curve import Series, write_png

    write_png(tmp_path / "c.png", [Series("train", list(range(1, 101)), list(np.linspace(3, 1, 100)))], "t")
    img = np.asarray(Image.open(tmp_path / "c.png").convert("L"))  # [h, w]
    h, w = img.shape
    band = img[h - 40 + 4 : h - 40 + 20]  # the labels under the x axis
    ink = np.nonzero((band < 128).any(axis=0))[0]
    curve_end = w - 16  # the plot's right edge: step 100
    assert curve_end - 8 <= ink.max() <= curve_end + 1
