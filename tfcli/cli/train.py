"""tfcli train: train a small GPT in NumPy (forward and a hand-written backward pass), or go on
training a model tfcli runs; every checkpoint is a Hugging Face folder."""

from __future__ import annotations

import shlex
import signal
import sys
import time
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.text import Text

from . import options
from .command import interrupted
from .console import err, for_terminal, note, shown

_MODEL, _LORA, _OPT, _RUN = "Model", "LoRA", "Optimisation", "Run"


class Optimizer(str, Enum):
    adamw = "adamw"
    sgd = "sgd"


class Schedule(str, Enum):
    cosine = "cosine"
    constant = "constant"


class Order(str, Enum):
    random = "random"
    sequential = "sequential"


def train(
    text_file: Annotated[Path, typer.Argument(
        help="The UTF-8 text to train on, or a .jsonl file of chat conversations (with --from a chat model).",
        show_default=False)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The folder of the checkpoint (a Hugging Face model folder).", show_default=False)],
    layers: Annotated[Optional[int], typer.Option(
        "--layers", help="Transformer blocks. (default: 4)", show_default=False, rich_help_panel=_MODEL)] = None,
    d_model: Annotated[Optional[int], typer.Option(
        "--d-model", help="Width of the residual stream. (default: 128)", show_default=False, rich_help_panel=_MODEL
    )] = None,
    heads: Annotated[Optional[int], typer.Option(
        "--heads", help="Attention heads (--d-model must be a multiple). (default: 4)", show_default=False,
        rich_help_panel=_MODEL)] = None,
    context: Annotated[Optional[int], typer.Option(
        "--context", help="Longest sequence the model can read (n_positions). (default: 128)", show_default=False,
        rich_help_panel=_MODEL)] = None,
    tokenizer: Annotated[Optional[str], typer.Option(
        "--tokenizer",
        help="char: one token per character; bpe:N: a byte-level BPE of N tokens trained on the text. (default: char)",
        show_default=False, rich_help_panel=_MODEL)] = None,
    from_model: Annotated[Optional[str], typer.Option(
        "--from",
        help="Go on training this model (a GPT-2, Llama, Qwen2, Qwen3, Gemma 3 or Phi-3 folder, GGUF file or model "
        "name), with its own tokenizer.",
        show_default=False, rich_help_panel=_MODEL)] = None,
    no_mask: Annotated[bool, typer.Option(
        "--no-mask",
        help="Train without the causal mask: each position can read the tokens after it (the experiment in the "
        "README).",
        rich_help_panel=_MODEL)] = False,
    dropout: Annotated[float, typer.Option(
        "--dropout", help="Share of the embedding and residual-branch values zeroed in training.",
        rich_help_panel=_MODEL)] = 0.0,
    lora: Annotated[Optional[int], typer.Option(
        "--lora", help="Train a LoRA adapter of this rank on the frozen --from model; -o gets the adapter "
        "(PEFT's format).",
        show_default=False, rich_help_panel=_LORA)] = None,
    alpha: Annotated[Optional[float], typer.Option(
        "--alpha", help="LoRA's alpha: the adapter adds (alpha / rank)·B A. (default: 2 x --lora)",
        show_default=False, rich_help_panel=_LORA)] = None,
    targets: Annotated[str, typer.Option(
        "--targets", help="The projections LoRA adapts, from q,k,v,o,gate,up,down (Phi-3: qkv,o,gate_up,down; "
        "GPT-2: qkv,o,up,down). (default: q,k,v,o; qkv,o)", show_default=False, rich_help_panel=_LORA)] = "",
    optimizer: Annotated[Optimizer, typer.Option(
        "--optimizer", help="adamw or sgd.", rich_help_panel=_OPT)] = Optimizer.adamw,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate.", rich_help_panel=_OPT)] = 1e-3,
    betas: Annotated[str, typer.Option("--betas", help="AdamW's b1,b2.", rich_help_panel=_OPT)] = "0.9,0.99",
    eps: Annotated[float, typer.Option("--eps", help="AdamW's epsilon.", rich_help_panel=_OPT)] = 1e-8,
    weight_decay: Annotated[float, typer.Option(
        "--weight-decay", help="Weight decay, on matrices only (not biases or norms).", rich_help_panel=_OPT)] = 0.1,
    warmup: Annotated[int, typer.Option(
        "--warmup", help="Steps of linear warmup of the learning rate.", rich_help_panel=_OPT)] = 50,
    lr_schedule: Annotated[Schedule, typer.Option(
        "--lr-schedule", help="After warmup: cosine down to lr/10 at the last step, or constant.", rich_help_panel=_OPT
    )] = Schedule.cosine,
    clip: Annotated[float, typer.Option(
        "--clip", help="Clip the gradients to this global norm (0 = off).", rich_help_panel=_OPT)] = 1.0,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per step.", rich_help_panel=_OPT)] = 16,
    seq_len: Annotated[Optional[int], typer.Option(
        "--seq-len", help="Tokens per sequence. (default: --context; with --from, at most 256)", show_default=False,
        rich_help_panel=_OPT)] = None,
    steps: Annotated[Optional[int], typer.Option(
        "--steps", help="Optimisation steps. (default: 1000)", show_default=False, rich_help_panel=_OPT)] = None,
    seed: Annotated[int, typer.Option(
        "--seed", "-s", help="Seed of the initial weights, the batches and the samples.", rich_help_panel=_OPT)] = 1337,
    val_fraction: Annotated[float, typer.Option(
        "--val-fraction", help="The last fraction of the tokens, held out for the validation loss.",
        rich_help_panel=_RUN)] = 0.1,
    data_order: Annotated[Order, typer.Option(
        "--data-order", help="random windows, or sequential: sequence b of step s starts at token (s*B + b)*T.",
        rich_help_panel=_RUN)] = Order.random,
    eval_every: Annotated[Optional[int], typer.Option(
        "--eval-every", help="Validation loss, a sample and a checkpoint every this many steps. (default: 100)",
        show_default=False, rich_help_panel=_RUN)] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run saved in --output, with its settings (--steps may raise the end).",
        rich_help_panel=_RUN)] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Write into an existing folder (tfcli's files are replaced, others left alone).",
        rich_help_panel=_RUN)] = False,
    png: Annotated[Optional[Path], typer.Option(
        "--png", help="Write the loss curves to this PNG at the end.", show_default=False, rich_help_panel=_RUN
    )] = None,
    as_json: options.Json = False,
    threads: options.Threads = None,
) -> None:
    """Train a GPT-2-style model on a text file with tfcli's NumPy engine: the model's own forward
    pass and a hand-written backward pass (engine/grad/). Progress goes to stderr: the step, the loss,
    tokens per second and the time left; every --eval-every steps the validation loss, a sample
    and a checkpoint. Ctrl-C (or SIGTERM) saves a checkpoint that --resume continues.

    Examples:

      tfcli train shakespeare.txt -o my-shakespeare

      tfcli train shakespeare.txt -o no-mask --no-mask --steps 300

      tfcli train notes.txt -o notes --tokenizer bpe:512 --layers 2 --d-model 64

      tfcli train more.txt -o tuned --from shakespeare --lr 3e-4 --steps 200

      tfcli train notes.txt -o my-adapter --from smollm2 --lora 8 --steps 100

      tfcli train talk.jsonl -o chat-adapter --from smollm2 --lora 8 --seq-len 256
    """
    from tfcli.engine.train import folder, run as runs

    n = options.apply_threads(threads)
    if resume:
        run = runs.resume(output, text_file, _positive(steps, "--steps"), _positive(eval_every, "--eval-every"))
        n = _resume_threads(run.threads_before, threads, n)
    else:
        folder.check_output(output, force, resume)
        settings = _settings(locals())
        run = runs.start(settings, output, base_name=from_model or "")
    run.threads = n
    command = "tfcli train ..."
    if sys.argv and "tfcli" in Path(sys.argv[0]).name:
        command = shlex.join(["tfcli", *sys.argv[1:]])
    _describe(run)
    _loop(run, command, as_json)
    _finish(run, png, as_json)


def _resume_threads(before: int | None, flag: int | None, n: int) -> int:
    """The threads a --resume runs on: the part it continues had `before` (None: not recorded). A
    product's last bits depend on how many threads share it, so a resume on another count ends near an
    unbroken run's weights, not on them: unless told otherwise, take the run's own count."""
    import os

    from tfcli.engine.threads import available_cpus, busy_cpus, set_blas_threads

    from .console import warn

    if before is None or before == n:
        return n
    told = flag is not None or any((v := os.environ.get(var, "")).isascii() and v.isdigit() and v.strip("0")
                                   for var in options.THREAD_VARIABLES)
    cores = available_cpus()
    if not told and before <= cores:
        set_blas_threads(before)
        if (busy := busy_cpus()) and before > cores - busy:  # one line: threads on busy cores stall each other
            warn(f"resuming on the run's {before} threads, as it was trained, to end on the same weights; with {busy} "
                 f"of {cores} cores busy, --threads {max(1, cores - busy)} is faster but not exact")
        return before
    exactly = f"; --threads {before} continues it exactly" if before <= cores else ""
    warn(f"the run was trained on {before} thread{'s' if before != 1 else ''} and resumes on {n}: its weights will "
         f"differ from an unbroken run's in the last bits (float32 rounding){exactly}")
    return n


def _settings(flags: dict):
    """The run's Settings from the flags, each checked (a bad value: exit 2)."""
    from tfcli.engine.errors import UsageError
    from tfcli.engine.train.run import Settings

    f = flags
    shaped = {k: f[k] for k in ("layers", "d_model", "heads", "tokenizer") if f[k] is not None}
    if f["from_model"] and shaped:
        name = "--" + next(iter(shaped)).replace("_", "-")
        raise UsageError(f"{name} cannot be given with --from", "a model continued keeps its shape and its tokenizer")
    shape = ("layers", "d_model", "heads", "context")
    layers, d_model, heads, context = (_positive(f[k], "--" + k.replace("_", "-")) for k in shape)
    layers, d_model, heads = layers or 4, d_model or 128, heads or 4
    from_folder = str(options.model_folder(f["from_model"])) if f["from_model"] else None
    if from_folder:
        context = _from_context(from_folder, context)
    context = context or 128
    if d_model % heads:
        raise UsageError(f"--d-model {d_model} is not a multiple of --heads {heads}",
                         "each head gets d_model / heads dimensions")
    # A continued model's context can be thousands of tokens: a first run on a CPU gets 256 of them.
    default = min(context, 256) if from_folder and f["context"] is None else context
    seq_len = _positive(f["seq_len"], "--seq-len") or default
    if seq_len > context:
        raise UsageError(f"--seq-len {seq_len:,} is beyond the context of {context:,}",
                         "use a --seq-len up to --context, or a larger --context")
    _check_ranges(f)
    lora = _lora(f, from_folder)
    return Settings(
        text=str(f["text_file"]), layers=layers, d_model=d_model, heads=heads, context=context,
        tokenizer="model" if from_folder else _tokenizer(f["tokenizer"] or "char"), from_model=from_folder,
        dropout=f["dropout"], optimizer=f["optimizer"].value, lr=f["lr"], betas=_betas(f["betas"]), eps=f["eps"],
        weight_decay=f["weight_decay"], warmup=f["warmup"], lr_schedule=f["lr_schedule"].value, clip=f["clip"],
        batch_size=f["batch_size"], seq_len=seq_len, steps=_positive(f["steps"], "--steps") or 1000, seed=f["seed"],
        val_fraction=f["val_fraction"], data_order=f["data_order"].value,
        eval_every=_positive(f["eval_every"], "--eval-every") or 100, causal=not f["no_mask"], **lora,
    )  # fmt: skip


def _lora(f: dict, from_folder: str | None) -> dict:
    """The Settings fields of --lora, --alpha and --targets, each checked (a bad value: exit 2); the
    rank against the model's matrices is checked when the adapter is made (engine/train/lora.py)."""
    from tfcli.engine.errors import UsageError
    from tfcli.engine.train.lora import TARGETS

    if f["lora"] is None:
        used = "--alpha" if f["alpha"] is not None else "--targets" if f["targets"] else None
        if used:
            raise UsageError(f"{used} is a LoRA setting", "add --lora RANK (with --from MODEL) to train an adapter")
        return {}
    if not from_folder:
        raise UsageError("--lora trains an adapter on a model: it needs --from MODEL", "e.g. --from smollm2 --lora 8")
    if f["dropout"] or f["no_mask"]:
        raise UsageError(f"{'--dropout' if f['dropout'] else '--no-mask'} cannot be given with --lora", "drop it")
    if not 1 <= f["lora"] <= 1 << 16:
        raise UsageError(f"--lora {f['lora']} is not a rank", "give a rank from 1 to the model's width, e.g. 8")
    alpha = 2.0 * f["lora"] if f["alpha"] is None else f["alpha"]
    if not 0 < alpha < 1e6:
        raise UsageError(f"--alpha {alpha:g} is out of range", "give a positive number, e.g. 16")
    targets = [t.strip() for t in f["targets"].split(",") if t.strip()]  # none: the family's default
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or (f["targets"] and not targets) or len(set(targets)) != len(targets):
        raise UsageError(f"--targets {f['targets']!r} is not a list of projections", f"choose from {','.join(TARGETS)}")
    return {"lora": f["lora"], "lora_alpha": float(alpha), "lora_targets": targets}


def _from_context(folder: str, context: int | None) -> int:
    """--context with --from: at most the model's own (its position table or RoPE range)."""
    from tfcli.engine.errors import UsageError
    from tfcli.engine.families import load_config

    n_ctx = load_config(Path(folder) / "config.json").n_ctx
    if context is not None and context > n_ctx:
        raise UsageError(f"--context {context:,} is beyond what {Path(folder).name} supports ({n_ctx:,})",
                         f"use --context {n_ctx:,} or less")
    return min(context or n_ctx, n_ctx)


def _positive(value: int | None, flag: str) -> int | None:
    from tfcli.engine.errors import UsageError, shown_number

    if value is not None and not 1 <= value <= 1 << 24:
        raise UsageError(f"{flag} must be between 1 and {1 << 24:,}, not {shown_number(value)}")
    return value


def _check_ranges(f: dict) -> None:
    import math

    from tfcli.engine.errors import UsageError, shown_number

    checks = (
        ("--lr", f["lr"], lambda v: 0 < v < 1e3),
        ("--eps", f["eps"], lambda v: 0 < v < 1),
        ("--weight-decay", f["weight_decay"], lambda v: 0 <= v < 1e3),
        ("--clip", f["clip"], lambda v: v >= 0),
        ("--dropout", f["dropout"], lambda v: 0 <= v < 1),
        ("--val-fraction", f["val_fraction"], lambda v: 0 <= v < 1),
        ("--warmup", f["warmup"], lambda v: 0 <= v <= 1 << 24),
        ("--batch-size", f["batch_size"], lambda v: 1 <= v <= 1 << 16),
        ("--seed", f["seed"], lambda v: 0 <= v < 1 << 63),
    )
    for flag, value, ok in checks:
        # an int of any size: compared, never made a float
        if not ((isinstance(value, int) or math.isfinite(value)) and ok(value)):
            raise UsageError(f"{flag} {shown_number(value) if isinstance(value, int) else value} is out of range",
                             f"see 'tfcli train --help' for what {flag} means")


def _betas(text: str) -> tuple[float, float]:
    from tfcli.engine.errors import UsageError

    try:
        b1, b2 = (float(x) for x in text.split(","))
        if 0 <= b1 < 1 and 0 <= b2 < 1:
            return b1, b2
    except ValueError:
        pass
    raise UsageError(f"--betas {text!r} is not two numbers in [0, 1) separated by a comma", "e.g. --betas 0.9,0.99")


def _tokenizer(text: str) -> str:
    from tfcli.engine.errors import UsageError

    if text == "char":
        return text
    kind, _, n = text.partition(":")
    if kind == "bpe" and n.isdigit() and 257 <= int(n) <= 1_000_000:
        return f"bpe:{int(n)}"
    raise UsageError(f"--tokenizer {text!r} is not char or bpe:N",
                     "bpe:N needs N from 257 (the 256 bytes and <|endoftext|>) to 1,000,000")


def _describe(run) -> None:
    s, cfg = run.settings, run.config
    n = f"{sum(a.size for a in run.model.params.values()):,}"
    what = f"continuing {Path(s.from_model).name}" if s.from_model else "a GPT-2" if run.step else "a new GPT-2"
    if run.adapter is not None:
        ad, n_base = run.adapter, sum(a.size for a in run.model.base.values())
        what = f"a LoRA adapter (rank {ad.rank}, alpha {ad.alpha:g}, on {','.join(ad.targets)}) for {ad.base}"
        n = f"{n} trainable of {n_base:,}"
    mask = "" if s.causal else ", WITHOUT the causal mask"
    shape = f"{cfg.n_layer} blocks, d_model {cfg.d_model}, {cfg.n_head} heads, context {cfg.n_ctx}"
    note(f"{what}: {shape}, vocabulary {cfg.vocab_size:,}, {n} parameters{mask}")
    n_train, n_val = run.data_tokens
    tokens = f"{n_train:,} training tokens, {n_val:,} validation tokens"
    note(f"data: {tokens}; batch {s.batch_size} x {s.seq_len}")
    if run.step:
        note(f"resuming at step {run.step:,} of {s.steps:,}")
    c = run.cost
    from tfcli import numbers

    left = max(s.steps - run.step, 0)
    per_step, total = _duration(c.step_seconds), _duration(c.step_seconds * left)
    note(f"estimate: {numbers.size(c.nbytes)} of memory, about {per_step} a step, {total} for the {left:,} steps to go")


@contextmanager
def _stop_after_step():
    """The first Ctrl-C or SIGTERM (`kill`, a container or a job scheduler stopping) asks the loop
    to stop after the step it is in (an update half applied would be a broken checkpoint); a second
    one interrupts at once. `asked` holds the signal. A handler is installed only where the
    interpreter's own is in place: not in an embedding program or a test, and Ctrl-C not in a
    background job, which ignores it (SIGTERM still stops it cleanly there)."""
    import threading

    asked: list[int] = []

    def handler(signum, frame):
        if asked:
            raise KeyboardInterrupt
        asked.append(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread() and not sys.flags.dev_mode:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, handler)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, handler)
    try:
        yield asked
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


def _loop(run, command: str, as_json: bool) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    s = run.settings
    columns = (TextColumn("step {task.completed:,.0f}/{task.total:,.0f}"), BarColumn(),
               TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[speed]}"),
               TimeRemainingColumn())  # fmt: skip
    with _stop_after_step() as asked, Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("train", total=s.steps, completed=run.step, loss="-", speed="")
        t0, step0 = time.perf_counter(), run.step
        try:
            while run.step < s.steps and not asked:
                loss = run.train_step()
                speed = (run.step - step0) * run.tokens_per_step / max(time.perf_counter() - t0, 1e-9)
                bar.update(task, completed=run.step, loss=f"{loss:.4f}", speed=f"{speed:,.0f} tok/s")
                # a log file gets lines, not a bar
                if not err.is_terminal and run.step % max(1, s.eval_every // 5) == 0:
                    left = _duration((s.steps - run.step) * run.tokens_per_step / max(speed, 1e-9))
                    line = f"step {run.step:,}/{s.steps:,} · loss {loss:.4f} · {speed:,.0f} tok/s · {left} left"
                    err.print(line, soft_wrap=True)
                if run.step % s.eval_every == 0 or run.step == s.steps:
                    _evaluate(run, command, bar)
        except KeyboardInterrupt:
            asked.append(signal.SIGINT)
        if asked and run.step < s.steps:
            if run.saved_step != run.step:
                run.save(command)
            bar.stop()
            how = "terminated (SIGTERM)" if asked[0] == signal.SIGTERM else "interrupted"
            again = f"tfcli train {shlex.quote(s.text)} -o {shlex.quote(str(run.out))} --resume"
            note(f"{how} at step {run.step:,}: the checkpoint is in {run.out}; continue with: {again}")
            # as generate does: the work so far is kept, the exit code says which signal (128 + its number)
            raise typer.Exit(128 + signal.SIGTERM) if asked[0] == signal.SIGTERM else interrupted()
    if run.saved_step != run.step:
        run.save(command)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds:.2g} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _evaluate(run, command: str, bar) -> None:
    val = run.evaluate()
    run.save(command)  # first: the sample of a masked model runs from it
    prompt, text = run.sample()
    val_text = f"val {val:.4f}" if val is not None else "no validation split"
    line = f"step {run.step:,}: train {run.train_loss():.4f} (last 10 steps), {val_text}, {run.seconds:,.0f} s"
    bar.console.print(shown(line, "bold"))
    bar.console.print(Text(for_terminal(prompt), style="dim") + Text(for_terminal(text)), soft_wrap=True)


def _finish(run, png: Path | None, as_json: bool) -> None:
    from .views.curve import Series, smoothed, text_chart, write_png

    val = [v for _, v in run.evals]
    curves = [smoothed(run.losses), Series("validation", [s for s, _ in run.evals], val, (214, 39, 40), "●")]
    curves = [c for c in curves if c.values]
    if not as_json:
        for line in text_chart(curves):
            err.print(shown(line), soft_wrap=True)
    if png is not None:
        write_png(png, curves, f"{run.out.name}: loss (nats per token)")
    summary = {
        "steps": run.step,
        "tokens": run.step * run.tokens_per_step,
        "seconds": round(run.seconds, 2),
        "train_loss": run.train_loss(),
        "val_loss": val[-1] if val else None,
        "folder": str(run.out),
    }
    if as_json:
        from .json import emit

        emit(summary, digits=7)  # a loss to 7 digits: the house's 4 would hide the last steps' changes
    else:
        from tfcli.store.registry import as_model_arg

        where = f"the model is in {run.out} (tfcli generate -m {as_model_arg(run.out)})"
        if run.adapter is not None:
            base = shlex.quote(run.adapter.base or run.settings.from_model)
            where = f"the adapter is in {run.out} (tfcli generate -m {base} --lora {shlex.quote(str(run.out))})"
        done = f"{run.step:,} steps, {summary['tokens']:,} tokens in {run.seconds:,.0f} s"
        err.print(shown(f"{done}; {where}"), soft_wrap=True)
