"""Hooks in the Python API (tfcli.api): `run_with_hooks` and `with model.hooks(...)` read and replace
values at sites named by (site, block) or TransformerLens's names; a replacement gives the same
logits as `tfcli patch` / `tfcli steer` for the same change; bad hooks raise one error naming the
site, and nothing stays hooked after a run or a `with` block, even one that raised."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tfcli
from tfcli.engine.errors import TfcliError

from conftest import assert_f32_near


@pytest.fixture(scope="module")
def model():
    return tfcli.load("shakespeare")


TEXT = "To be, or not to be"


def test_a_hook_reads_the_value_the_cache_keeps(model):
    _, cache = model.run_with_cache(TEXT)
    seen = {}
    model.run_with_hooks(TEXT, fwd_hooks=[("blocks.2.hook_resid_mid", lambda v, s: seen.__setitem__((s.name, s.block), v.copy())),
                                          (("attn", 1), lambda v, s: seen.__setitem__((s.name, s.block), v.copy()))])  # fmt: skip
    np.testing.assert_array_equal(seen["resid_mid", 2], cache["resid_mid", 2])
    np.testing.assert_array_equal(seen["attn", 1], cache["attn", 1])


def test_a_replacement_changes_the_rest_of_the_pass(model):
    base = model(TEXT)
    zeroed = model.run_with_hooks(TEXT, fwd_hooks=[(("mlp_out", 3), lambda v, s: np.zeros_like(v))])
    assert not np.allclose(zeroed, base)
    # zeroing the last MLP's output: the logits are the unembedding of the normed resid_mid of block 3
    _, cache = model.run_with_cache(TEXT)
    net = model._lm.model
    assert_f32_near(zeroed, net.unembed(net.final_norm(cache["resid_mid", 3])), 16)
    # a name filter, as TransformerLens's fwd_hooks take one
    counted = []
    model.run_with_hooks(TEXT, fwd_hooks=[(lambda name: name.endswith("hook_resid_post"), lambda v, s: counted.append(s.block))])
    assert counted == list(range(model.n_blocks))


def test_with_block_hooks_every_pass_and_nothing_after(model):
    base = model(TEXT)
    calls = []

    def push(v, s):
        calls.append(s.block)
        return v + 1.0

    with model.hooks({("resid_post", 1): push, "blocks.0.hook_resid_pre": lambda v, s: None}):
        inside = model(TEXT)
        _, cache = model.run_with_cache(TEXT)
        text = model.generate(TEXT, max_new_tokens=3, temperature=0)
    assert not np.allclose(inside, base)
    assert_f32_near(cache["resid_post", 1], model.run_with_cache(TEXT)[1]["resid_post", 1] + 1.0, 8)  # the cache holds the replaced value
    assert len(calls) == 2 + 3  # two passes, then generate's prompt pass and 2 decode steps (the last token is never fed)
    assert isinstance(text, str)
    assert np.array_equal(model(TEXT), base)
    assert model._active == []


def test_nothing_left_hooked_when_the_block_raises(model):
    base = model(TEXT)
    with pytest.raises(KeyError):
        with model.hooks({("resid_post", 0): lambda v, s: v * 0}):
            raise KeyError("mine")
    assert np.array_equal(model(TEXT), base) and model._active == []


def test_a_hook_that_raises_is_reraised_naming_the_site(model):
    base = model(TEXT)

    def boom(v, s):
        raise ZeroDivisionError("in my hook")

    with pytest.raises(ZeroDivisionError, match="in my hook") as e:
        model.run_with_hooks(TEXT, fwd_hooks=[("blocks.1.hook_mlp_out", boom)])
    assert any("mlp_out of block 1" in n and "blocks.1.hook_mlp_out" in n for n in e.value.__notes__)
    with pytest.raises(ZeroDivisionError):
        with model.hooks({("z", 2): boom}):
            model(TEXT)
    assert np.array_equal(model(TEXT), base) and model._active == []


@pytest.mark.parametrize("result, needle", [
    (lambda v: v[:-1], "returned shape"),
    (lambda v: v.astype(np.int32), "dtype int32"),
    (lambda v: v.tolist(), "returned a list"),
])  # fmt: skip
def test_a_wrong_result_is_one_tfcli_error(model, result, needle):
    base = model(TEXT)
    with pytest.raises(TfcliError, match=needle) as e:
        model.run_with_hooks(TEXT, fwd_hooks=[(("resid_pre", 2), lambda v, s: result(v))])
    assert "resid_pre of block 2" in str(e.value)
    with pytest.raises(TfcliError, match=needle):
        with model.hooks({"blocks.2.hook_resid_pre": lambda v, s: result(v)}):
            model.run_with_cache(TEXT)
    assert np.array_equal(model(TEXT), base) and model._active == []


def test_attention_weights_are_read_only(model):
    with pytest.raises(TfcliError, match="read only"):
        model.run_with_hooks(TEXT, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda v, s: v * 0)])


@pytest.mark.parametrize("key, needle", [
    ("blocks.2.hook_nonsense", "unknown site name"),
    ("hook_pos_embed", "unknown site name"),
    (("resid", 1), "unknown site"),
    (("resid_post", 4), "block 4 is out of range"),
    (("resid_post", -5), "block -5 is out of range"),
    ("blocks.12.attn.hook_pattern", "block 12 is out of range"),
    ("resid_post", "say which"),
    (("resid_post", "3"), "must be an integer"),
    ("ln_final.hook_normalized", "not hooked"),
    (3, "site key"),
])  # fmt: skip
def test_bad_keys_are_one_tfcli_error_and_nothing_is_hooked(model, key, needle):
    fine = lambda v, s: None  # noqa: E731
    with pytest.raises(TfcliError, match=needle):
        with model.hooks({("resid_post", 0): fine, key: fine}):
            pass
    assert model._active == []
    with pytest.raises(TfcliError, match=needle):
        model.run_with_hooks(TEXT, fwd_hooks=[(key, fine)])
    if needle != "not hooked":
        with pytest.raises(TfcliError, match=needle):
            model.run_with_cache(TEXT, names=[key])


@pytest.mark.parametrize("fwd_hooks, needle", [
    (None, "not NoneType"),
    (lambda v, s: None, "not function"),
    ("blocks.0.hook_resid_post", "not str"),
    ({"blocks.0.hook_resid_post": lambda v, s: None}, "pair, not 'blocks.0.hook_resid_post'"),
    ([("blocks.0.hook_resid_post", lambda v, s: None, 1)], "pair, not"),
])  # fmt: skip
def test_a_wrong_hook_list_is_one_tfcli_error_and_nothing_is_hooked(model, fwd_hooks, needle):
    base = model(TEXT)
    with pytest.raises(TfcliError, match=needle):
        model.run_with_hooks(TEXT, fwd_hooks=fwd_hooks)
    assert model._active == [] and np.array_equal(model(TEXT), base)


def test_a_hook_pair_may_be_a_list_as_transformer_lens_unpacks_it(model):
    zero = lambda v, s: np.zeros_like(v)  # noqa: E731
    assert np.array_equal(model.run_with_hooks(TEXT, fwd_hooks=[["blocks.3.hook_mlp_out", zero]]),
                          model.run_with_hooks(TEXT, fwd_hooks=[("blocks.3.hook_mlp_out", zero)]))  # fmt: skip


def test_a_stream_keeps_the_hooks_open_when_it_was_made(model):
    """generate(stream=True) is one generation: the hooks of the block open when it was made apply
    to its end, read after the block; a stream made before a block runs without that block's hooks."""
    plain = model.generate(TEXT, max_new_tokens=6, temperature=0)

    def zero(v, s):
        return np.zeros_like(v)

    with model.hooks({("mlp_out", 0): zero}):
        hooked = model.generate(TEXT, max_new_tokens=6, temperature=0)
        stream = model.generate(TEXT, max_new_tokens=6, temperature=0, stream=True)
    assert model._active == [] and hooked != plain
    assert "".join(stream) == hooked
    before = model.generate(TEXT, max_new_tokens=6, temperature=0, stream=True)
    with model.hooks({("mlp_out", 0): zero}):
        assert "".join(before) == plain


def test_patch_by_hook_equals_tfcli_patch(model, cli):
    """`tfcli patch --site resid`: cell (i, p) is the corrupt run with the clean run's residual
    stream at index i, position p. The same change by a hook gives the same number."""
    clean, corrupt = "To be, or not to b", "To go, or not to g"  # the clean text says e, the corrupt one o
    r = cli("patch", clean, corrupt, "-m", "shakespeare", "--json")
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    a, w = got["answer"]["id"], got["wrong"]["id"]
    _, cc = model.run_with_cache(clean)
    base = model(corrupt)[-1]
    assert np.isclose(base[a] - base[w], got["corrupt_logit_diff"], rtol=1e-3)  # --json keeps 4 significant digits
    clean_ld = got["clean_logit_diff"]
    for i, p in [(0, 4), (1, 5), (2, 17), (3, 17), (4, 17)]:  # residual index i = the input of block i (index 4: the last output)
        key = ("resid_pre", i) if i < model.n_blocks else ("resid_post", i - 1)

        def put(v, s, p=p, key=key):
            v = v.copy()
            v[p] = cc[key][p]
            return v

        patched = model.run_with_hooks(corrupt, fwd_hooks=[(key, put)])[-1]
        cell = (patched[a] - patched[w] - got["corrupt_logit_diff"]) / (clean_ld - got["corrupt_logit_diff"])
        assert np.isclose(cell, got["grid"][i]["values"][p], rtol=1e-3, atol=1e-4), (i, p)


def test_steer_by_hook_equals_tfcli_steer(model, cli, tmp_path):
    """`tfcli steer` adds scale * v to block B's output at every position: generating with a hook
    that adds the same vector gives the same greedy continuation."""
    from tfcli.analysis.experiments.steer import load as load_steering

    path = tmp_path / "v.npz"
    r = cli("steer", "To be, or", "--toward", "love", "--away", "death", "--block", "2", "--scale", "6", "-m", "shakespeare", "-n", "12", "-t", "0", "--json", "--save", str(path))
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    s = load_steering(path, model._lm.model, None, any_model=True)
    vec = s.scale * s.vector  # [D]
    with model.hooks({("resid_post", 2): lambda v, site: v + vec}):
        steered = model.generate("To be, or", max_new_tokens=12, temperature=0)
    assert steered == got["steered"]["text"]
    assert model.generate("To be, or", max_new_tokens=12, temperature=0) == got["plain"]["text"] != steered


def test_a_plain_pass_a_recorded_one_and_a_hook_that_changes_nothing_give_the_same_bits(smollm2_folder):
    """Every pass of the API stops at the sites, hooked or not: on a GGUF on the kernels the compiled
    blocks (norms and RoPE rounded in compiled code, then 8-bit activations) moved model()'s logits by
    up to 1.1 from run_with_cache's, which a clean-against-patched comparison would count as an effect."""
    model = tfcli.load(smollm2_folder)
    text = "今天天气很好, and the Eiffel Tower is in"
    plain = model(text)
    recorded, _ = model.run_with_cache(text, names=[("resid_post", 3)])
    hooked = model.run_with_hooks(text, fwd_hooks=[(("resid_post", 3), lambda value, site: value.copy())])
    np.testing.assert_array_equal(recorded, plain)
    np.testing.assert_array_equal(hooked, plain)
