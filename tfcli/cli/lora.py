"""--lora ADAPTER, as generate, chat, score and serve take it: a PEFT-format LoRA adapter merged into
the model's weights at load (engine/train/lora.py says why merged, not applied on the fly)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Lora = Annotated[
    Optional[Path],
    typer.Option("--lora", help="A LoRA adapter folder to apply to the model (adapter_config.json and "
                 "adapter_model.safetensors, as train --lora and PEFT write them).", show_default=False),
]  # fmt: skip


def with_lora(lm, adapter: Path | None):
    """The loaded model `lm` with the adapter merged in (none: `lm` as it is)."""
    if adapter is None:
        return lm
    from tfcli.engine.train.lora import adapted

    return adapted(lm, adapter)
