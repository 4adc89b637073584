"""TransformerLens's own `run_with_cache` on a GPT-2-shaped model (tests/data/tiny-gpt2), read under
its hook names, equals tfcli's cache read under the same names as aliases: code from its tutorials
ports by changing the import. TransformerLens is a test-only reference (the [test] extra)."""

from __future__ import annotations

import numpy as np
import pytest

import tfcli

from conftest import TINY_GPT2, assert_f32_near

torch = pytest.importorskip("torch")

IDS = [5, 17, 99, 23, 41, 8, 77, 150, 3, 60, 12, 200]
STEPS = 64  # float32 steps of each array's largest value: the same sums in another order


@pytest.fixture(scope="module")
def theirs():
    # imported here, not at collection: seconds of imports each of the suite's two processes would pay
    bridge = pytest.importorskip("transformer_lens.model_bridge")
    model = bridge.TransformerBridge.boot_transformers(str(TINY_GPT2), device="cpu")
    with torch.no_grad():
        logits, cache = model.run_with_cache(torch.tensor([IDS]))
    return logits[0].numpy(), {k: v[0].numpy() for k, v in cache.items()}  # no batch axis, as tfcli's


@pytest.mark.parametrize("fast", [False, True], ids=["textbook", "fast"])
def test_the_aliases_hold_what_transformer_lens_holds(theirs, fast):
    their_logits, their = theirs
    model = tfcli.load(TINY_GPT2, fast=fast)
    logits, ours = model.run_with_cache(np.array(IDS))
    assert_f32_near(logits, their_logits, STEPS)
    names = [f"blocks.{b}.{site}" for b in range(model.n_blocks) for site in (
        "hook_resid_pre", "attn.hook_pattern", "attn.hook_z", "hook_attn_out", "hook_resid_mid", "mlp.hook_post", "hook_mlp_out", "hook_resid_post")]
    names.append("ln_final.hook_normalized")
    for name in names:
        assert name in their, name
        assert ours[name].shape == their[name].shape, name
        assert_f32_near(ours[name], their[name], STEPS)
    # tfcli's embed is block 0's whole input: TransformerLens splits GPT-2's into the token and the position parts
    assert_f32_near(ours["hook_embed"], their["hook_embed"] + their["hook_pos_embed"], STEPS)
    # the residual stack, as its logit-lens tutorials take it
    stack = ours.accumulated_resid()
    want = np.stack([their[f"blocks.{b}.hook_resid_pre"] for b in range(model.n_blocks)] + [their[f"blocks.{model.n_blocks - 1}.hook_resid_post"]])
    assert_f32_near(stack, want, STEPS)
