"""Llama 3 (RoPE scaling), Qwen3 (q/k norms, a head size of its own), Gemma 3 text and Phi-3 folders
run in tfcli as in transformers.

No real checkpoint can be fetched here: each test builds a random tiny one with transformers
(grouped-query attention, tied and untied embeddings where the family has both, every weight, bias
and norm weight random), with the tiny Llama's byte-level tokenizer (its 300 tokens are the
vocabulary), and compares logits, a greedy continuation, the residual stream and the cache.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tfcli.engine.executor import PLAIN
from tfcli.engine.fast.run.fast_executor import Fast  # noqa: E402
from tfcli.engine.inspect import Recorder  # noqa: E402
from tfcli.store import load  # noqa: E402

from conftest import TINY_LLAMA, assert_greedy_equals_transformers, torch_logits  # noqa: E402
from tfcli.engine.fast import FAST  # noqa: E402

VOCAB = 300


def _randomise(model, seed: int) -> None:
    """Every parameter random: norms around their identity (1, or 0 for Gemma's 1 + w), the rest
    around 0 (transformers starts biases and norms at constants that would hide a missing one)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((0.0 if model.config.model_type.startswith("gemma") else 1.0) + 0.1 * torch.randn_like(p))
            elif name.endswith("embed_tokens.weight") and model.config.model_type.startswith("gemma"):
                # Gemma multiplies embeddings by √D and norms every step's output: embeddings of
                # 0.2 would drown the blocks, and a tied model would only repeat its input token.
                p.copy_(0.2 / model.config.hidden_size**0.5 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))


def _save(model, folder: Path):
    model.save_pretrained(folder)
    shutil.copy(TINY_LLAMA / "tokenizer.json", folder / "tokenizer.json")
    return model


def llama3(folder: Path, tied: bool, seed: int = 0, **changes):
    """Llama 3.1-style RoPE scaling, active at this size: with Dh 16 and an original context of 32,
    the slowest rotations are stretched, the fastest kept and one blended."""
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=tied,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = LlamaForCausalLM(LlamaConfig(**(settings | changes))).eval()
    _randomise(model, seed)
    return _save(model, folder)


def qwen3(folder: Path, tied: bool, seed: int = 0, hidden_size: int = 48, n_head: int = 4, n_kv_head: int = 2, head_dim: int = 16):
    """head_dim 16 with 4 heads in a width of 48: H x Dh is not D."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=VOCAB, hidden_size=hidden_size, intermediate_size=96, num_hidden_layers=2, num_attention_heads=n_head,
        num_key_value_heads=n_kv_head, head_dim=head_dim, max_position_embeddings=128, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=tied, use_sliding_window=False, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = Qwen3ForCausalLM(cfg).eval()
    _randomise(model, seed)
    return _save(model, folder)


def gemma3(folder: Path, tied: bool = True, seed: int = 0, **changes):
    """A sliding window of 7, shorter than the 40-token prompts: layers 0, 1 and 3 slide, 2 is global;
    query_pre_attn_scalar 24 (not Dh 16); soft-capped final logits (Gemma 2 style) as a config may set."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    settings = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=tied,
        sliding_window=7, layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0}},
        query_pre_attn_scalar=24, attn_logit_softcapping=None, final_logit_softcapping=10.0,
        bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    cfg = Gemma3TextConfig(**(settings | changes))
    model = Gemma3ForCausalLM(cfg).eval()
    _randomise(model, seed)
    return _save(model, folder)


def phi3(folder: Path, tied: bool, seed: int = 0, **changes):
    """Untied: 3/4 of each head rotated (Phi-4-mini's share) and a sliding window of 9 on every layer
    (as Phi-3-mini-4k has one). Tied (as Phi-4-mini): half of each head rotated, with longrope's
    short factors and its attention factor (context 128 over an original 64)."""
    from transformers import Phi3Config, Phi3ForCausalLM

    rotated = 0.5 if tied else 0.75
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": rotated}
    if tied:
        pairs = int(16 * rotated) // 2
        rng = np.random.default_rng(seed)
        rope |= {"rope_type": "longrope", "short_factor": list(1 + rng.random(pairs)), "long_factor": list(2 + rng.random(pairs))}
    settings = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, original_max_position_embeddings=64, rms_norm_eps=1e-5,
        tie_word_embeddings=tied, rope_parameters=rope, partial_rotary_factor=rotated, sliding_window=None if tied else 9,
        bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    model = Phi3ForCausalLM(Phi3Config(**(settings | changes))).eval()
    _randomise(model, seed)
    return _save(model, folder)


BUILDERS = {"llama3": llama3, "qwen3": qwen3, "gemma3": gemma3, "phi3": phi3}
CASES = [(family, tied) for family in BUILDERS for tied in (False, True)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{f}-{'tied' if t else 'untied'}" for f, t in CASES])
def checkpoint(request, tmp_path_factory):
    family, tied = request.param
    folder = tmp_path_factory.mktemp(family) / ("tied" if tied else "untied")
    return folder, BUILDERS[family](folder, tied)



def prompt_ids(n: int = 40, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, n)


def test_logits_equal_transformers(checkpoint):
    folder, model = checkpoint
    lm = load(folder)
    assert not lm.warnings
    assert lm.config.family == model.config.model_type.removesuffix("_text")
    ids = prompt_ids()
    for run in (PLAIN, Fast()):
        logits = lm.model.forward(ids, lm.model.new_cache(len(ids)), all_logits=True, run=run)
        assert np.abs(logits - torch_logits(model, ids)).max() <= 1e-4


def test_cached_decoding_equals_one_pass(checkpoint):
    """Token by token through the cache, then a 5-token pass on two threads, against one pass."""
    folder, _ = checkpoint
    net = load(folder).model
    ids = prompt_ids()
    whole = net.forward(ids, net.new_cache(len(ids)), all_logits=True, run=PLAIN)  # [T, V]
    cache = net.new_cache(len(ids))
    steps = np.concatenate([net.forward(ids[i : i + 1], cache, run=FAST) for i in range(len(ids))])  # [T, V]
    assert np.abs(steps - whole).max() <= 1e-4
    cache = net.new_cache(len(ids))
    net.forward(ids[:-5], cache, run=FAST)
    assert np.abs(net.forward(ids[-5:], cache, all_logits=True, run=Fast(2)) - whole[-5:]).max() <= 1e-4


def test_greedy_continuation_equals_transformers(checkpoint):
    """32 greedy tokens through tfcli's KV cache equal 32 argmax steps of transformers (no cache)."""
    assert_greedy_equals_transformers(*checkpoint)


def test_hidden_states_equal_transformers(checkpoint):
    folder, model = checkpoint
    net = load(folder).model
    ids = prompt_ids(20)
    rec = Recorder(residual=True)
    net.forward(ids, net.new_cache(len(ids)), hooks=rec, run=FAST)
    mine = rec.hidden_states()
    with torch.no_grad():
        theirs = [h[0].numpy() for h in model(torch.tensor([list(ids)]), output_hidden_states=True).hidden_states]
    assert len(mine) == len(theirs)
    for a, b in zip(mine[:-1], theirs[:-1]):
        assert np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(b).max())
    assert np.abs(net.final_norm(mine[-1]) - theirs[-1]).max() <= 1e-4 * max(1.0, np.abs(theirs[-1]).max())


def test_the_logit_lens_equals_transformers(checkpoint):
    """At every layer, tfcli's lens (analysis/lens.py: the top tokens and their probabilities of
    softmax(unembed(final_norm(h)))) equals transformers' lm_head(norm(h)), soft-capped where the
    config caps the final logits (Gemma)."""
    from tfcli.analysis.lens import logit_lens

    folder, model = checkpoint
    net = load(folder).model
    ids = prompt_ids(20)
    rec = Recorder(residual=True)
    net.forward(ids, net.new_cache(len(ids)), hooks=rec, run=FAST)
    lens = logit_lens(net, rec.hidden_states(), k=5)
    cap = getattr(model.config, "final_logit_softcapping", None)
    with torch.no_grad():
        hidden = model(torch.tensor([list(ids)]), output_hidden_states=True).hidden_states
        for layer, h in enumerate(hidden):
            x = h[0] if layer == len(hidden) - 1 else model.model.norm(h[0])  # transformers' last one is normed already
            z = model.lm_head(x)
            if cap:
                z = cap * torch.tanh(z / cap)
            p = torch.softmax(z.double(), dim=-1).numpy()  # [T, V]
            assert np.abs(np.take_along_axis(p, lens.ids[layer], axis=-1) - lens.probs[layer]).max() <= 1e-4, layer
            assert np.abs(np.sort(p, axis=-1)[:, ::-1][:, :5] - lens.probs[layer]).max() <= 1e-4, layer  # they are the top 5


def test_params_from_is_exact(cli, checkpoint):
    folder, _ = checkpoint
    r = cli("params", "--from", folder, "--json")
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)["from"]
    assert report["agree"] and not report["uncategorised"], report


def test_generate_runs(cli, checkpoint):
    folder, _ = checkpoint
    r = cli("generate", "-m", folder, "Hello", "-n", "5", "-t", "0")
    assert r.exit_code == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_llama3_scaling_matters(tmp_path):
    """The same weights with plain RoPE give other logits: the comparison above sees the scaling."""
    model = llama3(tmp_path / "l3", tied=False)
    config = json.loads((tmp_path / "l3" / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    (tmp_path / "l3" / "config.json").write_text(json.dumps(config))
    net = load(tmp_path / "l3").model
    ids = prompt_ids()
    assert np.abs(net.forward(ids, net.new_cache(len(ids)), all_logits=True, run=FAST) - torch_logits(model, ids)).max() > 1e-2


def test_gemma3_window_matters(tmp_path):
    """The same weights with a window longer than the prompt give other logits after position 7:
    the comparison above sees the sliding window (and the window sees only its positions)."""
    model = gemma3(tmp_path / "g", seed=0)
    config = json.loads((tmp_path / "g" / "config.json").read_text())
    config["sliding_window"] = 100
    (tmp_path / "g" / "config.json").write_text(json.dumps(config))
    net = load(tmp_path / "g").model
    ids = prompt_ids()
    diff = np.abs(net.forward(ids, net.new_cache(len(ids)), all_logits=True, run=FAST) - torch_logits(model, ids)).max(axis=1)  # [T]
    assert diff[:7].max() <= 1e-4 and diff[7:].min() > 1e-3


def test_phi3_window_matters(tmp_path):
    """Without its sliding window of 9 the same Phi-3 gives other logits from position 9 on."""
    model = phi3(tmp_path / "p", tied=False)
    config = json.loads((tmp_path / "p" / "config.json").read_text())
    config["sliding_window"] = None
    (tmp_path / "p" / "config.json").write_text(json.dumps(config))
    net = load(tmp_path / "p").model
    ids = prompt_ids()
    diff = np.abs(net.forward(ids, net.new_cache(len(ids)), all_logits=True, run=FAST) - torch_logits(model, ids)).max(axis=1)  # [T]
    assert diff[:9].max() <= 1e-4 and diff[9:].min() > 1e-3


COMMANDS = [
    ("score", "hello world again"),
    ("lens", "hello world"),
    ("neurons", "hello", "--layer", "0"),
    ("attn", "hello world", "--layer", "0", "--head", "0"),
    ("embed", "neighbors", "hello"),
    ("heads", "hello world again"),
    ("ablate", "hello world"),
    ("patch", "hello world", "hello wirld", "--answer", "d", "--wrong", "x"),
    ("steer", "hello", "--toward", "good", "--away", "bad", "--layer", "0", "-n", "3", "-t", "0"),
]


@pytest.mark.parametrize("family", list(BUILDERS))
def test_every_view_and_experiment_runs_on_the_family(cli, family, tmp_path):
    """The views and the experiments (checked against transformers on GPT-2, Llama and Qwen2 in
    test_experiments.py, heads on Gemma 3 there too) run on each new family: exit 0, JSON out."""
    folder = tmp_path / family
    BUILDERS[family](folder, tied=family != "phi3", **({"final_logit_softcapping": None} if family == "gemma3" else {}))
    for command, *args in COMMANDS:
        r = cli(command, "-m", folder, *args, "--json") if command != "embed" else cli("embed", args[0], "-m", folder, *args[1:], "--json")
        assert r.exit_code == 0, (command, r.stderr)
        json.loads(r.stdout)
    r = cli("explore", "-m", folder, "hello world", "-o", tmp_path / "page.html")
    assert r.exit_code == 0 and (tmp_path / "page.html").stat().st_size > 1000, r.stderr
