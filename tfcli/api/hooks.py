"""A user's hook, as the engine calls it: `fn(value, site) -> None | array` (engine/sites.py), its
result checked before the pass goes on, its exception naming where it was raised.

A hook sees the pass's own array, without a batch axis ([T, D], [H, T, T] ...): copy it before
changing it in place, or return a new array of the same shape (a float dtype; it is kept as
float32). The attention weights (site attn, blocks.B.attn.hook_pattern) are read only: the pass
has already used them when a hook sees them; change z (blocks.B.attn.hook_z) to change a head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from tfcli.engine.errors import TfcliError, UsageError
from tfcli.engine.sites import Hooks, Site

from .names import DERIVED, Key, alias, every_key, resolve


def checked(fn: Callable, key: Key) -> Callable[[np.ndarray, Site], np.ndarray | None]:
    """fn wrapped for the engine: a wrong result is a TfcliError naming the site; an exception fn
    raises is re-raised as it is, with a note naming the site."""
    name = f"{key[0]}{'' if key[1] is None else f' of block {key[1]}'} ({alias(key)})"

    def hook(value: np.ndarray, site: Site):
        try:
            new = fn(value, site)
        except TfcliError:
            raise
        except Exception as e:
            e.add_note(f"raised by the hook at {name}")
            raise
        if new is None:
            return None
        if key[0] == "attn":
            raise UsageError(
                f"the hook at {name} returned a value, but the attention weights are read only",
                "the pass has already used them; change the heads' context vectors z (blocks.B.attn.hook_z) instead",
            )
        if not isinstance(new, np.ndarray):
            raise UsageError(f"the hook at {name} returned a {type(new).__name__}, not a NumPy array or None")
        if new.shape != value.shape:
            raise UsageError(
                f"the hook at {name} returned shape {new.shape}; the value there is {value.shape}",
                "return an array of the same shape, or None to keep it",
            )
        if new.dtype.kind != "f":
            raise UsageError(
                f"the hook at {name} returned dtype {new.dtype}; the pass runs in float32",
                "return a float array (e.g. value.copy() changed), or None",
            )
        return new.astype(np.float32, copy=False)

    return hook


def keys_of(name, n_blocks: int) -> list[Key]:
    """The sites a hook's name stands for: one key, or every site whose TransformerLens name a
    filter function accepts (TransformerLens's `fwd_hooks=[(lambda name: ..., fn)]`)."""
    if callable(name) and not isinstance(name, (str, tuple)):
        keys = [k for k in every_key(n_blocks) if name(alias(k))]
        if not keys:
            raise UsageError(
                "a hook's name filter accepts none of the sites' names", "names look like blocks.3.hook_resid_post"
            )
        return keys
    key = resolve(name, n_blocks)
    if key[0] in DERIVED:
        raise UsageError(
            f"{alias(key)} can be read from a cache but not hooked",
            "hook the residual stream (blocks.B.hook_resid_post) instead",
        )
    return [key]


def build(pairs: Iterable[tuple[object, Callable]], n_blocks: int) -> Hooks:
    """(name, fn) pairs -> the engine's Hooks; every name is resolved first, so that a bad one
    raises before anything is hooked. A pair may be a 2-list too, as TransformerLens unpacks them."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise UsageError(f"fwd_hooks is a list of (name, function) pairs, not {type(pairs).__name__}")
    resolved = []
    for pair in list(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise UsageError(f"a hook is a (name, function) pair, not {pair!r:.60}")
        name, fn = pair
        if not callable(fn):
            raise UsageError(f"the hook for {name!r:.60} is not a function")
        resolved.append((keys_of(name, n_blocks), fn))
    hooks = Hooks()
    for keys, fn in resolved:
        for key in keys:
            hooks.add(key[0], checked(fn, key), -1 if key[1] is None else key[1])
    return hooks
