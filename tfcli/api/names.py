"""Keys of the sites a pass shows: tfcli's `(site, block)`, and TransformerLens's hook names as aliases.

    tfcli key                 TransformerLens name                  shape (no batch axis)
    "embed"                   hook_embed (*)                        [T, D]
    ("resid_pre", b)          blocks.b.hook_resid_pre               [T, D]
    ("attn", b)               blocks.b.attn.hook_pattern            [H, T, T]
    ("z", b)                  blocks.b.attn.hook_z                  [T, H, Dh]
    ("attn_out", b)           blocks.b.hook_attn_out                [T, D]
    ("resid_mid", b)          blocks.b.hook_resid_mid               [T, D]
    ("mlp_act", b)            blocks.b.mlp.hook_post                [T, F]
    ("mlp_out", b)            blocks.b.hook_mlp_out                 [T, D]
    ("resid_post", b)         blocks.b.hook_resid_post              [T, D]
    "ln_final"                ln_final.hook_normalized              [T, D]  (read only: a cache's, not a hook's)

(*) tfcli's embed is the whole input of block 0: for GPT-2 the token AND position embeddings, which
TransformerLens splits into hook_embed and hook_pos_embed; blocks.0.hook_resid_pre is the same array.
TransformerLens's short names in a tuple work too: ("pattern", b), ("post", b) / ("mlp_post", b).
A negative block counts from the end (-1: the last), as a list index does.
"""

from __future__ import annotations

import re

from tfcli.engine.errors import UsageError

SITES = (
    "embed",
    "resid_pre",
    "attn",
    "z",
    "attn_out",
    "resid_mid",
    "mlp_act",
    "mlp_out",
    "resid_post",
)  # engine/sites.py's order
DERIVED = ("ln_final",)  # computed from the pass's last residual stream, for a cache only

Key = tuple[str, "int | None"]  # (site, block); block None for embed and ln_final

# TransformerLens's names of the per-block sites (its hook point's path inside a block).
TL_BLOCK = {
    "hook_resid_pre": "resid_pre",
    "attn.hook_pattern": "attn",
    "attn.hook_z": "z",
    "hook_attn_out": "attn_out",
    "hook_resid_mid": "resid_mid",
    "mlp.hook_post": "mlp_act",
    "hook_mlp_out": "mlp_out",
    "hook_resid_post": "resid_post",
}
TL_OF = {site: tl for tl, site in TL_BLOCK.items()}
TL_GLOBAL = {"hook_embed": "embed", "ln_final.hook_normalized": "ln_final"}
SHORT = {
    "pattern": "attn",
    "post": "mlp_act",
    "mlp_post": "mlp_act",
    "normalized": "ln_final",
}  # TransformerLens's get_act_name short names

_BLOCK_NAME = re.compile(r"^blocks\.(-?\d+)\.(.+)$")
HINT = (
    "keys are (site, block) with site one of " + ", ".join(SITES) + ", or TransformerLens's names such as "
    "blocks.3.hook_resid_post, blocks.5.attn.hook_pattern, blocks.2.mlp.hook_post, hook_embed, ln_final.hook_normalized"
)


def resolve(key, n_blocks: int) -> Key:
    """A key as a user writes it -> the canonical (site, block), block in 0..n_blocks-1 (None for embed
    and ln_final). UsageError (a TfcliError) for an unknown site or a block out of range."""
    if isinstance(key, str):
        if key in SITES or key in DERIVED:
            site, block = key, None
        elif key in TL_GLOBAL:
            site, block = TL_GLOBAL[key], None
        elif m := _BLOCK_NAME.match(key):
            if m.group(2) not in TL_BLOCK:
                raise UsageError(f"unknown site name {key!r}", HINT)
            site, block = TL_BLOCK[m.group(2)], int(m.group(1))
        else:
            raise UsageError(f"unknown site name {key!r}", HINT)
    elif isinstance(key, tuple) and len(key) in (1, 2) and isinstance(key[0], str):
        site = SHORT.get(key[0], key[0])
        block = key[1] if len(key) == 2 else None
        if site not in SITES and site not in DERIVED:
            raise UsageError(f"unknown site {key[0]!r}", HINT)
        if block is not None and (isinstance(block, bool) or not hasattr(block, "__index__")):
            raise UsageError(f"the block of {key!r} must be an integer, not {type(block).__name__}", HINT)
    else:
        raise UsageError(f"a site key is a (site, block) tuple or a name, not {key!r:.60}", HINT)
    if site in ("embed", *DERIVED):
        if block not in (None, -1):  # -1: the engine's block of the embeddings
            raise UsageError(f"{site} is not in a block: give it as {site!r}, without a block")
        return site, None
    if block is None:
        raise UsageError(f"{site} is in every block: say which, e.g. ({site!r}, 0)")
    b = int(block)
    b = b + n_blocks if b < 0 else b
    if not 0 <= b < n_blocks:
        raise UsageError(f"block {int(block)} is out of range: the model has blocks 0 to {n_blocks - 1}")
    return site, b


def alias(key: Key) -> str:
    """The TransformerLens name of a canonical key."""
    site, block = key
    if block is None:
        return {"embed": "hook_embed", "ln_final": "ln_final.hook_normalized"}[site]
    return f"blocks.{block}.{TL_OF[site]}"


def every_key(n_blocks: int) -> list[Key]:
    """Every site of a pass, in the order the pass reaches them."""
    return [("embed", None)] + [(s, b) for b in range(n_blocks) for s in SITES[1:]]
