"""LoRA on the families that fuse their projections: Phi-3 (qkv_proj, gate_up_proj) and GPT-2
(c_attn, Conv1D [in, out]: PEFT's fan_in_fan_out). An adapter adapts a fused matrix whole, as
PEFT does (--targets qkv, gate_up); q, k, v, gate, up alone are refused with one line saying why.
Against peft on tiny random models: peft loads tfcli's adapter with the same logits, a merged
model equals peft's merge_and_unload, and one AdamW step equals peft + torch's."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from tfcli.engine.kvcache import Sequences  # noqa: E402
from tfcli.engine.train.folder import load_params  # noqa: E402
from tfcli.engine.train.lora import (  # noqa: E402
    LoraError,
    LoraTrainable,
    adapted,
    load,
    merged,
    new_adapter,
    save,
)
from tfcli.engine.train.optim import AdamW  # noqa: E402

from conftest import lora_adapter, peft_adamw_step, peft_model  # noqa: E402

B, T = 2, 10
TARGETS = {"phi3": ("qkv", "o", "gate_up", "down"), "gpt2": ("qkv", "o", "up", "down")}


def gpt2(folder):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0,
                                       embd_pdrop=0, attn_pdrop=0, bos_token_id=0, eos_token_id=0))  # fmt: skip
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((1.0 if "ln_" in name and name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
    model.eval().save_pretrained(folder)
    import shutil

    from conftest import TINY_LLAMA

    shutil.copy(TINY_LLAMA / "tokenizer.json", folder / "tokenizer.json")


@pytest.fixture(scope="module", params=["phi3", "gpt2"])
def base(request, tmp_path_factory):
    from test_new_families import phi3

    folder = tmp_path_factory.mktemp(request.param) / "m"
    folder.mkdir()
    phi3(folder, tied=False) if request.param == "phi3" else gpt2(folder)
    cfg, _, params = load_params(folder)
    return folder, cfg, params


def adapter_with_b(cfg, params):
    """An adapter on every fused and separate matrix."""
    return lora_adapter(cfg, params, TARGETS[cfg.family])


def test_peft_loads_the_adapter_and_gives_the_same_logits(base, tmp_path):
    from tfcli.engine.loader import load_folder

    folder, cfg, params = base
    ad = adapter_with_b(cfg, params)
    save(tmp_path / "ad", ad)
    ids = np.random.default_rng(4).integers(0, cfg.vocab_size, T)
    with torch.no_grad():
        ref = peft_model(folder, tmp_path / "ad").eval()(torch.tensor(ids[None])).logits[0].numpy()  # [T, V]
    lm = adapted(load_folder(folder), tmp_path / "ad")  # --lora ADAPTER: merged at load
    ours = lm.model.forward(ids, Sequences(1, T), all_logits=True)  # [T, V]
    assert np.abs(ours - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    again = load(tmp_path / "ad", cfg, params)
    assert sorted(again.targets) == sorted(ad.targets) and again.fan_in_fan_out == (cfg.family == "gpt2")


def test_a_merged_model_equals_peft_merge_and_unload(base, tmp_path):
    folder, cfg, params = base
    ad = adapter_with_b(cfg, params)
    save(tmp_path / "ad", ad)
    theirs = peft_model(folder, tmp_path / "ad").merge_and_unload().state_dict()
    for name, w in merged(params, ad).items():
        assert np.abs(w - theirs[name].numpy()).max() <= 1e-6, name


def test_one_adamw_step_equals_peft_and_torch(base, tmp_path):
    folder, cfg, params = base
    ad = adapter_with_b(cfg, params)
    save(tmp_path / "ad", ad)
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, cfg.vocab_size, (B, T)), rng.integers(0, cfg.vocab_size, (B, T))
    ours = LoraTrainable(cfg, params, ad)
    loss, grads = ours.loss_and_grads(x, y)
    AdamW((0.9, 0.95), 1e-8, 0.0).step(ours.params, grads, 1e-2)

    their_loss, their_grads, theirs = peft_adamw_step(folder, tmp_path / "ad", x, y, lr=1e-2)
    assert loss == pytest.approx(their_loss, rel=1e-5)
    assert set(theirs) == set(ours.params) == set(their_grads)
    for name, g in grads.items():
        assert np.linalg.norm(g - their_grads[name]) <= 1e-4 * np.linalg.norm(their_grads[name]), name
    for name, p in ours.params.items():
        assert np.abs(p - theirs[name]).max() <= 1e-5, name


@pytest.mark.parametrize("target", ["q", "k", "v", "gate", "up"])
def test_a_slice_of_a_fused_matrix_is_refused_with_the_reason(base, target):
    _, cfg, params = base
    if cfg.family == "gpt2" and target in ("gate", "up"):
        match = "not a projection of a gpt2 block" if target == "gate" else None
    else:
        match = "in one matrix .*which an adapter adapts whole"
    if match is None:  # GPT-2's up is its c_fc: a matrix of its own
        assert new_adapter(cfg, params, 4, 8.0, (target,)).modules()
        return
    with pytest.raises(LoraError, match=match) as e:
        new_adapter(cfg, params, 4, 8.0, (target,))
    assert "\n" not in str(e.value) and ("use --targets " in e.value.hint or "choose from" in e.value.hint)


def test_the_default_targets_are_the_fused_attention(base):
    _, cfg, params = base
    assert new_adapter(cfg, params, 2, 4.0, ()).targets == ("qkv", "o")
