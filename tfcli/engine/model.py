"""The forward pass every family shares, as the textbook writes it:

    x = embed(tokens)                                   # [T, D]   site embed
    for each block b:
        x = x + attention(attn_norm(x))                 # [T, D]   sites resid_pre, attn, z, attn_out, resid_mid
        x = x + mlp(mlp_norm(x))                        # [T, D]   sites mlp_act, mlp_out, resid_post
    logits = unembed(final_norm(x))                     # [T, V]

A family (engine/families/) supplies what differs: `embed`, the norms, its `attention` (the
projections and positions around the shared `attend`), its MLP's weights and activation (ops.MLP)
and `final_norm`. Every matrix product goes through the executor `at.run` (engine/executor.py):
the textbook one by default; the caller may pass the fast one, which this file never sees. A pass
asks it once how it runs (`plan`), and the plan runs the trunk (embed and blocks) below. Every
named site can be read or changed by a hook (engine/sites.py); without hooks nothing is called.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ops
from .config import ModelConfig
from .executor import PLAIN, Plain
from .kvcache import Cache, KVCache, default_kv_type
from .quantized import Quantized
from .sites import Hooks
from .slots import Prompts


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~7 us, once per block per step
class LayerCall:
    """Where one block of a forward pass runs: its index, the cache, the positions of its rows,
    the executor and the hooks of the pass."""

    index: int
    cache: Cache  # a KVCache, or a batch's (kvcache.Cache says which there are)
    positions: np.ndarray  # [T] the position of each row
    run: Plain
    hooks: Hooks | None = None

    @property
    def start(self) -> int:
        return int(self.positions[0])

    def site(self, name: str, x: np.ndarray) -> np.ndarray:
        """x, or what the hooks at this site make of it."""
        return x if self.hooks is None else self.hooks.call(name, self.index, self.start, x)

    def wants(self, name: str) -> bool:
        return self.hooks is not None and self.hooks.wants(name, self.index)

    def linear(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        return self.run.linear(x, w, b)  # [T, in] @ [in, out] (+ [out]) -> [T, out]

    def mlp(self, h: np.ndarray, m: ops.MLP) -> np.ndarray:
        """[T, D] -> [T, D]: the hidden activation [T, F] is built whole where a hook asks for it."""
        if self.wants("mlp_act"):
            return m.down(self.site("mlp_act", m.hidden(h, self.linear)), self.linear)
        return self.run.mlp(h, m)


class Transformer:
    config: ModelConfig
    layers: list  # per block, the family's dataclass of weights; its MLP as `.mlp` (ops.MLP)
    tables: tuple[str, ...] = ()  # attributes that are precomputed tables, not weights (RoPE cos/sin)
    # Every family exposes these, whatever it calls them in its checkpoint:
    token_embedding: np.ndarray | Quantized  # [V, D], the rows a token id selects
    # [D, V], logits = final_norm(h) @ unembedding (a view of token_embedding when tied)
    unembedding: np.ndarray | Quantized

    def weights(self):
        """Every weight array and Quantized matrix the model holds (tables such as RoPE's left out)."""

        def visit(obj):
            if isinstance(obj, (np.ndarray, Quantized)):
                yield obj
            elif hasattr(obj, "__dataclass_fields__"):
                for name in obj.__dataclass_fields__:
                    yield from visit(getattr(obj, name))
            elif isinstance(obj, (list, tuple)):
                for item in obj:
                    yield from visit(item)

        return visit([v for k, v in vars(self).items() if k not in self.tables])

    def weight_bytes(self) -> int:
        """Bytes of distinct weight arrays (a tied unembedding counted once; a quantized matrix by
        its blocks): what a decode step reads."""
        seen: dict[tuple[int, int], int] = {}
        for w in self.weights():
            for a in [p.data for p in w.parts] if isinstance(w, Quantized) else [w]:
                seen[(a.ctypes.data, a.nbytes)] = a.nbytes
        return sum(seen.values())

    def quantized(self) -> bool:
        """Whether any matrix is kept quantized (a GGUF run in place)."""
        return any(isinstance(w, Quantized) for w in self.weights())

    # the KV cache's numbers (kvcache.KV_TYPES: --kv-type); None: the default of the path (cache_type)
    kv_type: str | None = None

    def cache_type(self, fast: bool = True) -> str:
        """The numbers of this model's KV caches: kv_type if asked for; else on the fast paths (a Session,
        score, the server) kvcache.default_kv_type's (float16 if quantized), on the textbook's float32."""
        return self.kv_type or (default_kv_type(self.quantized()) if fast else "f32")

    def new_cache(self, capacity: int | None = None, fast: bool = False) -> KVCache:
        """A cache for `capacity` positions (default: the whole context), for the fast paths or the textbook."""
        return KVCache(self.config, capacity or self.config.n_ctx, self.cache_type(fast))

    def forward(
        self, tokens: np.ndarray, cache: Cache, *, all_logits: bool = False, hooks: Hooks | None = None,
        run: Plain = PLAIN,
    ) -> np.ndarray:
        """Run tokens [T] through the model at the cache's next positions (a BatchCache: one new
        token for each of its B sequences). Returns logits [T, V] with all_logits, else [1, V] for
        the last position only (all that sampling needs; the unembedding is the largest product of
        a small model), or [B, V] for a pass of B prompts (slots.Prompts), each one's last.
        `hooks`: functions at named sites (engine/sites.py); an empty Hooks() takes the route a hooked
        pass takes (each block stopping at its sites), calling nothing: the baseline an intervention
        compares with, to the bit (None may take the compiled blocks, whose norms round otherwise).
        `run`: the executor, the textbook by default; a Session, the CLI and the server pass the fast
        one (engine/fast/)."""
        t_len = len(tokens)
        plan = run.plan(self, cache, t_len, hooks)  # how this pass runs; ResourceError if its temporaries do not fit
        positions = cache.positions(t_len)  # [T]; PromptError if they do not fit
        x = plan.trunk(self, tokens, positions, hooks)  # [T, D]: embed and blocks, on the plan's executor
        cache.advance(positions)
        if not all_logits:
            # [1, D]; several prompts: [B, D], each one's last row
            x = x[cache.ends] if isinstance(cache, Prompts) else x[-1:]
        return self.logits(self.final_norm(x), plan.run)  # [T or 1, D] -> [T or 1, V]

    def decode_batch(
        self, tokens: np.ndarray, cache: Cache, run: Plain = PLAIN, hooks: Hooks | None = None
    ) -> np.ndarray:
        """One decode step for B sequences at the same position: tokens [B] -> next-token logits
        [B, V]. The forward pass over a BatchCache (engine/kvcache.py): each row attends over its
        own sequence. Row b equals forward() of sequence b alone (tests/test_batch.py)."""
        return self.forward(tokens, cache, all_logits=True, hooks=hooks, run=run)  # [B, V]

    def trunk(
        self, tokens: np.ndarray, cache: Cache, positions: np.ndarray, hooks: Hooks | None, run: Plain
    ) -> np.ndarray:
        """tokens [T] at `positions` [T] -> the residual stream after the last block [T, D]."""
        x = self.embed(tokens, positions)  # [T, D]
        if hooks is not None:
            x = hooks.call("embed", -1, int(positions[0]), x)
        return self.blocks_from(0, x, cache, positions, hooks, run)  # [T, D]

    def blocks_from(
        self, first: int, x: np.ndarray, cache: Cache, positions: np.ndarray, hooks: Hooks | None = None,
        run: Plain = PLAIN,
    ) -> np.ndarray:
        """The residual stream x [T, D] entering block `first` at `positions`, through that block and
        the ones after it -> [T, D]. An experiment that changes block b starts here, at b: the
        blocks before it would compute what it has already recorded."""
        if hooks is None and (y := run.blocks(self, first, x, cache, positions)) is not None:
            return y  # [T, D]: the same blocks, run another way (the fast executor compiles them)
        for i in range(first, len(self.layers)):
            x = self.block(x, self.layers[i], LayerCall(i, cache, positions, run, hooks))  # [T, D]
        return x

    def block(self, x: np.ndarray, layer, at: LayerCall) -> np.ndarray:
        """One pre-norm transformer block: [T, D] -> [T, D]."""
        x = at.site("resid_pre", x)
        # tokens look at earlier tokens
        x = x + at.site("attn_out", self.attention(self.attn_norm(x, layer), layer, at))
        x = at.site("resid_mid", x)
        x = x + at.site("mlp_out", self.mlp(self.mlp_norm(x, layer), layer, at))  # each token on its own
        return at.site("resid_post", x)

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, at: LayerCall, **mask) -> np.ndarray:
        """Causal self-attention through the cache: q [T, H, Dh], new k, v [T, Hkv, Dh] -> each
        head's context vector z [T, H, Dh] (site z; the weights [H, T, S] are site attn).
        `mask`: window= (a sliding layer sees only its last `window` positions) and softcap=."""
        want = at.wants("attn")
        # [T, H, Dh], [H, T, S]
        z, weights = at.cache.attend(at.index, at.start, q, k, v, at.run.attention, want, **mask)
        if want and weights is not None:
            at.site("attn", weights)  # read only: z is already their weighted sum
        return at.site("z", z)

    def mlp(self, h: np.ndarray, layer, at: LayerCall) -> np.ndarray:
        """The MLP step: [T, D] -> [T, D], what is added to the residual stream (Gemma 3 normalises it first)."""
        return at.mlp(h, layer.mlp)

    def logits(self, h: np.ndarray, run: Plain) -> np.ndarray:
        """Normed hidden states [T, D] -> logits [T, V] (Gemma 2-style models soft-cap them)."""
        return run.linear(h, self.unembedding)  # [T, D] @ [D, V] -> [T, V]

    # Supplied by each family.
    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:  # [T], [T] -> [T, D]
        raise NotImplementedError

    def attn_norm(self, x: np.ndarray, layer) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    def attention(self, h: np.ndarray, layer, at: LayerCall) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    def mlp_norm(self, x: np.ndarray, layer) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    def final_norm(self, x: np.ndarray) -> np.ndarray:  # [T, D] -> [T, D]
        raise NotImplementedError

    # For direct logit attribution (analysis/experiments/heads.py):
    def output_projection(self, layer) -> tuple[np.ndarray, np.ndarray | None]:  # W_O [H*Dh, D], b_O [D] or None
        raise NotImplementedError

    def frozen_final_norm(self, x: np.ndarray):  # x [D] -> (linear map of parts of x, constant [D] or None)
        raise NotImplementedError

    # o [D], the attention output after W_O -> linear map of its parts, or None
    def frozen_attn_out(self, layer, o: np.ndarray):
        return None  # the attention output joins the residual stream as it is (Gemma 3 norms it first)

    def unembed(self, x: np.ndarray, run: Plain = PLAIN) -> np.ndarray:
        """Normed hidden states [T, D] -> logits [T, V]. A logit lens is unembed(final_norm(h))."""
        return self.logits(x, run)  # [T, D] @ [D, V] -> [T, V] (a tied [D, V] is a view of [V, D] rows)
