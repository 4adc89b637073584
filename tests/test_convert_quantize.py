"""`tfcli convert FOLDER OUT.gguf --quantize TYPE`: a model folder written as a GGUF file, checked by
readers that are not tfcli's. gguf-py reads its metadata and tensors (each one bit for bit what
gguf-py's own quantizer makes of the original weight, Q/K rows in llama.cpp's order), transformers
loads it and computes tfcli's logits on the same file, and tfcli converts it back to the folder it
came from. The models are random tiny ones saved by transformers, with the tiny Llama's tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

from tfcli.engine import formats  # noqa: E402
from tfcli.engine.executor import PLAIN  # noqa: E402
from tfcli.store import gguf as tg  # noqa: E402
from tfcli.store import load  # noqa: E402
from tfcli.store.gguf import write  # noqa: E402

from conftest import TINY_LLAMA, EPS32, assert_f32_near, one_line_error, reference, torch_logits  # noqa: E402

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEXTS = ["Hello, world!", "The quick brown fox 🙂", "今天天气很好。", "  two  spaces\n\n\tand a tab", "<|endoftext|>x"]
GGML = {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "f16": Q.F16, "f32": Q.F32}
N_HEAD, N_KV_HEAD, HEAD_DIM, D_FF = 4, 2, 16, 40  # rows of 40 weights: ffn_down is not whole blocks of 32


def tiny_checkpoint(folder: Path, family: str = "llama", *, tied: bool = False, dtype=None, rope: dict | None = None, seed: int = 0):
    """A random Llama (or Qwen2) saved by transformers in `folder`, with the tiny Llama's
    tokenizer.json and a tokenizer_config.json naming its special tokens and a chat template;
    returns the float32 model in eval mode. Every weight and bias is random, norms near 1."""
    cls, cfg_cls = {
        "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
        "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config),
    }[family]
    extra = {"use_sliding_window": False} if family == "qwen2" else {"head_dim": HEAD_DIM}
    if rope:
        extra["rope_parameters"] = rope
    cfg = cfg_cls(
        vocab_size=320, hidden_size=N_HEAD * HEAD_DIM, intermediate_size=D_FF, num_hidden_layers=2, num_attention_heads=N_HEAD,
        num_key_value_heads=N_KV_HEAD, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=tied,
        bos_token_id=0, eos_token_id=0, **extra,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if name.endswith("norm.weight") else 0.2 * torch.randn_like(p))
    (model.to(dtype) if dtype else model).save_pretrained(folder)
    model.float()
    shutil.copy(TINY_LLAMA / "tokenizer.json", folder / "tokenizer.json")
    tok_cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False, "chat_template": CHATML}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    return model


def llama_cpp_permute(w: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """convert_hf_to_gguf.py `LlamaModel.permute`, as written there (not tfcli's)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_cpp_weights(folder: Path, family: str = "llama") -> dict[str, np.ndarray]:
    """The folder's float32 weights under llama.cpp's names, Q and K rows permuted for Llama (names
    written out here, not taken from tfcli)."""
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.bias": "attn_v.bias",
    }  # fmt: skip
    whole = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    out = {}
    for hf, w in load_file(folder / "model.safetensors").items():
        w = w.astype(np.float32)
        if hf in whole:
            out[whole[hf]] = w
            continue
        i, rest = hf.split(".", 3)[2:]
        if family == "llama" and rest.startswith("self_attn.q_proj"):
            w = llama_cpp_permute(w, N_HEAD, N_HEAD)
        elif family == "llama" and rest.startswith("self_attn.k_proj"):
            w = llama_cpp_permute(w, N_HEAD, N_KV_HEAD)
        out[f"blk.{i}.{per_layer[rest]}"] = w
    return out


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama") / "tiny-llama"
    return folder, tiny_checkpoint(folder)


@pytest.fixture(scope="module")
def ggufs(llama, tmp_path_factory):
    """The tiny Llama written once in each type."""
    root = tmp_path_factory.mktemp("ggufs")
    return {kind: write.write_gguf(llama[0], root / f"tiny.{kind}.gguf", kind).path for kind in GGML}


def fields(path: Path) -> tuple[dict, dict]:
    r = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}, {t.name: t for t in r.tensors}


# --- gguf-py reads it -------------------------------------------------------------------------------------


def test_metadata_as_llama_cpp_writes_it(ggufs, llama):
    meta, tensors = fields(ggufs["q8_0"])
    cfg = llama[1].config
    expected = {
        "general.architecture": "llama", "general.file_type": 7, "general.quantization_version": 2,
        "llama.block_count": 2, "llama.context_length": 256, "llama.embedding_length": 64, "llama.feed_forward_length": D_FF,
        "llama.attention.head_count": N_HEAD, "llama.attention.head_count_kv": N_KV_HEAD, "llama.attention.key_length": HEAD_DIM,
        "llama.rope.dimension_count": HEAD_DIM, "llama.vocab_size": 320, "llama.rope.freq_base": cfg.rope_parameters["rope_theta"],
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0,
        "tokenizer.ggml.add_bos_token": False, "tokenizer.chat_template": CHATML,
    }  # fmt: skip
    assert {k: meta[k] for k in expected} == expected
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6, rel=EPS32)
    tok = json.loads((TINY_LLAMA / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    # Every id below the model's 320 rows: the tokenizer's 300, then unused [PAD] tokens, as llama.cpp pads.
    assert meta["tokenizer.ggml.tokens"] == sorted(vocab, key=vocab.get) + [f"[PAD{i}]" for i in range(300, 320)]
    assert meta["tokenizer.ggml.token_type"] == [3] + [1] * 299 + [5] * 20
    assert meta["tokenizer.ggml.merges"] == [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]
    assert len(tensors) == 2 + 2 * 9 + 1


@pytest.mark.parametrize("kind", sorted(GGML))
def test_each_tensor_is_gguf_pys_quantization_of_the_weight(kind, ggufs, llama):
    """Vectors in F32, matrices in the asked type but ffn_down (rows of 40) in F16; each tensor's bytes
    are gguf-py's quantization of the original weight (Q/K permuted as llama.cpp does), and gguf-py's
    dequantize of them equals tfcli's dequantize of tfcli's quantize, bit for bit."""
    _, tensors = fields(ggufs[kind])
    weights = llama_cpp_weights(llama[0])
    assert sorted(tensors) == sorted(weights)
    for name, w in weights.items():
        t = tensors[name]
        want = Q.F32 if w.ndim == 1 else Q.F16 if kind in ("q8_0", "q4_0") and w.shape[1] % 32 else GGML[kind]
        assert t.tensor_type == want, (name, t.tensor_type)
        assert list(t.shape[::-1]) == list(w.shape)
        theirs = gguf.quants.dequantize(t.data, t.tensor_type).reshape(w.shape)
        assert np.asarray(t.data).tobytes() == gguf.quants.quantize(w, want).tobytes(), name
        if want in (Q.Q8_0, Q.Q4_0):
            type_id, blocks = formats.quantize(w, kind)
            ours = formats.dequantize(blocks, type_id, w.shape)
        else:
            ours = w.astype(np.float16).astype(np.float32) if want == Q.F16 else w
        assert theirs.dtype == np.float32 and np.array_equal(theirs.view(np.uint32), ours.view(np.uint32)), name


# --- transformers reads it, and tfcli runs it ----------------------------------------------------------------


def transformers_logits(path: Path, ids) -> np.ndarray:
    from transformers import AutoModelForCausalLM

    pytest.importorskip("accelerate")  # transformers needs it for gguf_file=
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(ids)[None])).logits[0].numpy()  # [T, V]


def tfcli_logits(path: Path, ids, monkeypatch, tmp_path) -> np.ndarray:
    """-m FILE.gguf: run in place, quantized; the textbook executor (dequantize a tile, NumPy product)."""
    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "home"))
    lm = load(str(path))
    return lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=PLAIN)  # [T, V]


# How far each type moves the random tiny models' logits from the float32 original's: the largest
# difference relative to the largest logit, and the lowest correlation allowed. Measured (Llama,
# Qwen2): f32 3e-6 (float32 rounding); f16 0.0021-0.0023; q8_0 0.075, correlation 0.9991; q4_0 0.84-0.89,
# correlation 0.84. Random weights of these sizes amplify every error (f16's 2^-11 already becomes
# 0.2%): SmolLM2's real weights move much less (README).
CLOSE = {"f32": (1e-5, 1 - 1e-9), "f16": (0.005, 0.99999), "q8_0": (0.15, 0.998), "q4_0": (1.5, 0.75)}


def assert_near_original(ours: np.ndarray, original: np.ndarray, kind: str) -> None:
    largest, correlation = CLOSE[kind]
    assert np.abs(ours - original).max() <= largest * np.abs(original).max()
    assert np.corrcoef(ours.ravel(), original.ravel())[0, 1] >= correlation


@pytest.mark.parametrize("kind", sorted(GGML))
def test_transformers_reads_the_model_tfcli_runs(kind, ggufs, llama, monkeypatch, tmp_path):
    """transformers reading the file gives tfcli's logits on the same file within float32 rounding
    (both compute with the same dequantized weights), and near the float32 original's."""
    ids = reference("tiny-llama")["ids_long"][:64] % 300
    ours = tfcli_logits(ggufs[kind], ids, monkeypatch, tmp_path)
    theirs = transformers_logits(ggufs[kind], ids)
    assert_f32_near(ours, theirs, steps=64)  # measured: up to 26 steps of the largest logit
    assert_near_original(ours, torch_logits(llama[1], ids), kind)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_qwen2_biases_and_tied_embeddings(tied, tmp_path, monkeypatch):
    """Qwen2: Q, K, V biases in F32, rows not permuted (llama.cpp runs it with NEOX RoPE), no output
    matrix when tied; transformers and tfcli agree on the file, near the original."""
    folder = tmp_path / "qwen2"
    model = tiny_checkpoint(folder, "qwen2", tied=tied)
    path = write.write_gguf(folder, tmp_path / "q.gguf", "q8_0").path
    meta, tensors = fields(path)
    assert meta["general.architecture"] == "qwen2" and "output.weight" not in tensors if tied else "output.weight" in tensors
    assert tensors["blk.0.attn_q.bias"].tensor_type == Q.F32
    for name, w in llama_cpp_weights(folder, "qwen2").items():
        if w.ndim == 2 and w.shape[1] % 32 == 0:
            assert np.asarray(tensors[name].data).tobytes() == gguf.quants.quantize(w, Q.Q8_0).tobytes(), name
    ids = reference("tiny-llama")["ids_long"][:64] % 300
    ours = tfcli_logits(path, ids, monkeypatch, tmp_path)
    assert_f32_near(ours, transformers_logits(path, ids), steps=64)
    assert_near_original(ours, torch_logits(model, ids), "q8_0")


# --- back to a folder -------------------------------------------------------------------------------------


def test_f32_file_converts_back_to_the_folder_it_came_from(ggufs, llama, tmp_path):
    """tfcli's own GGUF reader (convert FILE.gguf DIR) gets the weights back exactly, the config's
    shapes, and a tokenizer that gives the original's ids."""
    from tfcli.engine.tokenizer import Tokenizer

    back = tg.convert(ggufs["f32"], tmp_path / "back").path
    original = load_file(llama[0] / "model.safetensors")
    restored = load_file(back / "model.safetensors")
    assert sorted(restored) == sorted(original)
    for name, w in original.items():
        assert np.array_equal(restored[name], w), name
    a, b = json.loads((llama[0] / "config.json").read_text()), json.loads((back / "config.json").read_text())
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings")
    assert {k: b[k] for k in keys} == {k: a[k] for k in keys}
    before, after = Tokenizer(llama[0] / "tokenizer.json"), Tokenizer(back / "tokenizer.json")
    for text in TEXTS:
        assert after.encode(text) == before.encode(text), text
    assert json.loads((back / "tokenizer_config.json").read_text())["chat_template"] == CHATML


def test_bf16_folder_and_llama3_rope_scaling(tmp_path):
    """A bf16 folder written in f32 holds its values exactly; Llama 3's RoPE scaling goes into a
    rope_freqs tensor, as llama.cpp's converter writes it, and comes back as the same parameters."""
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    folder = tmp_path / "bf16"
    tiny_checkpoint(folder, dtype=torch.bfloat16, rope=rope)
    path = write.write_gguf(folder, tmp_path / "b.gguf", "f32").path
    _, tensors = fields(path)
    assert tensors["rope_freqs.weight"].tensor_type == Q.F32 and len(tensors["rope_freqs.weight"].data) == HEAD_DIM // 2
    back = tg.convert(path, tmp_path / "back").path
    assert json.loads((back / "config.json").read_text())["rope_parameters"] == rope
    with torch.no_grad():
        embed = transformers.AutoModelForCausalLM.from_pretrained(folder).model.embed_tokens.weight.float().numpy()
    assert np.array_equal(load_file(back / "model.safetensors")["model.embed_tokens.weight"], embed)


# --- the command ---------------------------------------------------------------------------------------------


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_cli_writes_the_file_and_tfcli_runs_it(cli, llama, tmp_path):
    out = tmp_path / "tiny.q4_0.gguf"
    r = cli("convert", llama[0], out, "--quantize", "q4_0")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == str(out) and out.is_file()
    assert "2 matrices written in F16: their rows of 40 weights are not whole blocks of 32 (blk.0.ffn_down.weight, ...)" in r.stderr
    assert "(14 Q4_0, 5 F32, 2 F16 tensors)" in r.stderr, r.stderr
    r = cli("generate", "-m", out, "Hello", "-n", "5", "-t", "0")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("Hello") and len(r.stdout) > len("Hello")


def test_a_killed_writes_hidden_file_is_removed_a_live_ones_kept(cli, llama, tmp_path):
    """A write killed by SIGKILL leaves its hidden file; the next write of the same name removes it
    (its process is gone), never one whose process still runs."""
    import os
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    dead, live = tmp_path / f".x.gguf.partial-{gone}-abcdef", tmp_path / f".x.gguf.partial-{os.getpid()}-fedcba"
    dead.write_bytes(b"GGUF"), live.write_bytes(b"GGUF")
    assert cli("convert", llama[0], tmp_path / "x.gguf", "--quantize", "q8_0").exit_code == 0
    assert _leftovers(tmp_path) == [live.name]


def test_cli_never_overwrites_without_force(cli, llama, tmp_path):
    out = tmp_path / "x.gguf"
    out.write_bytes(b"mine")
    one_line_error(cli("convert", llama[0], out, "--quantize", "q8_0"), 1, "x.gguf already exists", "--force")
    assert out.read_bytes() == b"mine"
    r = cli("convert", llama[0], out, "--quantize", "q8_0", "--force")
    assert r.exit_code == 0, r.stderr
    assert out.read_bytes()[:4] == b"GGUF" and _leftovers(tmp_path) == []


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError], ids=["ctrl-c", "disk error"])
def test_cli_leaves_nothing_behind(cli, llama, tmp_path, monkeypatch, failure):
    calls = []
    real = write.quantize

    def failing(w, kind):
        calls.append(kind)
        if len(calls) == 5:
            raise failure("boom")
        return real(w, kind)

    monkeypatch.setattr(write, "quantize", failing)
    r = cli("convert", llama[0], tmp_path / "x.gguf", "--quantize", "q8_0")
    assert r.exit_code == (130 if failure is KeyboardInterrupt else 1), r.stderr
    assert not (tmp_path / "x.gguf").exists() and _leftovers(tmp_path) == []


def test_sigterm_leaves_nothing_behind(llama, tmp_path):
    """A real SIGTERM in the middle of the write: exit 143, no file, no hidden partial file."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import time, sys\n"
        "from tfcli.store.gguf import write\n"
        "real = write.quantize\n"
        "def slow(w, kind):\n"
        "    print('writing', flush=True); time.sleep(0.5); return real(w, kind)\n"
        "write.quantize = slow\n"
        "from tfcli.cli import main\n"
        f"sys.argv = ['tfcli', 'convert', {str(llama[0])!r}, {str(tmp_path / 'x.gguf')!r}, '--quantize', 'q8_0']\n"
        "main()\n"
    )
    env = dict(os.environ, TFCLI_HOME=str(tmp_path / "home"))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "writing"
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    _, stderr = p.communicate(timeout=60)
    assert p.returncode == 143, stderr
    assert "terminated" in stderr
    assert not (tmp_path / "x.gguf").exists() and _leftovers(tmp_path) == []


def test_cli_refusals_are_one_line(cli, llama, tmp_path, ggufs):
    one_line_error(cli("convert", llama[0], tmp_path / "x.gguf"), 2, "needs --quantize", "q8_0, q4_0, f16 or f32")
    one_line_error(cli("convert", llama[0], tmp_path / "x", "--quantize", "q8_0"), 2, "does not end in .gguf")
    one_line_error(cli("convert", ggufs["q8_0"], tmp_path / "x.gguf", "--quantize", "q8_0"), 2, "is a GGUF file already")
    one_line_error(cli("convert", llama[0], llama[0] / "x.gguf", "--quantize", "q8_0"), 1, "inside the model folder")
    one_line_error(cli("convert", "shakespeare", tmp_path / "x.gguf", "--quantize", "q8_0"), 1, "gpt2 model", "tfcli writes: llama, qwen2")
    one_line_error(cli("convert", llama[0], tmp_path / "x.gguf", "--quantize", "q5_k"), 2, "q5_k")
    assert _leftovers(tmp_path) == [] and not (tmp_path / "x.gguf").exists()


def test_existing_direction_unchanged(cli, ggufs, tmp_path):
    """convert FILE.gguf DIR still writes the float32 folder (tests/test_gguf.py checks it in full)."""
    r = cli("convert", ggufs["q8_0"], tmp_path / "back")
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "back" / "model.safetensors").is_file() and "parameters" in r.stderr
    assert "dequantizing" not in r.stderr  # progress bars at a terminal only (cli/progress.py): none in a pipe


def test_writing_never_needs_torch_transformers_or_gguf(llama, tmp_path):
    from conftest import run_without_references

    run_without_references(f"from tfcli.store.gguf.write import write_gguf; write_gguf({str(llama[0])!r}, {str(tmp_path / 'x.gguf')!r}, 'q4_0')")
