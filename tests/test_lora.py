"""LoRA adapters (engine/train/lora.py) against peft: peft loads tfcli's adapter and gives the same
logits, a merged model equals the adapter applied, and one AdamW step of tfcli's equals peft +
torch's AdamW from the same start on a tiny Llama and a tiny Qwen2 (same batch)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from tfcli.engine.train.folder import load_params  # noqa: E402
from tfcli.engine.train.lora import LoraError, LoraTrainable, load, merged, new_adapter, save  # noqa: E402
from tfcli.engine.train.optim import AdamW  # noqa: E402

from conftest import lora_adapter, peft_adamw_step, peft_model  # noqa: E402

V, B, T = 96, 2, 10


def tiny(kind: str):
    import transformers as tr

    torch.manual_seed(1)
    common = dict(vocab_size=V, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=32, tie_word_embeddings=kind == "qwen2")  # fmt: skip
    model = tr.LlamaForCausalLM(tr.LlamaConfig(**common)) if kind == "llama" else tr.Qwen2ForCausalLM(tr.Qwen2Config(**common, use_sliding_window=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((1.0 if "norm" in name else 0.0) + 0.2 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def base(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    tiny(request.param).save_pretrained(folder)
    cfg, _, params = load_params(folder)
    return folder, cfg, params


def adapter_with_b(cfg, params):
    return lora_adapter(cfg, params, ("q", "v", "o", "gate", "down"))


def test_peft_loads_the_adapter_and_gives_the_same_logits(base, tmp_path):
    folder, cfg, params = base
    ad = adapter_with_b(cfg, params)
    save(tmp_path / "ad", ad)
    ids = np.random.default_rng(4).integers(0, V, (1, T))
    ours = LoraTrainable(cfg, params, ad)
    ours._with_adapter()
    model = ours.inner.build()
    from tfcli.engine.kvcache import Sequences

    logits = model.forward(ids[0], Sequences(1, T), all_logits=True)
    with torch.no_grad():
        ref = peft_model(folder, tmp_path / "ad").eval()(torch.tensor(ids)).logits[0].numpy()
    assert np.abs(logits - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    again = load(tmp_path / "ad", cfg, params)
    assert all(np.array_equal(again.tensors[k], v) for k, v in ad.tensors.items()) and again.scale == ad.scale


def test_a_merged_model_equals_the_adapter_applied(base, tmp_path):
    folder, cfg, params = base
    ad = adapter_with_b(cfg, params)
    save(tmp_path / "ad", ad)
    peft_merged = peft_model(folder, tmp_path / "ad").merge_and_unload().state_dict()
    ours = merged(params, ad)
    for name, w in ours.items():
        assert np.abs(w - peft_merged[name].numpy()).max() <= 1e-6, name


def test_one_adamw_step_equals_peft_and_torch(base, tmp_path):
    folder, cfg, params = base
    ad = adapter_with_b(cfg, params)
    save(tmp_path / "ad", ad)
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))
    ours = LoraTrainable(cfg, params, ad)
    loss, grads = ours.loss_and_grads(x, y)
    AdamW((0.9, 0.95), 1e-8, 0.0).step(ours.params, grads, 1e-2)

    their_loss, their_grads, theirs = peft_adamw_step(folder, tmp_path / "ad", x, y, lr=1e-2)
    assert loss == pytest.approx(their_loss, rel=1e-5)
    assert set(theirs) == set(ours.params) == set(their_grads)
    for name, g in grads.items():  # Adam's first step is about lr·sign(g) whatever |g|: the gradients are held too
        assert np.linalg.norm(g - their_grads[name]) <= 1e-4 * np.linalg.norm(their_grads[name]), name
    for name, p in ours.params.items():
        assert np.abs(p - theirs[name]).max() <= 1e-5, name  # an Adam step moves each weight by about lr: 1e-5 is 1/1000 of it


@pytest.mark.parametrize("rank, targets, message", [(0, ("q",), "not a rank"), (49, ("q",), "not a rank"), (4, ("qkv",), "not a projection")])
def test_impossible_adapters_are_refused_in_one_line(base, rank, targets, message):
    _, cfg, params = base
    with pytest.raises(LoraError, match=message):
        new_adapter(cfg, params, rank, 8.0, targets)


def test_an_adapter_for_another_model_or_a_damaged_one_is_refused(base, tmp_path):
    _, cfg, params = base
    ad = new_adapter(cfg, params, 4, 8.0, ("q",))
    save(tmp_path / "ad", ad)
    other = {k: (np.zeros((v.shape[0], v.shape[1] + 1), np.float32) if k.endswith("q_proj.weight") else v) for k, v in params.items()}
    with pytest.raises(LoraError, match="does not fit"):
        load(tmp_path / "ad", cfg, other)
    (tmp_path / "ad" / "adapter_model.safetensors").write_bytes(b"\x00\x01")
    with pytest.raises(LoraError, match="not a readable LoRA adapter"):
        load(tmp_path / "ad", cfg, params)


@pytest.mark.parametrize("kind", ["qwen3", "gemma3"])
def test_the_adapter_s_gradients_equal_those_of_the_full_weights(kind, tmp_path):
    """A LoRA step forms only A's and B's gradients (lora.AdapterGrads): they equal adapter_grads
    of the merged weights' full gradients, on families with q/k norms, post-norms and GeGLU."""
    from test_new_families import gemma3, qwen3

    from tfcli.engine.train.model import Trainable
    from tfcli.engine.train.lora import adapter_grads

    {"qwen3": qwen3, "gemma3": gemma3}[kind](tmp_path / "m", tied=True)
    cfg, _, params = load_params(tmp_path / "m")
    ad = lora_adapter(cfg, params, ("q", "k", "v", "o", "gate", "up", "down"))
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, cfg.vocab_size, (B, T)), rng.integers(0, cfg.vocab_size, (B, T))
    loss, grads = LoraTrainable(cfg, params, ad).loss_and_grads(x, y)
    full_loss, full = Trainable(cfg, merged(params, ad)).loss_and_grads(x, y)
    want = adapter_grads(ad, full)
    assert loss == pytest.approx(full_loss, rel=1e-6) and set(grads) == set(want) == set(ad.tensors)
    for name, g in want.items():
        assert np.linalg.norm(grads[name] - g) <= 1e-5 * np.linalg.norm(g), name
