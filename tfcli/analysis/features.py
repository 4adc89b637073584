"""Features: a sparse autoencoder (engine/train/sae.py) read against the model it was trained on.

    activations   the vectors at one site of one block over a text, window by window
    Buffer        a bounded, shuffled store of them that training draws batches from
    Features      an SAE folder checked against a model (width, block, the model's identity)
    show, top     which features fire on which tokens; the contexts that fire each most, and the
                  tokens its decoder direction pushes up and down
    quality       MSE, explained variance, L0, dead features, and the loss recovered
    steer_hooks, ablate_hooks   use one feature: add its direction, or take it out of the pass
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfcli.engine.errors import UsageError
from tfcli.engine.executor import PLAIN, Plain
from tfcli.engine.sites import Hooks
from tfcli.engine.train.sae import SAE
from tfcli.engine.train.saefolder import HOOKS, SAEError, read_sae

SITES = tuple(HOOKS)  # the sites an SAE can read: each is [T, D]
WINDOW = 128  # tokens per pass over the text (SAELens's usual context size)


class _Enough(Exception):
    """Raised by the recording hook: the pass need not run the blocks after the one recorded."""


def site_rows(model, ids: np.ndarray, block: int, site: str, run: Plain = PLAIN) -> np.ndarray:
    """The vectors at `site` of `block` for one window of ids [T] -> [T, D]. The pass (`run`: its
    executor) stops there."""
    kept: list[np.ndarray] = []

    def keep(value: np.ndarray, s) -> None:
        kept.append(value.copy())
        raise _Enough

    try:
        model.forward(np.asarray(ids), model.new_cache(len(ids)), hooks=Hooks().add(site, keep, block), run=run)
    except _Enough:
        pass
    return kept[0]  # [T, D]


def windows(ids: np.ndarray, window: int) -> Iterator[np.ndarray]:
    """ids [N] in consecutive windows of `window` tokens (the last one shorter)."""
    for a in range(0, len(ids) - 1, window):
        yield ids[a : a + window]


def activations(model, ids: np.ndarray, block: int, site: str, window: int, run: Plain = PLAIN) -> Iterator[np.ndarray]:
    """The vectors of every window but its first position [T-1, D]: position 0 reads nothing before
    it, and in many models it is an attention sink with a norm far above the rest."""
    for w in windows(ids, window):
        if len(w) > 1:
            yield site_rows(model, w, block, site, run)[1:]


class Buffer:
    """At most `rows` vectors at a time, shuffled, from a source that can be started again: memory
    is the buffer's, whatever the length of the text. A batch never mixes two fillings; the source
    restarts (another pass over the text) when it runs out. `read` counts the vectors read."""

    def __init__(self, source: Callable[[], Iterator[np.ndarray]], rows: int, batch: int, seed: int):
        self.source, self.rows, self.batch = source, rows, batch
        self.rng = np.random.default_rng([seed, 7])
        self.read = 0
        self.passes = 0
        self.pass_rows: int | None = None  # vectors in one whole pass, once a pass has fitted in one filling
        self._it = iter(())
        self._store: np.ndarray | None = None
        self._order = np.arange(0)
        self._next = 0

    def fill(self) -> np.ndarray:
        """Read the next `rows` vectors into the store (fewer when a whole pass holds fewer). [R, D]"""
        parts, n, restarted, since = [], 0, False, 0
        while n < self.rows:
            block = next(self._it, None)
            if block is None:
                if restarted:  # a whole pass fits in the store: it holds that pass and the end of the one before
                    self.pass_rows = since
                    break
                self._it, self.passes, restarted = iter(self.source()), self.passes + 1, True
                continue
            parts.append(block[: self.rows - n])  # the rest of a window that overflows is skipped
            n += len(parts[-1])
            since += len(parts[-1]) if restarted else 0
        self.read += n
        if not parts:
            raise UsageError("the text gives no vectors to train on", "give a longer text")
        self._store = np.concatenate(parts)  # [R, D]
        self._order, self._next = self.rng.permutation(len(self._store)), 0
        return self._store

    def check(self) -> None:
        if self._store is not None and len(self._store) < self.batch:
            n = self.pass_rows if self.pass_rows is not None else len(self._store)
            raise UsageError(f"the text gives {n:,} vectors, fewer than one batch of {self.batch:,}",
                             "give a longer text, or a smaller --batch-size")

    def next_batch(self) -> np.ndarray:
        """The next batch [B, D], drawn without replacement from the store (refilled when used up)."""
        if self._store is None or self._next + self.batch > len(self._order):
            self.fill()
            self.check()
        rows = self._order[self._next : self._next + self.batch]
        self._next += self.batch
        return self._store[rows]  # [B, D]


def training_bytes(d: int, n: int, batch: int, buffer_rows: int) -> int:
    """What training holds: the weights with their gradients and AdamW's two moments (4 copies of
    2 D N + N + D), about six [B, N] arrays of one step, and the buffer [R, D]; float32."""
    return 4 * (4 * (2 * d * n + n + d) + 6 * batch * n + 2 * buffer_rows * d)


# ---------------------------------------------------------------------------- an SAE on a model


@dataclass
class Features:
    """An SAE read from its folder, checked against the model it is used with."""

    path: Path
    cfg: dict
    sae: SAE
    block: int
    site: str

    @property
    def n(self) -> int:
        return self.sae.n

    def feature(self, idx: int, what: str = "--feature") -> int:
        if not 0 <= idx < self.n:
            raise UsageError(f"{what}: feature {idx} is out of range ({self.path.name} has features 0 to {self.n - 1})")
        return idx

    def encode(self, x: np.ndarray) -> np.ndarray:
        return self.sae.encode(x)  # [T, D] -> [T, N]


def load_features(path: Path, model, identity: str | None, any_model: bool = False) -> Features:
    """The SAE in folder `path`, refused in one line when it was made on another model (its width,
    its block, or the identity it records differs from `identity`, unless any_model)."""
    path = Path(path)
    cfg, params = read_sae(path)
    t = cfg.get("tfcli") if isinstance(cfg.get("tfcli"), dict) else {}
    kind = str(cfg.get("activation_fn_str", "relu"))
    k = int((cfg.get("activation_fn_kwargs") or {}).get("k", 0))
    d = model.config.d_model
    if int(cfg["d_in"]) != d:
        raise SAEError(f"{path} reads vectors of width {cfg['d_in']}, this model's are {d}",
                       "use an SAE trained on this model")
    block, site = t.get("block", cfg.get("hook_layer")), t.get("site", "resid_post")
    if block is None:
        raise SAEError(f"{path} was trained on vectors of no recorded block (--activations without --block)",
                       "train it again with --block B, the block the vectors came from")
    if (isinstance(block, bool) or not isinstance(block, int) or not 0 <= block < model.config.n_layer
            or not isinstance(site, str) or site not in SITES):
        raise SAEError(f"{path} reads block {block!r}, site {site!r}; this model has blocks 0 to "
                       f"{model.config.n_layer - 1}", "use an SAE trained on this model")
    made_on = t.get("model_hash")
    if not any_model and identity is not None and made_on != identity:
        whose = f"{cfg.get('model_name')!s} ({made_on})" if made_on else "a model it does not record"
        raise SAEError(f"{path} was trained on {whose}, not on this model ({identity})",
                       "use it with that model, or pass --any-model to use it anyway")
    return Features(path, cfg, SAE(params, kind, k), block, site)


def parse_feature(spec: str) -> tuple[Path, int]:
    """--feature SAE:IDX -> (the folder, the index)."""
    import re

    from tfcli.engine.errors import shown

    folder, sep, idx = spec.rpartition(":")
    if not sep or not folder or not re.fullmatch(r"\s*[0-9]+\s*", idx):
        raise UsageError(f"--feature {shown(spec, 80)} is not SAE:IDX",
                         "e.g. --feature my-sae:42 (the SAE's folder, a colon, a feature's number)")
    if len(idx.strip()) > 12:  # more features than any SAE holds (and past Python's 4,300 digits, no int at all)
        raise UsageError(f"--feature {shown(spec, 80)}: feature {shown(idx.strip(), 24)} is out of range",
                         "give a feature's number, from 0")
    return Path(folder), int(idx)


def steer_hooks(f: Features, idx: int, scale: float, hooks: Hooks | None = None) -> Hooks:
    """Add scale x feature idx's decoder row at its site, every position: the feature made to fire
    with activation `scale` (the units `features show` prints)."""
    if not np.isfinite(scale):
        raise UsageError(f"--scale must be a finite number, not {scale}")
    push = (np.float32(scale) * f.sae.params["W_dec"][f.feature(idx)]).astype(np.float32)  # [D]
    return (hooks if hooks is not None else Hooks()).add(f.site, lambda value, site: value + push, f.block)


def ablate_hooks(f: Features, idx: int, hooks: Hooks | None = None) -> Hooks:
    """Take feature idx out: x -> x - f_idx(x) W_dec[idx]. That is the SAE's reconstruction without
    the feature plus the SAE's error (x - x_hat), so nothing but the one feature changes."""
    i = f.feature(idx)
    w = f.sae.params["W_dec"][i]  # [D]

    def hook(value: np.ndarray, site) -> np.ndarray:
        act = f.encode(value)[:, i]  # [T]
        return value - act[:, None] * w  # [T, D]

    return (hooks if hooks is not None else Hooks()).add(f.site, hook, f.block)


# ---------------------------------------------------------------------------- looking at features


def show(model, f: Features, ids: list[int], top: int, run: Plain = PLAIN) -> list[list[tuple[int, float]]]:
    """For each token, its `top` strongest features [(index, activation), ...], strongest first."""
    acts = f.encode(site_rows(model, np.asarray(ids), f.block, f.site, run))  # [T, N]
    out = []
    for row in acts:
        on = np.flatnonzero(row > 0)
        best = on[np.argsort(-row[on], kind="stable")][:top]
        out.append([(int(i), float(row[i])) for i in best])
    return out


@dataclass
class Top:
    """What `features top` found over a text."""

    tokens: int  # vectors read
    freq: np.ndarray  # [N] share of tokens on which each feature fired
    mean: np.ndarray  # [N] mean activation over all tokens
    best: np.ndarray  # [N, C] the C largest activations of each feature, largest first
    where: np.ndarray  # [N, C] where in the text they were (token index; -1: none)
    centre: np.ndarray  # [D] the mean vector at the SAE's site over the text


def top_contexts(model, f: Features, ids: np.ndarray, contexts: int, window: int, run: Plain = PLAIN) -> Top:
    """Stream the text; keep each feature's `contexts` strongest tokens. Memory: [N, C]."""
    from tfcli.engine.memory import check_allocation

    n, c = f.n, contexts
    # best and where, and their concatenation with a window's activations while merging
    check_allocation(2 * n * (c + window) * (4 + 8), f"keeping {c:,} contexts for each of {n:,} features",
                     "ask for fewer --contexts")
    best = np.full((n, c), -np.inf, np.float32)
    where = np.full((n, c), -1, np.int64)
    total, fired, seen, xsum = np.zeros(n), np.zeros(n), 0, 0.0
    for a in range(0, len(ids) - 1, window):
        w = ids[a : a + window]
        if len(w) < 2:
            continue
        x = site_rows(model, w, f.block, f.site, run)[1:]  # [T-1, D]
        acts = f.encode(x)  # [T-1, N]
        xsum = xsum + x.sum(axis=0, dtype=np.float64)
        total += acts.sum(axis=0)
        fired += (acts > 0).sum(axis=0)
        seen += len(acts)
        both = np.concatenate([best, acts.T], axis=1)  # [N, C + T-1]
        pos = np.concatenate([where, np.broadcast_to(a + 1 + np.arange(len(acts)), (n, len(acts)))], axis=1)
        keep = np.argsort(-both, axis=1, kind="stable")[:, :c]  # [N, C]
        best, where = np.take_along_axis(both, keep, axis=1), np.take_along_axis(pos, keep, axis=1)
    where = np.where(best > 0, where, -1)
    centre = ((np.asarray(xsum) / max(seen, 1)).astype(np.float32) if seen
              else np.zeros(model.config.d_model, np.float32))
    return Top(seen, fired / max(seen, 1), total / max(seen, 1), np.maximum(best, 0), where, centre)


def logit_effects(model, f: Features, idx: int, mean: np.ndarray, act: float, top: int,
                  run: Plain = PLAIN) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """The tokens feature idx's direction pushes up and down most, read directly through the final
    norm and the unembedding (the later blocks ignored): logits(m + a d) - logits(m), m the mean
    vector of the text at the SAE's site, a the feature's largest activation `act`."""
    d = f.sae.params["W_dec"][idx]  # [D]
    a = act if act > 0 else 1.0
    both = np.stack([mean, mean + np.float32(a) * d]).astype(np.float32)  # [2, D]
    logits = model.unembed(model.final_norm(both), run)  # [2, V]
    change = logits[1] - logits[0]  # [V]
    up, down = np.argsort(-change)[:top], np.argsort(change)[:top]
    return [(int(i), float(change[i])) for i in up], [(int(i), float(change[i])) for i in down]


# ---------------------------------------------------------------------------- quality


def quality(model, f: Features, ids: np.ndarray, window: int, run: Plain = PLAIN) -> dict:
    """SAELens's measures on held-out text: mse (mean over elements), explained variance, L0
    (features on per token), dead (share of features that never fired), and the loss recovered,
    (L_zero - L_sae) / (L_zero - L_clean): the model's next-token loss with the site replaced by the
    SAE's reconstruction, against the clean loss and the loss with the site zeroed."""
    from tfcli.engine.score import score

    sq = var = tokens = l0 = 0.0
    fired = np.zeros(f.n, bool)
    total, total_sq = np.zeros(model.config.d_model), 0.0
    for x in activations(model, ids, f.block, f.site, window, run):
        acts = f.encode(x)  # [T, N]
        err = f.sae.decode(acts) - x  # [T, D]
        sq += float(np.vdot(err, err))
        total += x.sum(axis=0, dtype=np.float64)
        total_sq += float(np.vdot(x, x))
        tokens += len(x)
        l0 += float((acts > 0).sum())
        fired |= (acts > 0).any(axis=0)
    if not tokens:
        raise UsageError("the held-out text gives no vectors to measure", "give a longer text")
    var = total_sq - float(total @ total) / tokens  # sum of |x - mean|^2
    d = model.config.d_model

    def replaced(value: np.ndarray, site) -> np.ndarray:
        return f.sae.decode(f.encode(value))

    def zeroed(value: np.ndarray, site) -> np.ndarray:
        return np.zeros_like(value)

    ids_list = [int(i) for i in ids]
    w = min(window, model.config.n_ctx)
    clean = score(model, ids_list, w, w, hooks=Hooks(), run=run).nats_per_token  # the hooked passes' route
    with_sae = score(model, ids_list, w, w, hooks=Hooks().add(f.site, replaced, f.block), run=run).nats_per_token
    zero = score(model, ids_list, w, w, hooks=Hooks().add(f.site, zeroed, f.block), run=run).nats_per_token
    return {
        "tokens": int(tokens),
        "mse": sq / tokens / d,
        "explained_variance": 1 - sq / var if var > 0 else float("nan"),
        "l0": l0 / tokens,
        "dead_features": float(1 - fired.mean()),
        "loss_clean": clean,
        "loss_sae": with_sae,
        "loss_zero": zero,
        "loss_recovered": (zero - with_sae) / (zero - clean) if zero != clean else float("nan"),
    }


def ablate_feature(model, f: Features, idx: int, ids: list[int], answer: int | None, top: int = 5,
                   run: Plain = PLAIN) -> dict:
    """The next-token distribution after `ids` with and without feature idx (the rest of the
    vector, the SAE's error included, kept): the answer's log-probability both ways, and the top tokens."""
    from tfcli.engine.score import log_softmax

    arr = np.asarray(ids)
    # the clean pass through the sites too (an empty Hooks()): the ablated one's route, so only the feature differs
    clean = log_softmax(model.forward(arr, model.new_cache(len(arr)), hooks=Hooks(), run=run)[-1])  # [V]
    gone = log_softmax(model.forward(arr, model.new_cache(len(arr)), hooks=ablate_hooks(f, idx), run=run)[-1])  # [V]
    answer = int(np.argmax(clean)) if answer is None else answer
    act = float(f.encode(site_rows(model, arr, f.block, f.site, run))[-1, idx])
    return {"answer": answer, "activation_last": act,
            "logprob": float(clean[answer]), "logprob_ablated": float(gone[answer]),
            "top": [int(i) for i in np.argsort(-clean)[:top]],
            "top_ablated": [int(i) for i in np.argsort(-gone)[:top]]}  # fmt: skip
