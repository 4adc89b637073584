"""LoRA on the command line: `tfcli train --lora` writes an adapter folder peft loads, a run cut
short and resumed ends on the same adapter and moments bit for bit, `--lora ADAPTER` on
generate/score gives peft's logits on the same base, and a bad adapter is one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import TINY_LLAMA, interrupt_call, one_line_error

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

LORA = ["--from", TINY_LLAMA, "--lora", "4", "--targets", "q,v,o,gate,down", "--seq-len", "16", "--batch-size", "2",
        "--warmup", "1", "--lr", "1e-2", "--eval-every", "100"]  # fmt: skip


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "tiny.txt"
    lines = ["First Citizen:", "Before we proceed any further, hear me speak.", "All:", "Speak, speak.", "Resolved."]
    path.write_text("\n".join(lines * 30) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def adapter(text, tmp_path_factory):
    """An adapter trained for 5 steps by the CLI (its B no longer zero)."""
    from typer.testing import CliRunner

    from tfcli.cli import app

    out = tmp_path_factory.mktemp("adapter") / "ad"
    r = CliRunner().invoke(app, [str(a) for a in ("train", text, "-o", out, *LORA, "--steps", "5", "--json")])
    assert r.exit_code == 0, (r.stderr, r.exception)
    return out


def peft_logits(base, adapter_folder, ids) -> np.ndarray:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(base_model, adapter_folder).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()  # [T, V]


def ours_logits(base, adapter_folder, ids) -> np.ndarray:
    from tfcli.engine.loader import load_folder
    from tfcli.engine.train.lora import adapted

    lm = adapted(load_folder(base), adapter_folder)
    return lm.model.forward(np.array(ids), lm.model.new_cache(len(ids)), all_logits=True)  # [T, V]


IDS = [17, 3, 250, 99, 42, 7, 7, 120]


def test_the_adapter_folder_is_peft_format_and_peft_gives_tfcli_s_logits(adapter):
    from safetensors.numpy import load_file

    names = {p.name for p in adapter.iterdir()}
    files = {"adapter_config.json", "adapter_model.safetensors", "trainer_state.json", "optimizer.safetensors", "README.md"}
    assert files <= names
    assert "model.safetensors" not in names  # the base's weights are not copied
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8.0 and config["peft_type"] == "LORA"
    assert sorted(config["target_modules"]) == ["down_proj", "gate_proj", "o_proj", "q_proj", "v_proj"]
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    assert len(tensors) == 3 * 5 * 2  # 3 layers x 5 targets x (A, B)
    b = tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    assert b.shape == (96, 4) and np.abs(b).max() > 0  # it learned: B started at zero
    ref = peft_logits(TINY_LLAMA, adapter, IDS)
    ours = ours_logits(TINY_LLAMA, adapter, IDS)
    assert np.abs(ours - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())


def test_the_adapter_changes_the_logits(adapter):
    from tfcli.engine.loader import load_folder

    lm = load_folder(TINY_LLAMA)
    plain = lm.model.forward(np.array(IDS), lm.model.new_cache(len(IDS)), all_logits=True)
    assert np.abs(ours_logits(TINY_LLAMA, adapter, IDS) - plain).max() > 1e-3


def test_score_with_lora_gives_peft_s_log_probs(cli, adapter):
    from tfcli.engine.tokenizer import Tokenizer

    text = "Speak, speak. Before we proceed"
    r = cli("score", "-m", TINY_LLAMA, "--lora", adapter, text, "--json")
    assert r.exit_code == 0, (r.stderr, r.exception)
    tokens = json.loads(r.stdout)["tokens"]
    ids = [t["id"] for t in tokens]
    assert ids == Tokenizer(TINY_LLAMA / "tokenizer.json").prompt(text)
    ref = peft_logits(TINY_LLAMA, adapter, ids).astype(np.float64)  # [T, V]
    logp = ref - np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1, keepdims=True)) - ref.max(-1, keepdims=True)
    want = [logp[i - 1, ids[i]] for i in range(1, len(ids))]
    got = [t["logprob"] for t in tokens[1:]]
    assert np.abs(np.array(got) - np.array(want)).max() <= 6e-4  # --json shows 3 decimals: 5e-4 of rounding


def test_generate_with_lora_runs(cli, adapter):
    args = ["-m", TINY_LLAMA, "Speak", "-n", "12", "-t", "0"]
    with_lora, plain = cli("generate", *args, "--lora", adapter), cli("generate", *args)
    assert with_lora.exit_code == 0 and plain.exit_code == 0, (with_lora.stderr, plain.stderr)
    assert with_lora.stdout.startswith("Speak")


def test_ctrl_c_and_resume_end_on_the_same_adapter_bit_for_bit(cli, text, tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    from tfcli.engine.train.run import Run

    # one thread for every run: the default takes the cores idle at the time, and a product's sums
    # in another order (BLAS on 1 or 2 threads) would move the adapter's last bits, not the resume
    args = [*LORA, "--steps", "5", "--seed", "3", "--threads", "1"]
    whole = cli("train", text, "-o", tmp_path / "whole", *args)
    assert whole.exit_code == 0, (whole.stderr, whole.exception)
    real = Run.train_step
    interrupt_call(monkeypatch, Run, "train_step", 3)  # Ctrl-C after 2 steps
    r = cli("train", text, "-o", tmp_path / "cut", *args)
    assert r.exit_code == 130 and "interrupted at step 2" in r.stderr, r.stderr
    monkeypatch.setattr(Run, "train_step", real)
    again = cli("train", text, "-o", tmp_path / "cut", "--resume", "--threads", "1")
    assert again.exit_code == 0, (again.stderr, again.exception)
    for name in ("adapter_model.safetensors", "optimizer.safetensors"):
        a, b = load_file(str(tmp_path / "whole" / name)), load_file(str(tmp_path / "cut" / name))
        assert set(a) == set(b) and a
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    losses = [json.loads((tmp_path / d / "trainer_state.json").read_text())["losses"] for d in ("whole", "cut")]
    assert losses[0] == losses[1] and len(losses[0]) == 5


def test_resume_refuses_a_lost_optimizer_state(cli, text, tmp_path, adapter):
    cut = tmp_path / "cut"
    shutil.copytree(adapter, cut)
    (cut / "optimizer.safetensors").unlink()
    one_line_error(cli("train", text, "-o", cut, "--resume", "--steps", "8"), 1, "optimizer.safetensors")


@pytest.mark.parametrize("flags, needle", [
    (["--lora", "4"], "needs --from"),
    (["--from", TINY_LLAMA, "--lora", "0"], "not a rank"),
    (["--from", TINY_LLAMA, "--lora", "4", "--targets", "q,xyz"], "--targets"),
    (["--from", TINY_LLAMA, "--lora", "4", "--targets", "q,q"], "--targets"),
    (["--from", TINY_LLAMA, "--lora", "4", "--no-mask"], "--no-mask"),
    (["--from", TINY_LLAMA, "--alpha", "8"], "LoRA setting"),
])  # fmt: skip
def test_bad_lora_flags_exit_2_in_one_line(cli, text, tmp_path, flags, needle):
    one_line_error(cli("train", text, "-o", tmp_path / "ad", *flags), 2, needle)


def test_a_rank_beyond_the_matrix_is_one_line(cli, text, tmp_path):
    one_line_error(cli("train", text, "-o", tmp_path / "ad", "--from", TINY_LLAMA, "--lora", "97"), 1, "not a rank")
    assert not (tmp_path / "ad").exists()  # nothing written for a run that could not start


def test_a_target_the_family_does_not_have_is_one_line(cli, text, tmp_path):
    """qkv is Phi-3's and GPT-2's fused matrix: a Llama has q, k and v apart; GPT-2 has no gate."""
    r = cli("train", text, "-o", tmp_path / "ad", "--from", TINY_LLAMA, "--lora", "2", "--targets", "qkv")
    one_line_error(r, 1, "--targets 'qkv' is not a projection of a llama block", "q,k,v,o,gate,up,down")
    gpt2 = TINY_LLAMA.parent / "tiny-gpt2"
    r = cli("train", text, "-o", tmp_path / "ad", "--from", gpt2, "--lora", "2", "--targets", "q")
    one_line_error(r, 1, "a gpt2 model keeps q, k and v in one matrix (c_attn)", "--targets qkv")
    r = cli("train", text, "-o", tmp_path / "ad", "--from", gpt2, "--lora", "2", "--targets", "gate")
    one_line_error(r, 1, "--targets 'gate' is not a projection of a gpt2 block")
    assert not (tmp_path / "ad").exists()


def test_bad_adapters_are_one_line(cli, adapter, tmp_path):
    from tfcli.engine.train import lora

    run = ["generate", "-m", TINY_LLAMA, "hi", "-n", "2", "--lora"]
    one_line_error(cli(*run, tmp_path / "nowhere"), 1, "does not exist")
    damaged = tmp_path / "damaged"
    shutil.copytree(adapter, damaged)
    (damaged / "adapter_model.safetensors").write_bytes(b"\x00\x01")
    one_line_error(cli(*run, damaged), 1, "not a readable LoRA adapter")
    missing = tmp_path / "missing"
    shutil.copytree(adapter, missing)
    (missing / "adapter_config.json").unlink()
    one_line_error(cli(*run, missing), 1, "adapter_config.json")
    # the right shapes, other weights: the recorded fingerprint of the base refuses it
    other = tmp_path / "other-base"
    shutil.copytree(TINY_LLAMA, other)
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(other / "model.safetensors"))
    weights["model.norm.weight"] = weights["model.norm.weight"] + 0.01
    save_file(weights, str(other / "model.safetensors"), metadata={"format": "pt"})
    one_line_error(cli("generate", "-m", other, "hi", "-n", "2", "--lora", adapter), 1, "trained on other weights")
    # another shape: a GPT-2 has none of its matrices
    one_line_error(cli("score", "-m", TINY_LLAMA.parent / "tiny-gpt2", "hi", "--lora", adapter), 1, "does not fit")
    assert lora.read(adapter).rank == 4


def test_convert_merge_lora_equals_peft_s_merge_and_unload(cli, adapter, tmp_path):
    from peft import PeftModel
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM

    from tfcli.engine.loader import load_folder

    out = tmp_path / "merged"
    r = cli("convert", TINY_LLAMA, out, "--merge-lora", adapter)
    assert r.exit_code == 0 and r.stdout.strip() == str(out), (r.stderr, r.exception)
    ours = load_file(str(out / "model.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(TINY_LLAMA, dtype=torch.float32)
    theirs = {k: v.numpy() for k, v in PeftModel.from_pretrained(base, adapter).merge_and_unload().state_dict().items()}
    assert set(ours) == set(theirs)
    for name, w in ours.items():
        assert np.abs(w - theirs[name]).max() <= 1e-6 * max(1.0, np.abs(theirs[name]).max()), name
    lm = load_folder(out)  # the folder runs as the adapter applied
    merged = lm.model.forward(np.array(IDS), lm.model.new_cache(len(IDS)), all_logits=True)
    assert np.abs(merged - ours_logits(TINY_LLAMA, adapter, IDS)).max() <= 1e-5
    one_line_error(cli("convert", TINY_LLAMA, out, "--merge-lora", adapter), 2, "already exists")
    one_line_error(cli("convert", TINY_LLAMA, tmp_path / "m.gguf", "--merge-lora", adapter), 2, "not a GGUF")


def test_an_adapter_on_a_quantized_gguf_gives_peft_s_logits_on_its_weights(cli, text, tmp_path):
    """--from a Q8_0 GGUF: the adapter trains on the dequantized weights, --lora on the GGUF merges
    it into them (the targeted matrices dequantized, the rest run in place), and peft on the same
    weights widened to a folder gives the same logits; the float original is another base."""
    from tfcli.engine.train.lora import adapted
    from tfcli.store import load

    gguf, wide, ad = tmp_path / "tiny.q8_0.gguf", tmp_path / "wide", tmp_path / "ad"
    assert cli("convert", TINY_LLAMA, gguf, "--quantize", "q8_0").exit_code == 0
    assert cli("convert", gguf, wide).exit_code == 0
    r = cli("train", text, "-o", ad, *[a if a != TINY_LLAMA else gguf for a in LORA], "--steps", "3")
    assert r.exit_code == 0, (r.stderr, r.exception)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TFCLI_HOME", str(tmp_path / "tfcli-home"))
        lm = adapted(load(str(gguf)), ad)
    from tfcli.engine.kvcache import KVCache

    # a float32 cache, as peft's: a quantized model's default is float16 (kvcache.default_kv_type)
    ours = lm.model.forward(np.array(IDS), KVCache(lm.model.config, len(IDS), "f32"), all_logits=True)
    ref = peft_logits(wide, ad, IDS)
    assert np.abs(ours - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    one_line_error(cli("generate", "-m", TINY_LLAMA, "hi", "-n", "2", "--lora", ad), 1, "trained on other weights")
