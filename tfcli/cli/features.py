"""tfcli features: sparse autoencoders trained in NumPy on a model's residual stream, and what
their features are (train, show, top, quality)."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from . import options
from .command import Command, Tidy
from .console import err, note, shown
from .lang import zh

class Group(Tidy, TyperGroup):
    """The features group: its -h/--help a flag without a type, as every command's."""


app = typer.Typer(
    cls=Group,
    name="features",
    help="Sparse autoencoders (SAEs) trained in NumPy: the directions a model's residual stream is made of.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
_SAE, _OPT = "SAE", "Optimisation"
MAX_FEATURES = 1 << 20


class Kind(str, Enum):
    relu = "relu"
    topk = "topk"


class SiteName(str, Enum):
    resid_pre = "resid_pre"
    resid_mid = "resid_mid"
    resid_post = "resid_post"
    attn_out = "attn_out"
    mlp_out = "mlp_out"


SaeArg = Annotated[Path, typer.Argument(help="The SAE's folder ('tfcli features train -o').", show_default=False)]
AnyModel = Annotated[bool, typer.Option("--any-model", help="Use the SAE even on a model other than the one it was "
                                                            "trained on.")]


@app.command("train", cls=Command)
def train(
    text_file: Annotated[
        Optional[Path],
        typer.Argument(help="The UTF-8 text whose vectors are learnt (not with --activations).", show_default=False),
    ] = None,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="The SAE's folder (sae.safetensors and cfg.json, as SAELens names them).",
            show_default=False,
        ),
    ] = None,
    model: options.Model = None,
    block: Annotated[
        Optional[int],
        typer.Option(
            "--block",
            help="The block (from 0) whose vectors are read. (default: 0 for a text; with --activations, the "
            "block they came from, recorded; none if not given)",
            show_default=False,
            rich_help_panel=_SAE,
        ),
    ] = None,
    site: Annotated[
        SiteName,
        typer.Option(
            "--site",
            help="Which vectors of the block: the residual stream after it "
            "(resid_post), before it, between its two steps, or what its "
            "attention or MLP adds.",
            rich_help_panel=_SAE,
        ),
    ] = SiteName.resid_post,
    features: Annotated[
        Optional[int],
        typer.Option(
            "--features",
            help="N, the number of features. (default: 8 x the model's width)",
            show_default=False,
            rich_help_panel=_SAE,
        ),
    ] = None,
    kind: Annotated[
        Kind,
        typer.Option(
            "--kind",
            help="relu: L1 times the decoder norms (Anthropic 2024); topk: keep the K largest (OpenAI).",
            rich_help_panel=_SAE,
        ),
    ] = Kind.relu,
    k: Annotated[int, typer.Option("--k", help="topk: features on per vector.", rich_help_panel=_SAE)] = 32,
    l1: Annotated[
        float,
        typer.Option(
            "--l1",
            help="relu: the sparsity coefficient (on vectors scaled to mean norm sqrt(D)).",
            rich_help_panel=_SAE,
        ),
    ] = 5.0,
    activations: Annotated[
        Optional[Path],
        typer.Option(
            "--activations",
            help="Train on these vectors instead ([N, D] .npy).",
            show_default=False,
            dir_okay=False,
            rich_help_panel=_SAE,
        ),
    ] = None,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate (AdamW).", rich_help_panel=_OPT)] = 1e-3,
    betas: Annotated[str, typer.Option("--betas", help="AdamW's b1,b2.", rich_help_panel=_OPT)] = "0.9,0.999",
    eps: Annotated[float, typer.Option("--eps", help="AdamW's epsilon.", rich_help_panel=_OPT)] = 1e-8,
    weight_decay: Annotated[
        float, typer.Option("--weight-decay", help="Weight decay on the two matrices.", rich_help_panel=_OPT)
    ] = 0.0,
    warmup: Annotated[
        int, typer.Option("--warmup", help="Steps of linear warmup of the learning rate.", rich_help_panel=_OPT)
    ] = 20,
    lr_schedule: Annotated[
        str,
        typer.Option("--lr-schedule", help="After warmup: constant, or cosine down to lr/10.", rich_help_panel=_OPT),
    ] = "constant",
    clip: Annotated[
        float, typer.Option("--clip", help="Clip the gradients to this global norm (0 = off).", rich_help_panel=_OPT)
    ] = 1.0,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Vectors per step.", rich_help_panel=_OPT)] = 1024,
    steps: Annotated[
        int,
        typer.Option(
            "--steps", help="Optimisation steps (the text is read again when they need more).", rich_help_panel=_OPT
        ),
    ] = 1000,
    buffer: Annotated[
        int,
        typer.Option(
            "--buffer", help="Vectors held at a time, shuffled (memory: buffer x D x 4 bytes).", rich_help_panel=_OPT
        ),
    ] = 65_536,
    seed: Annotated[
        int, typer.Option("--seed", "-s", help="Seed of the initial weights and the shuffling.", rich_help_panel=_OPT)
    ] = 0,
    val_fraction: Annotated[
        float,
        typer.Option(
            "--val-fraction",
            help="The end of the text (or array) held out for the quality measures.",
            rich_help_panel=_OPT,
        ),
    ] = 0.1,
    force: Annotated[bool, typer.Option("--force", help="Write into an existing folder.")] = False,
    as_json: options.Json = False,
    threads: options.Threads = None,
    lang: options.LangOption = None,
) -> None:
    """Train a sparse autoencoder on the vectors a model writes at one site, in NumPy.

    The vectors are read window by window into a bounded, shuffled buffer; each step is a batch,
    the loss and its hand-written gradients, AdamW. At the end: the quality on held-out text (MSE,
    explained variance, L0, dead features, loss recovered) and the folder, named as SAELens names it.

    Examples:

      tfcli features train -m shakespeare tinyshakespeare.txt --block 2 -o sae-shakespeare

      tfcli features train -m shakespeare tinyshakespeare.txt --block 2 --kind topk --k 16 -o sae-topk

      tfcli features train --activations vectors.npy --features 512 -o sae-test
    """
    from tfcli.engine.train.sae import Settings

    options.chinese(lang)
    if output is None:
        raise typer.BadParameter("is required", param_hint="'--output' / '-o'")
    options.check_seed(seed)  # before the model loads: a seed past 2^63-1 is no seed NumPy takes
    options.apply_threads(threads)
    _check_output(output, force)
    if block is None and activations is None:
        block = 0  # a text's vectors: block 0 unless --block says; vectors from a file keep no block unless it says
    lm, source = _source(text_file, activations, model, block, site.value, val_fraction)
    s = Settings(
        kind=kind.value,
        n=_features(features, source.d),
        k=k,
        l1=l1,
        lr=lr,
        betas=_betas(betas),
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
    trainer, seconds = _loop(s, source, buffer, as_json)
    _save(output, trainer, lm, block, site.value, source, seconds, as_json, str(text_file or activations))


def _source(text_file, activations, model, block, site, val_fraction):
    from tfcli.analysis.experiments.common import check_block
    from tfcli.analysis.feature_runs import array_source, text_source
    from tfcli.analysis.features import WINDOW
    from tfcli.engine.errors import UsageError
    from tfcli.engine.fast import FAST

    if not 0 <= val_fraction < 1:
        raise UsageError(
            f"--val-fraction {val_fraction} is out of range", "give a fraction from 0 up to (not including) 1"
        )
    if (text_file is None) == (activations is None):
        raise UsageError(
            "give a TEXT_FILE or --activations FILE.npy, one of them",
            "e.g. tfcli features train -m shakespeare text.txt -o my-sae",
        )
    if activations is not None:
        return None, array_source(activations, val_fraction, 1 << 40)
    from .inputs import load

    lm = load(model)
    block = check_block(lm.model, block, "--block")
    return lm, text_source(lm, text_file, block, site, val_fraction, min(WINDOW, lm.config.n_ctx), FAST)


def _features(n: int | None, d: int) -> int:
    from tfcli.engine.errors import UsageError, shown_number

    n = 8 * d if n is None else n
    if not 1 <= n <= MAX_FEATURES:
        raise UsageError(
            f"--features must be between 1 and {MAX_FEATURES:,}, not {shown_number(n)}",
            f"e.g. --features {8 * d} (8 x the width {d})",
        )
    return n


def _betas(text: str) -> tuple[float, float]:
    from .train import _betas as parse

    return parse(text)


def _check_settings(s, buffer: int, d: int) -> None:
    from tfcli.analysis.feature_runs import check_training

    def flag(field: str) -> str:
        return "--" + field.replace("_", "-")

    check_training(s, buffer, d, flag, "see 'tfcli features train --help' for what {name} means")


def _check_output(output: Path, force: bool) -> None:
    from tfcli.analysis.feature_runs import check_folder

    check_folder(output, force, "--force")


def _loop(s, source, buffer_rows: int, as_json: bool):
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from tfcli.analysis.feature_runs import first_batch

    t0 = time.perf_counter()
    buf, trainer = first_batch(s, source, buffer_rows)
    from .lang import say
    from .views.features import MSE_LABEL

    note(say(f"reading {source.describe}", f"读取 {_described_zh(source.describe)}"))
    note(
        say(
            f"an SAE of {s.n:,} {s.kind} features on width {source.d}: {s.steps:,} steps of {s.batch_size:,} vectors",
            f"{s.n:,} 个 {s.kind} 特征的 SAE，宽度 {source.d}：{s.steps:,} 步，每步 {s.batch_size:,} 个向量",
        )
    )
    # The trainer's error is per vector on vectors scaled by trainer.scale; the bar shows it as the
    # summary does (views/features.py): per element, in the model's units.
    per_element = 1.0 / (source.d * trainer.scale**2)
    label, read = MSE_LABEL[zh()], say("vectors read", "个向量已读")
    cols = (
        TextColumn(say("step", "步") + " {task.completed:,.0f}/{task.total:,.0f}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
    )
    # Progress at a terminal only (cli/progress.py's rule): a pipe or a log gets the summary at the end.
    with Progress(*cols, console=err, transient=True, disable=as_json or not err.is_terminal) as bar:
        task = bar.add_task("train", total=s.steps, info="")
        for _ in range(s.steps):
            parts = trainer.train_step(buf.next_batch())
            info = f"{label} {parts['mse'] * per_element:.4g} · L0 {parts['l0']:.1f} · {buf.read:,} {read}"
            bar.update(task, completed=trainer.step, info=info)
    return trainer, time.perf_counter() - t0


def _described_zh(what: str) -> str:
    """What a training reads (analysis/feature_runs.py's words), in Chinese."""
    import re

    what = re.sub(
        r"^(.*), block (\d+), (\S+), windows of (\d+) tokens of (.*)$",
        r"\1，第 \2 块，\3，每窗口 \4 个词元，取自 \5",
        what,
    )
    return re.sub(r"^(\S+) vectors of width (\d+) from (.*)$", r"\1 个宽度为 \2 的向量，取自 \3", what)


def _save(output: Path, trainer, lm, block: int, site: str, source, seconds: float, as_json: bool, data: str) -> None:
    from tfcli.analysis.feature_runs import save_training
    from tfcli.engine.fast import FAST

    q = save_training(output, trainer, lm, block, site, source, seconds, data, FAST)
    _report(output, q, trainer, seconds, as_json)


def _report(output: Path, q: dict, trainer, seconds: float, as_json: bool) -> None:
    summary = {"folder": str(output), "steps": trainer.step, "seconds": round(seconds, 2), **q}
    if as_json:
        from .json import emit

        emit(summary)
        return
    from .views.features import quality_lines

    for line in quality_lines(q):
        err.print(shown(line), soft_wrap=True)
    from .lang import say

    err.print(
        shown(
            say(
                f"{trainer.step:,} steps in {seconds:,.0f} s; the SAE is in {output} (tfcli features top "
                f"{output} TEXT_FILE)",
                f"{trainer.step:,} 步，用时 {seconds:,.0f} s；SAE 写在 {output}（tfcli features top {output} TEXT_FILE）",
            )
        ),
        soft_wrap=True,
    )


def tidy_help(unwrapped, summary) -> None:
    """The app's help rules (cli/__init__.py) for the commands of this group too."""
    import inspect

    for info in app.registered_commands:
        doc = info.help or inspect.getdoc(info.callback) or ""
        info.help, info.short_help = unwrapped(doc), info.short_help or summary(doc)
