"""What a forward pass records (engine/inspect.py) equals transformers' own view of the same pass:
the residual stream against output_hidden_states, the MLP activations against a forward hook, for
GPT-2, Llama and Qwen2 checkpoints.

The Qwen2 checkpoint is built here: a random transformers Qwen2ForCausalLM saved with
save_pretrained (q/k/v biases made non-zero, so that they are tested), with tiny-llama's tokenizer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA, hf_pretrained
from tfcli.engine.fast import FAST

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4
TEXT = "To be, or not to be: that is the question. Whether 'tis nobler in the mind"


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    vocab = transformers.PreTrainedTokenizerFast(tokenizer_file=str(TINY_LLAMA / "tokenizer.json")).vocab_size
    cfg = transformers.Qwen2Config(
        vocab_size=max(vocab, 300), hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.2)
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path)
    shutil.copy(TINY_LLAMA / "tokenizer.json", path / "tokenizer.json")
    return path


@pytest.fixture(params=["gpt2", "llama", "qwen2"])
def family_folder(request) -> Path:
    if request.param == "qwen2":
        return request.getfixturevalue("tiny_qwen2")
    return {"gpt2": TINY_GPT2, "llama": TINY_LLAMA}[request.param]


def reference_pass(folder: Path, ids: list[int]):
    """transformers on the same folder: (hidden_states [L+1] x [T, D] with the last one final-normed,
    MLP activations [L] x [T, F], logits [T, V], the model)."""
    model = hf_pretrained(folder)
    acts: dict[int, np.ndarray] = {}
    hooks = []
    for i, layer in enumerate(model.model.layers if hasattr(model, "model") else model.transformer.h):
        if hasattr(layer.mlp, "down_proj"):  # Llama, Qwen2: the down projection's input is silu(gate) * up
            hooks.append(layer.mlp.down_proj.register_forward_hook(lambda m, inp, out, i=i: acts.__setitem__(i, inp[0][0].numpy().copy())))
        else:  # GPT-2: the output of the activation, before c_proj
            hooks.append(layer.mlp.act.register_forward_hook(lambda m, inp, out, i=i: acts.__setitem__(i, out[0].numpy().copy())))
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    for h in hooks:
        h.remove()
    hidden = [h[0].numpy() for h in out.hidden_states]
    return hidden, [acts[i] for i in sorted(acts)], out.logits[0].numpy(), model


def reference_lens(model, hidden: list[np.ndarray]) -> list[np.ndarray]:
    """softmax(lm_head(final_norm(h))) per layer; the last hidden state is already normed."""
    norm = model.model.norm if hasattr(model, "model") else model.transformer.ln_f
    probs = []
    with torch.no_grad():
        for i, h in enumerate(hidden):
            x = torch.from_numpy(h)
            if i < len(hidden) - 1:
                x = norm(x)
            probs.append(torch.softmax(model.lm_head(x), dim=-1).numpy())  # [T, V]
    return probs


def ours(folder: Path):
    from tfcli.store import load

    lm = load(folder)
    return lm, lm.tokenizer.prompt(TEXT)


def test_residual_stream_equals_output_hidden_states(family_folder):
    from tfcli.engine.inspect import Recorder

    lm, ids = ours(family_folder)
    ref, _, logits, _ = reference_pass(family_folder, ids)
    rec = Recorder(residual=True)
    mine_logits = lm.model.forward(np.asarray(ids), lm.model.new_cache(len(ids)), all_logits=True, hooks=rec, run=FAST)
    mine = rec.hidden_states()
    assert len(mine) == len(ref) == lm.config.n_layer + 1
    for i in range(len(mine) - 1):
        assert np.abs(mine[i] - ref[i]).max() <= TOLERANCE, i
    assert np.abs(lm.model.final_norm(mine[-1]) - ref[-1]).max() <= TOLERANCE  # transformers' last one is normed
    assert not np.allclose(mine[-1], ref[-1], atol=1e-3)  # ... and ours is not: the test sees the difference
    assert np.abs(mine_logits - logits).max() <= TOLERANCE
    for i in range(lm.config.n_layer):  # `mid` lies between the layer's input and output
        assert rec.mid[i].shape == mine[i].shape and not np.allclose(rec.mid[i], mine[i + 1])


def test_mlp_activations_equal_a_forward_hook(family_folder):
    from tfcli.engine.inspect import Recorder

    lm, ids = ours(family_folder)
    _, acts, _, _ = reference_pass(family_folder, ids)
    rec = Recorder(mlp=True)
    lm.model.forward(np.asarray(ids), lm.model.new_cache(len(ids)), hooks=rec, run=FAST)
    assert sorted(rec.mlp_act) == list(range(lm.config.n_layer)) == list(range(len(acts)))
    for i, a in enumerate(acts):
        assert rec.mlp_act[i].shape == a.shape == (len(ids), lm.config.d_ff)
        assert np.abs(rec.mlp_act[i] - a).max() <= TOLERANCE, i


def test_recording_some_layers_records_only_those(family_folder):
    from tfcli.engine.inspect import Recorder

    lm, ids = ours(family_folder)
    rec = Recorder(mlp=True, residual=True, layers=[1])
    lm.model.forward(np.asarray(ids), lm.model.new_cache(len(ids)), hooks=rec, run=FAST)
    assert list(rec.mlp_act) == [1] and list(rec.post) == [1] and rec.embedded is not None
