"""Sites: the named places of a forward pass where a hook may read a value or replace it.

Recording and intervening are the same thing. A recorder (engine/inspect.py) is a hook that keeps
what it is shown; an experiment (patching, ablation, steering: tfcli/analysis/experiments/) is a
hook that returns a changed copy. The pass calls no hook where none is asked for, so generation
pays one `is None` test per site (benchmarks/README.md, "Sites").

    site        shape       where, in block b (blocks count 0..L-1, as in transformers)
    embed       [T, D]      the token (and position) embeddings: residual-stream index 0
    resid_pre   [T, D]      the residual stream entering block b
    attn        [H, T, S]   the attention weights of every head (read only: the pass has used them)
    z           [T, H, Dh]  each head's context vector, before the output projection W_O
    attn_out    [T, D]      what the attention step adds to the residual stream
    resid_mid   [T, D]      the residual stream between the attention and the MLP
    mlp_act     [T, F]      the MLP's hidden activation (after GELU; silu(gate) * up for SwiGLU)
    mlp_out     [T, D]      what the MLP adds to the residual stream
    resid_post  [T, D]      the residual stream leaving block b: residual-stream index b + 1

A hook is `fn(value, site) -> None | array`: None keeps the value, an array of the same shape
replaces it for the rest of the pass. Arrays shown to a hook belong to the pass: copy one
before changing it in place. `site` says where it is (`site.name`, `site.block`, and the
positions of the pass, `site.start`).

A hook added as a `reader` only reads, and takes a pass's rows in parts: the fast executor may
then cut a long prompt into parts on threads (engine/fast/), each part showing it its own rows
(`site.start` says where they begin; attn's keys run up to the part's last position), from the
part's thread. A pass with any other hook runs whole, so that a hook that changes a value sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SITES = ("embed", "resid_pre", "attn", "z", "attn_out", "resid_mid", "mlp_act", "mlp_out", "resid_post")


@dataclass(frozen=True)
class Site:
    name: str  # one of SITES
    block: int  # the block, or -1 for the embeddings
    start: int  # position of the first row of this pass (the rows are positions start..start+T-1)


Hook = Callable[[np.ndarray, Site], "np.ndarray | None"]


class Hooks:
    """Hooks by site and block; `add` them, then pass the object to `Transformer.forward(hooks=)`."""

    def __init__(self) -> None:
        self._by_site: dict[tuple[str, int | None], list[Hook]] = {}  # (site, block or None: every block)
        self._changers = 0  # hooks not added as readers: they may change a value, so they see a pass whole

    def add(self, name: str, fn: Hook, block: int | None = None, *, reader: bool = False) -> Hooks:
        """Call fn at site `name` of `block` (None: of every block). `reader`: fn only reads, and
        takes a pass's rows in parts, from the parts' threads (in_parts)."""
        if name not in SITES:
            raise ValueError(f"unknown site {name!r}; sites are {', '.join(SITES)}")
        self._by_site.setdefault((name, -1 if name == "embed" else block), []).append(fn)
        self._changers += not reader
        return self

    def merge(self, other: Hooks | None) -> Hooks:
        """Add every hook of `other` after this one's (an experiment's, then a recorder's)."""
        for key, fns in (other._by_site.items() if other else ()):
            self._by_site.setdefault(key, []).extend(fns)
        self._changers += other._changers if other else 0
        return self

    @property
    def in_parts(self) -> bool:
        """Whether a pass may show these hooks its rows in parts, on several threads: all of them
        were added as readers."""
        return self._changers == 0

    def wants(self, name: str, block: int) -> bool:
        return (name, block) in self._by_site or (name, None) in self._by_site

    def call(self, name: str, block: int, start: int, value: np.ndarray) -> np.ndarray:
        """Show `value` to the hooks at this site, in the order they were added (those for every
        block first); each hook sees what the one before it left."""
        for fn in (*self._by_site.get((name, None), ()), *self._by_site.get((name, block), ())):
            new = fn(value, Site(name, block, start))
            if new is not None:
                if new.shape != value.shape:
                    raise ValueError(f"a hook at {name} of block {block} returned {new.shape} for {value.shape}")
                value = np.asarray(new, dtype=np.float32)
        return value

    def __bool__(self) -> bool:
        return bool(self._by_site)
