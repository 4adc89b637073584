"""Chat templates: how a chat model wants a conversation laid out as text.

Hugging Face models ship the layout as a Jinja template (`chat_template.jinja`, or the
`chat_template` field of tokenizer_config.json). It is rendered as transformers renders it: a
sandboxed Jinja environment with trim_blocks/lstrip_blocks, the special tokens as variables and
`add_generation_prompt` to open the assistant's turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .errors import TfcliError


@dataclass(frozen=True)
class ChatTemplate:
    source: str  # the Jinja text
    bos_token: str = ""
    eos_token: str = ""

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str):
            raise TfcliError(f"the chat template refused the conversation: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            return env.from_string(self.source).render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TfcliError:
            raise
        except TemplateError as e:
            raise TfcliError(f"the model's chat template failed: {_first_line(e)}", "check chat_template in the model folder") from None
        except Exception as e:  # noqa: BLE001 - the template is code from the model folder: any failure is the file's
            raise TfcliError(
                f"the model's chat template failed: {type(e).__name__}: {_first_line(e)}", "check chat_template in the model folder"
            ) from None


def load_chat_template(folder: Path) -> ChatTemplate | None:
    """The folder's chat template, or None for a model without one (a plain language model)."""
    cfg: dict = {}
    cfg_path = folder / "tokenizer_config.json"
    if cfg_path.exists():
        try:
            loaded = json.loads(cfg_path.read_text(encoding="utf-8"))
            cfg = loaded if isinstance(loaded, dict) else {}
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            raise TfcliError(f"{cfg_path} is not valid JSON", "fix or re-convert the model folder") from None
    source = None
    jinja_path = folder / "chat_template.jinja"
    if jinja_path.exists():
        try:
            source = jinja_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            raise TfcliError(f"{jinja_path} cannot be read as UTF-8 text", "fix or re-convert the model folder") from None
    elif isinstance(cfg.get("chat_template"), str):
        source = cfg["chat_template"]
    elif isinstance(cfg.get("chat_template"), list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in cfg["chat_template"] if isinstance(t, dict) and isinstance(t.get("name"), str)}
        source = named.get("default") or next(iter(named.values()), None)
    if not source:
        return None
    if not isinstance(source, str):
        raise TfcliError(f"the chat_template in {cfg_path} is not text", "fix or re-convert the model folder")

    def token(key: str) -> str:
        value = cfg.get(key)
        if isinstance(value, dict):  # {"content": "<s>", ...}
            value = value.get("content")
        return value if isinstance(value, str) else ""

    return ChatTemplate(source, token("bos_token"), token("eos_token"))


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
