"""What a forward pass may record of its insides, for the commands that show them.

A caller makes a `Recorder` naming what it wants and passes it to `Transformer.forward(...,
hooks=rec)`: a recorder is a set of hooks (engine/sites.py) that keep what they are shown, at
the sites it asks for and no others. A recorder holds one forward call (a second call replaces
what the first recorded); the arrays are the pass's own, not copies (the pass never writes to an
array after it has passed a site).

    attention   the attention weights of every head, [H, T, S] per layer (S = positions attended)
    residual    the residual stream: the embeddings entering layer 0 [T, D]; after each layer's
                attention step [T, D] (`mid`); after each whole layer [T, D] (`post`)
    mlp         the MLP's hidden activations [T, F]: after GELU, or for SwiGLU silu(gate) * up,
                the vector the down-projection reads ("the answers to the MLP's F questions")
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .sites import Hooks, Site

import numpy as np


@dataclass(eq=False)
class Recorder(Hooks):
    attention: bool = False
    residual: bool = False
    mlp: bool = False
    layers: Iterable[int] | None = None  # the layers to record (None: all); the embeddings always are, with residual

    embedded: np.ndarray | None = field(default=None, init=False)  # [T, D] the input of layer 0
    attn: dict[int, np.ndarray] = field(default_factory=dict, init=False)  # layer -> [H, T, S]
    mid: dict[int, np.ndarray] = field(default_factory=dict, init=False)  # layer -> [T, D], after attention
    post: dict[int, np.ndarray] = field(default_factory=dict, init=False)  # layer -> [T, D], after the layer
    mlp_act: dict[int, np.ndarray] = field(default_factory=dict, init=False)  # layer -> [T, F]

    def __post_init__(self) -> None:
        Hooks.__init__(self)
        self.layers = None if self.layers is None else frozenset(int(i) for i in self.layers)
        blocks = [None] if self.layers is None else sorted(self.layers)
        wanted = {"attn": (self.attention, self.attn), "resid_mid": (self.residual, self.mid),
                  "resid_post": (self.residual, self.post), "mlp_act": (self.mlp, self.mlp_act)}
        for site, (want, into) in wanted.items():
            for b in blocks if want else ():
                self.add(site, self._keep(into), b)
        if self.residual:
            self.add("embed", self._keep_embedded)

    @staticmethod
    def _keep(into: dict[int, np.ndarray]):
        def keep(value: np.ndarray, site: Site) -> None:
            into[site.block] = value
        return keep

    def _keep_embedded(self, value: np.ndarray, site: Site) -> None:
        self.embedded = value

    def hidden_states(self) -> list[np.ndarray]:
        """The residual stream as transformers' output_hidden_states lists it: the embeddings, then
        the output of each layer, [L+1] x [T, D]. Unlike transformers' last entry, ours is before
        the final norm (apply the model's `final_norm` to compare). Needs residual=True, all layers."""
        if self.embedded is None:
            raise ValueError("nothing recorded: pass Recorder(residual=True) to forward")
        return [self.embedded] + [self.post[i] for i in sorted(self.post)]
