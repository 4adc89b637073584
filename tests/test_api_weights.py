"""A model's weights under TransformerLens's names (`model.W_E`, `W_U`, `W_pos`, `W_Q` ... `W_out`,
tfcli/api/weights.py) are transformers' tensors of the same tiny random models, in TransformerLens's
shapes, for every family; a float32 model's W_E/W_U/W_pos are read-only views; a GGUF's are its
weights dequantized, Llama's permuted Q and K rows put back in order."""

from __future__ import annotations

import numpy as np
import pytest

import tfcli
from tfcli.engine.errors import TfcliError

from conftest import TINY_GPT2, TINY_LLAMA

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FAMILIES = ["gpt2", "llama", "qwen3", "gemma3", "phi3"]


@pytest.fixture(scope="module", params=FAMILIES)
def folder(request, tmp_path_factory):
    if request.param == "gpt2":
        return TINY_GPT2
    if request.param == "llama":
        return TINY_LLAMA
    from test_new_families import gemma3, phi3, qwen3

    f = tmp_path_factory.mktemp(request.param)
    {"qwen3": lambda: qwen3(f, tied=True), "gemma3": lambda: gemma3(f, tied=True), "phi3": lambda: phi3(f, tied=False)}[request.param]()
    return f


def _np(t) -> np.ndarray:
    return t.detach().numpy()


def _theirs(folder) -> dict[str, np.ndarray]:
    """transformers' tensors, reshaped as TransformerLens names them."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    c = hf.config
    H = c.num_attention_heads if hasattr(c, "num_attention_heads") else c.n_head
    Hkv = getattr(c, "num_key_value_heads", None) or H
    D = c.hidden_size if hasattr(c, "hidden_size") else c.n_embd
    Dh = getattr(c, "head_dim", None) or D // H
    heads = lambda w, n: w.reshape(D, n, Dh).transpose(1, 0, 2)  # [D, n*Dh] -> [n, D, Dh]  # noqa: E731
    out = {"W_E": _np(hf.get_input_embeddings().weight), "W_U": _np(hf.get_output_embeddings().weight).T}
    rows = {k: [] for k in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_gate", "W_out")}
    if c.model_type == "gpt2":
        out["W_pos"] = _np(hf.transformer.wpe.weight)
        for blk in hf.transformer.h:
            q, k, v = np.split(_np(blk.attn.c_attn.weight), 3, axis=1)  # Conv1D: [in, out]
            rows["W_Q"].append(heads(q, H)), rows["W_K"].append(heads(k, H)), rows["W_V"].append(heads(v, H))
            rows["W_O"].append(_np(blk.attn.c_proj.weight).reshape(H, Dh, D))
            rows["W_in"].append(_np(blk.mlp.c_fc.weight)), rows["W_out"].append(_np(blk.mlp.c_proj.weight))
    else:
        for blk in hf.model.layers:
            a, m = blk.self_attn, blk.mlp
            if hasattr(a, "qkv_proj"):  # Phi-3: one fused [(H+2Hkv)*Dh, D]
                q, k, v = np.split(_np(a.qkv_proj.weight).T, [H * Dh, (H + Hkv) * Dh], axis=1)
            else:
                q, k, v = (_np(p.weight).T for p in (a.q_proj, a.k_proj, a.v_proj))
            rows["W_Q"].append(heads(q, H)), rows["W_K"].append(heads(k, Hkv)), rows["W_V"].append(heads(v, Hkv))
            rows["W_O"].append(_np(a.o_proj.weight).T.reshape(H, Dh, D))
            if hasattr(m, "gate_up_proj"):  # Phi-3: gate then up
                gate, up = np.split(_np(m.gate_up_proj.weight).T, 2, axis=1)
            else:
                gate, up = _np(m.gate_proj.weight).T, _np(m.up_proj.weight).T
            rows["W_in"].append(up), rows["W_gate"].append(gate), rows["W_out"].append(_np(m.down_proj.weight).T)
    out.update({k: np.stack(v) for k, v in rows.items() if v})
    return out


@pytest.mark.parametrize("fast", [False, True], ids=["textbook", "fast"])
def test_the_weights_are_transformers_tensors_in_transformer_lens_shapes(folder, fast):
    model = tfcli.load(folder, fast=fast)
    theirs = _theirs(folder)
    c = model.config
    L, H, Hkv, D, Dh, F, V = c.n_layer, c.n_head, c.n_kv_head, c.d_model, c.head_dim, c.d_ff, c.vocab_size
    shapes = {"W_E": (V, D), "W_U": (D, V), "W_Q": (L, H, D, Dh), "W_K": (L, Hkv, D, Dh), "W_V": (L, Hkv, D, Dh),
              "W_O": (L, H, Dh, D), "W_in": (L, D, F), "W_gate": (L, D, F), "W_out": (L, F, D), "W_pos": (c.n_ctx, D)}  # fmt: skip
    for name, want in theirs.items():
        ours = getattr(model, name)
        assert ours.shape == shapes[name] == want.shape, name
        assert ours.dtype == np.float32, name
        np.testing.assert_array_equal(ours, want, err_msg=name)
    if "W_gate" not in theirs:
        assert model.W_gate is None
    if "W_pos" not in theirs:
        with pytest.raises(TfcliError, match="no position embedding W_pos.*RoPE"):
            model.W_pos


def test_the_weights_compute_the_pass():
    """The names mean what the pass computes: q = ln1(x) W_Q, the head outputs through W_O, and
    the MLP through W_in/W_gate/W_out give the cache's sites (Llama, grouped-query)."""
    model = tfcli.load(TINY_LLAMA, fast=False)
    logits, cache = model.run_with_cache("To be, or not to be")
    net = model._lm.model
    W_in, W_gate, W_out = model.W_in, model.W_gate, model.W_out
    for b in range(model.n_blocks):
        h = net.mlp_norm(cache["resid_mid", b], net.layers[b])  # [T, D]
        act = h @ W_gate[b] / (1 + np.exp(-(h @ W_gate[b]))) * (h @ W_in[b])  # silu(gate) * up
        np.testing.assert_allclose(act, cache["mlp_act", b], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cache["mlp_act", b] @ W_out[b], cache["mlp_out", b], rtol=1e-4, atol=1e-5)
        out = np.einsum("thd,hdm->tm", cache["z", b], model.W_O[b])  # [T, D]
        np.testing.assert_allclose(out, cache["attn_out", b], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cache["ln_final"] @ model.W_U, logits, rtol=1e-4, atol=1e-4)


def test_float32_tables_are_read_only_views_and_per_block_weights_new_arrays():
    model = tfcli.load(TINY_GPT2)
    for name in ("W_E", "W_U", "W_pos"):
        w = getattr(model, name)
        assert not w.flags.writeable and w.base is not None, name
        with pytest.raises(ValueError):
            w[0, 0] = 1
    a = model.W_Q
    a[0] = 0  # a copy: the model is untouched
    assert np.abs(model.W_Q[0]).sum() > 0


def test_a_gguf_gives_its_weights_dequantized(tmp_path, monkeypatch):
    """A float32 GGUF gives back the safetensors' weights bit for bit (llama.cpp's permutation of the
    Q and K rows undone); a quantized one the same within its blocks' rounding."""
    pytest.importorskip("gguf")
    from test_gguf import MIXED, write_gguf

    monkeypatch.setenv("TFCLI_HOME", str(tmp_path / "home"))
    plain = tfcli.load(TINY_LLAMA)
    f32 = tfcli.load(write_gguf(tmp_path / "f32.gguf"))
    mixed = tfcli.load(write_gguf(tmp_path / "mixed.gguf", types=MIXED))
    for name in ("W_E", "W_U", "W_Q", "W_K", "W_V", "W_O", "W_in", "W_gate", "W_out"):
        want = getattr(plain, name)
        np.testing.assert_array_equal(getattr(f32, name), want, err_msg=name)
        got = getattr(mixed, name)
        assert got.shape == want.shape and got.dtype == np.float32, name
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 0.1, (name, err)  # 4-bit blocks: a few percent of the largest weight
        assert not np.array_equal(got, want) or name in ("W_in", "W_out"), name  # F16/BF16 may keep tiny weights exact
