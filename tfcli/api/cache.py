"""ActivationCache: what one `run_with_cache` kept, by tfcli key or TransformerLens name."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

import numpy as np

from tfcli.engine.errors import UsageError

from .names import Key, alias, resolve


class ActivationCache(Mapping):
    """The arrays one pass showed at its sites, keyed by `(site, block)`; TransformerLens's names
    are aliases of the same arrays. No batch axis: `[T, D]`, `[H, T, T]`, `[T, H, Dh]`, `[T, F]`.

    >>> import tfcli
    >>> model = tfcli.load("shakespeare")
    >>> logits, cache = model.run_with_cache("To be, or not to be")
    >>> cache["resid_post", 3].shape == (len(model.to_tokens("To be, or not to be")), model.config.d_model)
    True
    >>> cache["blocks.3.hook_resid_post"] is cache["resid_post", 3]
    True
    >>> cache.accumulated_resid().shape[0] == model.n_blocks + 1
    True

    Keys (`names.py` lists them all): "embed", ("resid_pre", b), ("attn", b) [H, T, T],
    ("z", b), ("attn_out", b), ("resid_mid", b), ("mlp_act", b), ("mlp_out", b),
    ("resid_post", b), and "ln_final" (the final norm's output, computed when first read).
    The arrays are the pass's own (no copies): change a copy, not them.
    """

    def __init__(
        self, values: dict[Key, np.ndarray], n_blocks: int, final_norm, last: np.ndarray | None, tokens: np.ndarray
    ):
        self._values = values
        self._n_blocks = n_blocks
        self._final_norm = final_norm  # [.., D] -> [.., D], the model's
        self._last = (
            last  # [T, D] the residual stream after the last block (for ln_final), kept even when not asked for
        )
        self.tokens = tokens  # [T] the ids the pass ran

    def __getitem__(self, key) -> np.ndarray:
        k = resolve(key, self._n_blocks)
        if k == ("ln_final", None) and k not in self._values:
            if self._last is None:
                raise UsageError("ln_final is not in this cache")
            self._values[k] = self._final_norm(whole(self._last))  # [T, D]
        try:
            value = self._values[k]
        except KeyError:
            raise UsageError(
                f"{alias(k)} ({k[0]}{'' if k[1] is None else f', {k[1]}'}) was not kept by this run",
                "run_with_cache(names=None) keeps every site",
            ) from None
        if isinstance(value, Rows):  # the parts of a pass cut into parts, put together now
            value = self._values[k] = value.array()
        return value

    def __contains__(self, key) -> bool:
        try:
            k = resolve(key, self._n_blocks)
        except UsageError:
            return False
        return k in self._values or (k == ("ln_final", None) and self._last is not None)

    def __iter__(self) -> Iterator[Key]:
        yield from self._values
        if ("ln_final", None) not in self._values and self._last is not None:
            yield ("ln_final", None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def names(self) -> list[str]:
        """The keys as TransformerLens names them (`blocks.3.hook_resid_post` ...)."""
        return [alias(k) for k in self]

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays kept (each array once)."""
        same = lambda a: id(a._whole) if isinstance(a, Rows) and a._whole is not None else id(a)  # noqa: E731
        return sum({same(a): a.nbytes for a in self._values.values()}.values())

    def accumulated_resid(self, layer: int | None = None) -> np.ndarray:
        """The residual stream at every residual index, stacked: [L+1, T, D] (index 0 the
        embeddings, i the stream after block i-1, L the last block's output before the final
        norm), as transformers' output_hidden_states and tfcli's lens count them. `layer`: only
        indices 0..layer-1 ([layer, T, D]; TransformerLens's meaning: the stream entering that block).

        >>> import tfcli
        >>> _, cache = tfcli.load("shakespeare").run_with_cache("To be")
        >>> stack = cache.accumulated_resid()
        >>> bool((stack[0] == cache["embed"]).all() and (stack[-1] == cache["resid_post", -1]).all())
        True
        """
        n = self._n_blocks + 1 if layer is None or layer == -1 else layer + self._n_blocks + 1 if layer < 0 else layer
        if not 0 < n <= self._n_blocks + 1:
            raise UsageError(f"layer {layer} is out of range: residual indices run from 0 to {self._n_blocks}")
        parts = [self["embed"] if ("embed", None) in self._values else self["resid_pre", 0]]
        parts += [self["resid_post", b] for b in range(n - 1)]
        return np.stack(parts)  # [n, T, D]

    def apply_ln_to_stack(self, stack: np.ndarray) -> np.ndarray:
        """The model's final norm applied to each residual stream of a stack [..., T, D] -> same
        shape: what the logit lens reads (its logits are `stack_ln @ W_U`). Each stream gets its own
        norm scale, as the lens recomputes it; TransformerLens's version freezes the last one's.

        >>> import tfcli
        >>> _, cache = tfcli.load("shakespeare").run_with_cache("To be")
        >>> normed = cache.apply_ln_to_stack(cache.accumulated_resid())
        >>> bool(np.allclose(normed[-1], cache["ln_final"]))
        True
        """
        stack = np.asarray(stack, dtype=np.float32)
        flat = stack.reshape(-1, stack.shape[-1])  # [N, D]
        return self._final_norm(flat).reshape(stack.shape)

    def __repr__(self) -> str:
        blocks = sorted({b for _, b in self._values if b is not None})
        sites = sorted({s for s, _ in self._values}, key=lambda s: (s != "embed", s))
        return (
            f"ActivationCache({len(self.tokens)} tokens, {len(self)} arrays: {', '.join(sites)}; "
            f"blocks {_ranges(blocks)}; {self.nbytes / 1e6:,.1f} MB)"
        )

    __str__ = __repr__


class Rows:
    """A site's rows as the parts of a pass showed them, each part's array as it was (no copy), put
    together into one array the first time the site is read (and kept: read again, the same array).
    attn [H, T, S]: each part's keys run up to its last position, the rest of its rows is 0."""

    def __init__(self, t_len: int, start: int, attn: bool):
        self.t_len, self.start, self.attn = t_len, start, attn
        self.parts: list[tuple[int, np.ndarray]] = []  # (first row, the part's array)
        self._whole: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self._whole.nbytes if self._whole is not None else sum(a.nbytes for _, a in self.parts)

    def array(self) -> np.ndarray:
        if self._whole is None:
            first, a = self.parts[0]
            t, s = self.t_len, self.start + self.t_len
            if self.attn:
                whole = np.zeros((a.shape[0], t, s), np.float32)  # [H, T, S]
                for first, a in self.parts:
                    whole[:, first : first + a.shape[1], : a.shape[2]] = a  # [H, rows, S of this part]
            else:
                whole = np.empty((t, *a.shape[1:]), np.float32)  # [T, ...]
                for first, a in self.parts:
                    whole[first : first + a.shape[0]] = a
            self._whole, self.parts = whole, []
        return self._whole


def whole(value) -> np.ndarray:
    """A kept value as an array: a Rows put together, an array as it is."""
    return value.array() if isinstance(value, Rows) else value


class Gathered:
    """What a pass of `t_len` rows shows at its sites, by key: a reader hook (engine/sites.py) for
    run_with_cache. A pass run whole shows each site's whole array: kept as it is (the pass's own,
    no copy). A long prompt the fast executor cuts into parts on threads shows each part's rows
    from its own thread: kept as Rows, the parts' own arrays, put together when first read (the
    copy, 4 bytes a value, paid for the sites read, not in the pass)."""

    def __init__(self, t_len: int, start: int = 0):
        self.t_len, self.start = t_len, start  # the pass's rows and its first position
        self.values: dict[Key, np.ndarray | Rows] = {}
        self._lock = threading.Lock()

    def keep(self, value: np.ndarray, site) -> None:
        key = (site.name, None if site.name == "embed" else site.block)
        attn = site.name == "attn"
        first, rows = site.start - self.start, value.shape[1 if attn else 0]  # this part's rows: first..first+rows-1
        if first == 0 and rows == self.t_len:
            self.values[key] = value  # the whole pass
            return
        with self._lock:  # the parts arrive from their own threads
            got = self.values.get(key)
            if got is None:
                got = self.values[key] = Rows(self.t_len, self.start, attn)
            got.parts.append((first, value))


def _ranges(blocks: list[int]) -> str:
    if not blocks:
        return "none"
    out, a = [], blocks[0]
    for prev, b in zip(blocks, blocks[1:] + [None]):
        if b != prev + 1 if b is not None else True:
            out.append(f"{a}" if a == prev else f"{a}-{prev}")
            a = b
    return ", ".join(out)
