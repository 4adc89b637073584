"""`train_features`: a sparse autoencoder trained from Python, as `tfcli features train` trains it
(the same source of vectors, settings, steps and folder: the same numbers), and its result."""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from pathlib import Path

from tfcli.engine.errors import UsageError

from .result import Result

MAX_FEATURES = 1 << 20
SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")


@dataclass(repr=False)
class Training(Result):
    """What `train_features` did: the SAE's `folder`, its `steps` and `seconds`, and `quality` on
    the held-out vectors (SAELens's measures: mse, explained variance, L0, dead features and, on a
    text, the loss recovered), as `tfcli features train --json` reports them.

    >>> import tfcli
    >>> model = tfcli.load("shakespeare")
    >>> r = tfcli.train_features(model, text_file, tmp / "sae", block=2, features=64, steps=5, batch_size=64,
    ...                          buffer=256)
    >>> r.steps, sorted(r.quality)[:2]
    (5, ['dead_features', 'explained_variance'])
    >>> tfcli.features(model, r.folder).block
    2
    """

    folder: Path
    steps: int
    seconds: float
    quality: dict

    def text(self) -> str:
        q = self.quality
        shown = (
            ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in q.items())
            or "no held-out vectors"
        )
        return f"an SAE in {self.folder}: {self.steps:,} steps in {self.seconds:,.1f} s\nquality: {shown}"

    def to_dict(self) -> dict:
        return {"folder": str(self.folder), "steps": self.steps, "seconds": round(self.seconds, 2), **self.quality}

    def _html_body(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{v:.4g}</td></tr>"
            if isinstance(v, float)
            else f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
            for k, v in self.quality.items()
        )
        return (f"<div>an SAE in <code>{html.escape(str(self.folder))}</code>: {self.steps:,} "
                f"steps<table>{rows}</table></div>")


def train_features(
    model,
    text_file: str | Path | None,
    folder: str | Path,
    *,
    block: int | None = None,
    site: str = "resid_post",
    activations: str | Path | None = None,
    features: int | None = None,
    kind: str = "relu",
    k: int = 32,
    l1: float = 5.0,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    warmup: int = 20,
    lr_schedule: str = "constant",
    clip: float = 1.0,
    batch_size: int = 1024,
    steps: int = 1000,
    buffer: int = 65_536,
    seed: int = 0,
    val_fraction: float = 0.1,
    force: bool = False,
) -> Training:
    """Train a sparse autoencoder on the vectors `model` writes at (`block`, `site`) over the UTF-8
    text in `text_file`, or on `activations` (an [N, D] .npy file; then `model` may be None), and
    write it to `folder` (sae.safetensors and cfg.json, as SAELens names them). The settings are
    `tfcli features train`'s options, with the same defaults but `block`, which a text needs said;
    the same settings give the same weights. Vectors trained on without a `block` are recorded as
    from no block, and such an SAE is refused on a model (it would not know where to read).

    >>> import tfcli
    >>> r = tfcli.train_features(tfcli.load("shakespeare"), text_file, tmp / "sae2", block=1,
    ...                          features=32, steps=3, batch_size=64, buffer=256)
    >>> (r.folder / "cfg.json").exists(), r.steps
    (True, 3)
    """
    from tfcli.analysis.experiments.common import check_block
    from tfcli.analysis.feature_runs import array_source, text_source
    from tfcli.analysis.features import WINDOW
    from tfcli.engine.fast import FAST
    from tfcli.engine.train.sae import Settings

    from .model import Model

    folder = Path(folder)
    if (text_file is None) == (activations is None):
        raise UsageError("give a text_file or activations=FILE.npy, one of them")
    if site not in SITES:
        raise UsageError(f"site {site!r} is not one an SAE reads", f"sites: {', '.join(SITES)}")
    if not 0 <= val_fraction < 1:
        raise UsageError(
            f"val_fraction {val_fraction} is out of range", "give a fraction from 0 up to (not including) 1"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 63:
        raise UsageError(f"seed {seed!r} is not an integer from 0 to 2^63-1")
    _check_folder(folder, force)
    lm = None
    if activations is not None:
        source = array_source(Path(activations), val_fraction, 1 << 40)
    else:
        if not isinstance(model, Model):
            raise UsageError(f"training on a text needs a model from tfcli.load(), not {type(model).__name__}")
        if block is None:
            raise UsageError(
                "say which block's vectors to learn: block=B", f"blocks run from 0 to {model.n_blocks - 1}"
            )
        lm = model._lm
        block = check_block(lm.model, block, "block")
        source = text_source(lm, Path(text_file), block, site, val_fraction, min(WINDOW, lm.config.n_ctx), FAST)
    n = 8 * source.d if features is None else features
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_FEATURES:
        raise UsageError(
            f"features must be between 1 and {MAX_FEATURES:,}, not {n!r}",
            f"e.g. {8 * source.d} (8 x the width {source.d})",
        )
    s = Settings(
        kind=kind,
        n=n,
        k=k,
        l1=l1,
        lr=lr,
        betas=tuple(betas),
        eps=eps,
        weight_decay=weight_decay,
        warmup=warmup,
        lr_schedule=lr_schedule,
        clip=clip,
        batch_size=batch_size,
        steps=steps,
        seed=seed,
    )
    _check_settings(s, buffer, source.d)
    trainer, seconds = _loop(s, source, buffer)
    quality = _save(
        folder, trainer, lm, block, site, source, seconds, str(text_file if activations is None else activations)
    )
    return Training(folder, trainer.step, seconds, quality)


def _check_folder(folder: Path, force: bool) -> None:
    from tfcli.analysis.feature_runs import check_folder

    check_folder(folder, force, "force=True")


def _check_settings(s, buffer: int, d: int) -> None:
    """The ranges `tfcli features train` allows, and the memory the run needs."""
    from tfcli.analysis.feature_runs import check_training

    check_training(s, buffer, d, lambda field: field, "see help(tfcli.train_features)")


def _loop(s, source, buffer_rows: int):
    """The steps, as the command takes them (without its progress bar)."""
    from tfcli.analysis.feature_runs import first_batch

    t0 = time.perf_counter()
    buf, trainer = first_batch(s, source, buffer_rows)
    for _ in range(s.steps):
        trainer.train_step(buf.next_batch())
    return trainer, time.perf_counter() - t0


def _save(folder: Path, trainer, lm, block: int | None, site: str, source, seconds: float, data: str) -> dict:
    """The folder, as the command writes it; -> the quality measures."""
    from tfcli.analysis.feature_runs import save_training
    from tfcli.engine.fast import FAST

    return save_training(folder, trainer, lm, block, site, source, seconds, data, FAST)
