"""A model's weights under TransformerLens's names and shapes (`model.W_E`, `model.W_Q` ...).

    name     shape              what (transformers' tensor)
    W_E      [V, D]             the token embedding (embed_tokens / wte)
    W_pos    [n_ctx, D]         the learned position embedding (GPT-2's wpe; none where RoPE turns q and k)
    W_U      [D, V]             the unembedding (lm_head, transposed; W_E.T when tied)
    W_Q      [L, H, D, Dh]      each head's query projection (q_proj / c_attn's first third)
    W_K W_V  [L, Hkv, D, Dh]    each key/value head's projection: Hkv < H with grouped-query attention
    W_O      [L, H, Dh, D]      each head's share of the output projection (o_proj / c_proj)
    W_in     [L, D, F]          the MLP's input (c_fc; up_proj in a gated MLP)
    W_gate   [L, D, F]          a gated MLP's gate (gate_proj); None for GPT-2
    W_out    [L, F, D]          the MLP's output (down_proj / mlp.c_proj)

What a property gives: a float32 model's W_E, W_pos and W_U are read-only views of the loaded
weights (no memory); the per-block ones are stacked into a new array on each access (as
TransformerLens stacks them), 4 bytes a weight. A GGUF run in place keeps its matrices quantized:
every property dequantizes a new float32 copy on each access (W_U of SmolLM2: 4·D·V = 113 MB).
Keep what you use in a variable.
"""

from __future__ import annotations

import numpy as np

from tfcli.engine.errors import UsageError
from tfcli.engine.quantized import Quantized


def _plain(w) -> np.ndarray:
    """A float32 weight as a read-only view, or a quantized one dequantized (a new array)."""
    if isinstance(w, Quantized):
        return np.asarray(w)
    view = w.view()
    view.flags.writeable = False
    return view


def _qkv(layer):
    """A block's fused query/key/value weight [D, (H+2Hkv)*Dh], heads side by side as the families
    keep it (engine/families/: Llama's w_qkv, GPT-2's c_attn_w)."""
    for name in ("w_qkv", "c_attn_w"):
        w = getattr(layer, name, None)
        if w is not None:
            return w
    raise UsageError(f"a block of type {type(layer).__name__} keeps no fused query/key/value weight tfcli knows")


class Weights:
    """The weights of the model `self._lm.model` under TransformerLens's names (a mixin of Model)."""

    _lm: object

    def _heads(self, first: int, n: int) -> np.ndarray:
        """Heads first..first+n-1 of every block's fused Q/K/V weight: [L, n, D, Dh]."""
        c = self._lm.config
        dh = c.head_dim
        out = np.empty((c.n_layer, n, c.d_model, dh), dtype=np.float32)  # [L, n, D, Dh]
        for b, layer in enumerate(self._lm.model.layers):
            w = _qkv(layer)[
                :, first * dh : (first + n) * dh
            ]  # [D, n*Dh] (a quantized matrix: only these rows dequantized)
            out[b] = np.asarray(w, dtype=np.float32).reshape(c.d_model, n, dh).transpose(1, 0, 2)  # [n, D, Dh]
        return out

    @property
    def W_E(self) -> np.ndarray:
        """The token embedding [V, D]: row i is token i's vector (before any scaling the family
        applies, as transformers' get_input_embeddings().weight). A read-only view of a float32
        model's weights; a GGUF's, dequantized on each access (a new 4·V·D-byte array).

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> model.W_E.shape == (model.config.vocab_size, model.config.d_model)
        True
        """
        return _plain(self._lm.model.token_embedding)

    @property
    def W_U(self) -> np.ndarray:
        """The unembedding [D, V]: logits = ln_final(x) @ W_U (Gemma 3 soft-caps them after). W_E.T
        when the model ties them. A read-only view of a float32 model's weights; a GGUF's,
        dequantized on each access (a new 4·D·V-byte array).

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> logits, cache = model.run_with_cache("To be")
        >>> bool(np.allclose(cache["ln_final"] @ model.W_U, logits, atol=1e-4))
        True
        """
        return _plain(self._lm.model.unembedding)

    @property
    def W_pos(self) -> np.ndarray:
        """The learned position embedding [n_ctx, D] of GPT-2-style models (row p is added to the
        token's vector at position p), a read-only view. Models whose positions enter through
        RoPE (Llama, Qwen, Gemma, Phi-3) have none: TfcliError.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> model.W_pos.shape == (model.config.n_ctx, model.config.d_model)
        True
        """
        wpe = getattr(self._lm.model, "wpe", None)
        if wpe is None:
            raise UsageError(
                f"{self._lm.name} has no position embedding W_pos: its positions enter through RoPE, which "
                "turns q and k"
            )
        return _plain(wpe)

    @property
    def W_Q(self) -> np.ndarray:
        """Each head's query projection, every block: [L, H, D, Dh] (q = x @ W_Q[b, h]). A new
        array on each access (4·L·H·D·Dh bytes), dequantized for a GGUF.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> c = model.config
        >>> model.W_Q.shape == (c.n_layer, c.n_head, c.d_model, c.head_dim)
        True
        """
        return self._heads(0, self._lm.config.n_head)

    @property
    def W_K(self) -> np.ndarray:
        """Each key head's projection, every block: [L, Hkv, D, Dh] (Hkv = H but for grouped-query
        attention, where query head h reads key head h // (H / Hkv), as TransformerBridge stacks
        them; np.repeat(W_K, H // Hkv, axis=1) gives HookedTransformer's [L, H, D, Dh]). A new
        array on each access (4·L·Hkv·D·Dh bytes), dequantized for a GGUF.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> model.W_K.shape[1] == model.config.n_kv_head
        True
        """
        c = self._lm.config
        return self._heads(c.n_head, c.n_kv_head)

    @property
    def W_V(self) -> np.ndarray:
        """Each value head's projection, every block: [L, Hkv, D, Dh], as W_K. A new array on each
        access (4·L·Hkv·D·Dh bytes), dequantized for a GGUF.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> model.W_V.shape == model.W_K.shape
        True
        """
        c = self._lm.config
        return self._heads(c.n_head + c.n_kv_head, c.n_kv_head)

    @property
    def W_O(self) -> np.ndarray:
        """Each head's share of the output projection, every block: [L, H, Dh, D] (the attention
        output is the sum over heads of z[:, h] @ W_O[b, h], plus its bias). A new array on each
        access (4·L·H·Dh·D bytes), dequantized for a GGUF.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> logits, cache = model.run_with_cache("To be")
        >>> z, W_O = cache["z", 0], model.W_O[0]  # [T, H, Dh], [H, Dh, D]
        >>> out = np.einsum("thd,hdm->tm", z, W_O)  # [T, D], without the bias: it cancels in a difference
        >>> bool(np.allclose(out[1] - out[0], cache["attn_out", 0][1] - cache["attn_out", 0][0], atol=1e-4))
        True
        """
        c, net = self._lm.config, self._lm.model
        out = np.empty((c.n_layer, c.n_head, c.head_dim, c.d_model), dtype=np.float32)  # [L, H, Dh, D]
        for b, layer in enumerate(net.layers):
            out[b] = np.asarray(net.output_projection(layer)[0], dtype=np.float32).reshape(
                c.n_head, c.head_dim, c.d_model
            )
        return out

    def _mlp(self, which: str) -> np.ndarray:
        """One of the MLP's matrices, every block, stacked: in [L, D, F], gate [L, D, F], out [L, F, D]."""
        mats = []
        for layer in self._lm.model.layers:
            m = layer.mlp
            f = m.d_ff
            w = (
                m.w_out
                if which == "out"
                else m.w_in[:, :f]
                if which == "gate"
                else m.w_in[:, f:]
                if m.gated
                else m.w_in
            )
            mats.append(np.asarray(w, dtype=np.float32))
        return np.stack(mats)

    @property
    def W_in(self) -> np.ndarray:
        """The MLP's input matrix, every block: [L, D, F] (a gated MLP's up projection; W_gate is
        its gate). A new array on each access (4·L·D·F bytes), dequantized for a GGUF.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> c = model.config
        >>> model.W_in.shape == (c.n_layer, c.d_model, c.d_ff)
        True
        """
        return self._mlp("in")

    @property
    def W_gate(self) -> np.ndarray | None:
        """A gated MLP's gate, every block: [L, D, F] (the hidden activation is
        act(x @ W_gate) * (x @ W_in)); None for a plain MLP (GPT-2). A new array on each access.

        >>> import tfcli
        >>> tfcli.load("shakespeare").W_gate is None
        True
        """
        if not self._lm.model.layers[0].mlp.gated:
            return None
        return self._mlp("gate")

    @property
    def W_out(self) -> np.ndarray:
        """The MLP's output matrix, every block: [L, F, D] (mlp_out = mlp_act @ W_out[b], plus its
        bias). A new array on each access (4·L·F·D bytes), dequantized for a GGUF.

        >>> import tfcli
        >>> model = tfcli.load("shakespeare")
        >>> logits, cache = model.run_with_cache("To be")
        >>> out = cache["mlp_act", 1] @ model.W_out[1]  # [T, D], without the bias: it cancels in a difference
        >>> bool(np.allclose(out[1] - out[0], cache["mlp_out", 1][1] - cache["mlp_out", 1][0], atol=1e-4))
        True
        """
        return self._mlp("out")
