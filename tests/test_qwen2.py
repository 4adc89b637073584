"""Qwen2 folders (Qwen2ForCausalLM saved by transformers) run in tfcli as in transformers.

No real Qwen2 checkpoint can be fetched here: each test builds a random tiny one with transformers
(grouped-query attention, q/k/v biases and none on o, rope_theta 1e6, tied or untied embeddings),
with the tiny Llama's byte-level tokenizer (its 300 tokens are the vocabulary), and compares.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tfcli.engine.fast.run.fast_executor import Fast  # noqa: E402
from tfcli.store import load  # noqa: E402

from conftest import TINY_LLAMA, reference, assert_greedy_equals_transformers, torch_logits  # noqa: E402
from tfcli.engine.fast import FAST  # noqa: E402

# (heads, key/value heads, tied): grouped-query attention in both, one with tied embeddings, as the
# small Qwen2.5 models are.
SHAPES = {"untied": (4, 2, False), "tied": (6, 2, True)}


def qwen2_checkpoint(folder: Path, *, n_head: int = 4, n_kv_head: int = 2, tied: bool = False, seed: int = 0):
    """A random Qwen2ForCausalLM saved to `folder` (safetensors, config.json, the tiny Llama's
    tokenizer.json); returns the model, in eval mode, float32. Every weight and bias is random
    (transformers would start the biases at zero, which would hide a missing bias)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    head_dim = 16
    cfg = Qwen2Config(
        vocab_size=300, hidden_size=n_head * head_dim, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=n_head, num_key_value_heads=n_kv_head, max_position_embeddings=128,
        rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=tied, use_sliding_window=False,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    assert model.model.layers[0].self_attn.q_proj.bias is not None and model.model.layers[0].self_attn.o_proj.bias is None
    model.save_pretrained(folder)
    shutil.copy(TINY_LLAMA / "tokenizer.json", folder / "tokenizer.json")
    return model


@pytest.fixture(scope="module", params=sorted(SHAPES))
def checkpoint(request, tmp_path_factory):
    n_head, n_kv, tied = SHAPES[request.param]
    folder = tmp_path_factory.mktemp("qwen2") / request.param
    return folder, qwen2_checkpoint(folder, n_head=n_head, n_kv_head=n_kv, tied=tied)



def test_config_is_read_as_qwen2(checkpoint):
    folder, model = checkpoint
    cfg = load(folder).config
    assert cfg.family == "qwen2" and cfg.qkv_bias and not cfg.o_bias and cfg.rope_theta == 1e6
    assert cfg.n_kv_head < cfg.n_head and cfg.tie_embeddings is model.config.tie_word_embeddings


def test_logits_equal_transformers(checkpoint):
    folder, model = checkpoint
    lm = load(folder)
    assert not lm.warnings
    for key in ("short", "long"):
        ids = reference("tiny-llama")[f"ids_{key}"]
        logits = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)
        assert np.abs(logits - torch_logits(model, ids)).max() <= 1e-4


def test_the_biases_matter(checkpoint):
    """The same weights without the q/k/v biases give other logits: the comparison above sees them."""
    from transformers import Qwen2ForCausalLM

    folder, model = checkpoint
    unbiased = Qwen2ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        for layer in unbiased.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.zero_()
    ids = reference("tiny-llama")["ids_short"]
    lm = load(folder)
    ours = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=FAST)
    assert np.abs(ours - torch_logits(unbiased, ids)).max() > 1e-2
    assert np.abs(ours - torch_logits(model, ids)).max() <= 1e-4


def test_greedy_continuation_equals_transformers(checkpoint):
    """32 greedy tokens through tfcli's KV cache equal 32 argmax steps of transformers (no cache)."""
    assert_greedy_equals_transformers(*checkpoint)


def test_generate_command_runs_a_qwen2_folder(cli, checkpoint):
    folder, _ = checkpoint
    r = cli("generate", "-m", folder, "Hello", "-n", "5", "-t", "0")
    assert r.exit_code == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_a_two_thread_batch_and_a_short_pass_equal_transformers(checkpoint):
    """The few-row products (with the q/k/v biases added after them) and the MLP split between two
    threads: each row of a batch step, and a 5-token pass on 2 workers, give transformers' logits."""
    from tfcli.engine.kvcache import BatchCache

    folder, model = checkpoint
    net = load(folder).model
    rng = np.random.default_rng(3)
    prompt, nexts = rng.integers(0, 300, 6), rng.integers(0, 300, 3)
    cache = net.new_cache(16)
    net.forward(prompt, cache, run=FAST)
    batch = BatchCache(net.config, 3, 16)
    batch.fill(cache)
    rows = net.decode_batch(nexts, batch, Fast(2, batch=True))  # [3, V]
    for b in range(3):
        want = torch_logits(model, [*prompt, nexts[b]])[-1]
        assert np.abs(rows[b] - want).max() <= 1e-4
    short = net.forward(prompt[:5], net.new_cache(16), all_logits=True, run=Fast(2))  # [5, V]
    assert np.abs(short - torch_logits(model, prompt[:5])).max() <= 1e-4
