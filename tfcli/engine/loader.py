"""Loading a model folder into a runnable model: name table, tokenizer, chat template, warnings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .chat import ChatTemplate, load_chat_template
from .checkpoint import Checkpoint, open_checkpoint
from .config import ModelConfig
from .errors import CheckpointError
from .families import family, load_config
from .model import Transformer
from .tokenizer import Tokenizer


@dataclass
class LoadedModel:
    """A runnable model with its tokenizer, sampling defaults and anything worth warning about."""

    name: str
    path: Path
    model: Transformer
    tokenizer: Tokenizer
    generation: dict = field(default_factory=dict)  # generation_config.json
    chat: ChatTemplate | None = None  # how the model lays out a conversation, if it is a chat model
    warnings: list[str] = field(default_factory=list)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    def chat_eos_ids(self) -> tuple[int, ...]:
        """Tokens that end a reply: the config's EOS ids and the chat template's end-of-turn token."""
        ids = set(self.config.eos_token_ids)
        if self.chat and self.chat.eos_token:
            tid = self.tokenizer.token_id(self.chat.eos_token)
            if tid is not None:
                ids.add(tid)
        return tuple(sorted(ids))


def build(ckpt: Checkpoint) -> Transformer:
    """Turn an opened checkpoint into the family's model (name table applied, shapes checked)."""
    return family(ckpt.config.family).MODEL.from_checkpoint(ckpt)


def read_checkpoint(folder: Path) -> Checkpoint:
    """A model folder's config.json, read by its family, and its weights, opened (not yet loaded)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder", "give the folder that holds config.json")
    if not (folder / "config.json").exists():
        raise CheckpointError(
            f"{folder} has no config.json",
            "a model folder holds config.json, model.safetensors and tokenizer.json (Hugging Face layout)",
        )
    return open_checkpoint(folder, load_config(folder / "config.json"))


def load_folder(path: Path, name: str | None = None) -> LoadedModel:
    """Load the model folder at `path` (names are the store's business: tfcli.store.load)."""
    path = Path(path)
    ckpt = read_checkpoint(path)
    net = build(ckpt)
    tokenizer = Tokenizer(path / "tokenizer.json")
    warnings = []
    extra = ckpt.tensors.unused()
    if extra:
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        warnings.append(
            f"{len(extra)} tensor(s) in the checkpoint are not used by a {ckpt.config.family} model: {shown}"
        )
    if tokenizer.vocab_size > ckpt.config.vocab_size:
        warnings.append(
            f"tokenizer.json has {tokenizer.vocab_size} tokens but the model only {ckpt.config.vocab_size}; ids past "
            "it are refused"
        )
    return LoadedModel(name or path.name, path, net, tokenizer, ckpt.generation, load_chat_template(path), warnings)
