"""The model card (README.md) of a checkpoint: what was trained, how, on what, and how it went."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def model_card(run, commands: list[tuple[int, str]]) -> str:
    """`commands`: (step begun at, command) of the run's first part and of each --resume."""
    s, cfg = run.settings, run.config
    n_params = sum(a.size for a in run.model.params.values())
    origin = f"continued from `{Path(s.from_model).name}`" if s.from_model else "trained from scratch"
    what, how = f"a {cfg.family} model {origin}", "(a hand-written backward pass, engine/train/)"
    if run.adapter is not None:
        ad = run.adapter
        n_base = sum(a.size for a in run.model.base.values())
        what = f"a LoRA adapter for `{ad.base}`"
        how = f"(engine/grad/'s backward pass; rank {ad.rank}, alpha {ad.alpha:g} on {','.join(ad.targets)}"
        how += f", {n_base:,} weights frozen)"
    tok = {"char": "one token per character (`<\\|endoftext\\|>` 0, `<unk>` 1, then the file's characters)", "model": "the model's own"}
    tokenizer = tok.get(s.tokenizer, f"byte-level BPE of {s.tokenizer[4:]} tokens trained on the text")
    val = run.evals[-1][1] if run.evals else None
    curve = "\n".join(f"| {step:,} | {v:.4f} |" for step, v in run.evals) or "| - | - |"
    mask = "" if s.causal else (
        "\n**Trained without the causal mask (`--no-mask`)**: every position could read the tokens after it,\n"
        "including the one it was asked to predict. Its training loss is low because the answer was in view;\n"
        "at generation time the future is not there to read, so it cannot generate.\n"
    )
    optimizer = (
        f"AdamW, betas {tuple(s.betas)}, eps {s.eps:g}, weight decay {s.weight_decay:g} on matrices only"
        if s.optimizer == "adamw"
        else f"SGD, weight decay {s.weight_decay:g} on matrices only"
    )
    schedule = f"{s.lr_schedule}, {s.warmup} warmup steps to {s.lr:g}" + (", down to a tenth at the last step" if s.lr_schedule == "cosine" else "")
    return f"""# {run.out.name}: {what} by `tfcli train`
{mask}
Trained with tfcli's NumPy engine {how}, on
`{Path(s.text).name}` (sha256 `{run.sha256}`); the last {s.val_fraction:.0%} of its tokens are held out.

| | |
|---|---|
| shape | {cfg.n_layer} layers, d_model {cfg.d_model}, {cfg.n_head} heads, context {cfg.n_ctx}, vocabulary {cfg.vocab_size:,} |
| parameters | {n_params:,} |
| tokenizer | {tokenizer} |
| steps | {run.step:,} of {s.steps:,}, batch {s.batch_size} x {s.seq_len} tokens ({s.data_order} windows) |
| tokens seen | {run.step * run.tokens_per_step:,} |
| optimizer | {optimizer}, gradient clipping {s.clip:g} |
| learning rate | {schedule} |
| dropout | {s.dropout:g} |
| seed | {s.seed} |
| time | {run.seconds / 60:.1f} min on {cpu_name()} ({os.cpu_count()} cores) |
| training loss (mean of the last 10 steps) | {_f(run.train_loss())} |
| validation loss | {_f(val)} |

Losses in nats per token.

## Validation loss

| step | validation loss |
|---|---|
{curve}

## Command

```
{_commands(commands)}
```
"""


def _commands(commands: list[tuple[int, str]]) -> str:
    return "\n".join(command if not step else f"# resumed after step {step:,}:\n{command}" for step, command in commands)


def _f(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo on Linux), else what the platform module says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
