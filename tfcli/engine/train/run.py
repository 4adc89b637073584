"""A training run: the settings, the model, the optimizer, the data, and one step at a time.

The CLI (cli/train.py) drives it: `train_step()` until the last step, `evaluate()` and `sample()`
every --eval-every steps, `save()` for each checkpoint. Everything a step draws at random comes
from generators seeded by (seed, step), so a resumed run continues exactly as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import ModelConfig
from ..errors import shown_number
from ..families import config_from_hf
from ..memory import check_allocation
from . import TrainError, chat, cost, data, folder, lora, trainable
from .card import model_card
from .model import init_gpt2
from .optim import SGD, AdamW, clip_by_global_norm, lr_at


@dataclass
class Settings:
    """Everything that fixes a run, as the flags of `tfcli train` name it; saved in trainer_state.json."""

    text: str
    layers: int
    d_model: int
    heads: int
    context: int
    tokenizer: str  # "char", "bpe:N", or "model" (--from: the model's own)
    from_model: str | None  # the folder --from resolved to
    dropout: float
    optimizer: str  # "adamw" or "sgd"
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    warmup: int
    lr_schedule: str  # "cosine" or "constant"
    clip: float
    batch_size: int
    seq_len: int
    steps: int
    seed: int
    val_fraction: float
    data_order: str  # "random" or "sequential"
    eval_every: int
    causal: bool = True  # False: --no-mask
    lora: int = 0  # the rank of a LoRA adapter trained on the frozen --from model (0: train every weight)
    lora_alpha: float = 0.0  # its alpha: the adapter adds (alpha / rank)·B A
    lora_targets: list[str] = field(default_factory=list)  # the projections it adapts (lora.MODULES' names)


class Run:
    def __init__(self, settings: Settings, out: Path, tokenizer: data.Tokenizer, sha256: str, config: ModelConfig,
                 raw_config: dict | None, params, adapter: lora.Adapter | None = None):  # fmt: skip
        self.settings, self.out, self.tokenizer, self.sha256 = settings, Path(out), tokenizer, sha256
        self.config, self.raw_config = config, raw_config
        self.adapter = adapter  # --lora: what learns; `params` are the frozen base's
        if adapter is not None:
            self.model = lora.LoraTrainable(config, params, adapter)
        else:
            self.model = trainable(config, params, settings.causal, settings.dropout)
        s = settings
        self.optimizer = AdamW(tuple(s.betas), s.eps, s.weight_decay) if s.optimizer == "adamw" else SGD(s.weight_decay)
        self.step = 0  # steps done
        self.losses: list[float] = []  # training loss of every step
        self.evals: list[tuple[int, float]] = []  # (step, validation loss)
        self.seconds_before = 0.0  # of the run this one resumes
        self.begun_at = 0  # the step this part of the run started from (--resume: the checkpoint's)
        self.commands_before: list[tuple[int, str]] = []  # (step begun at, command) of the parts before this one
        self.started = time.perf_counter()
        self.saved_step: int | None = None  # the step of the last checkpoint written
        # BLAS threads of this part of the run, and of the part a --resume continues (None: not recorded). A product's
        # last bits depend on how many threads share it: a resume equals an unbroken run only on the same count.
        self.threads: int | None = None
        self.threads_before: int | None = None
        # --from: the source's own files that travel with it (sampling defaults, chat template)
        self.extra_files: dict[str, bytes] = {}
        self.cost = cost.estimate(config, s.batch_size, s.seq_len, s.optimizer, bool(s.lora))

    # ------------------------------------------------------------------ data

    def load_data(self, text: str) -> None:
        s = self.settings
        self.chats: chat.ChatData | None = None
        if chat.is_chat(Path(s.text)):  # conversations, scored on the assistant's turns (train/chat.py)
            from ..chat import load_chat_template

            template = load_chat_template(Path(s.from_model)) if s.from_model else None
            pad = self.config.eos_token_ids[0] if self.config.eos_token_ids else 0
            self.chats = chat.ChatData.of(text, Path(s.text), template, self.tokenizer, s.seq_len, s.val_fraction, pad)
            self.val_batches = self.chats.val_batches(s.batch_size)
            return
        ids = self.tokenizer.encode(text)  # [N]
        self.split = data.Split.of(ids, s.val_fraction)
        self.split.check(Path(s.text), s.batch_size, s.seq_len, s.data_order)
        self.val_batches = data.eval_batches(self.split.val, s.batch_size, s.seq_len, s.seed)

    @property
    def data_tokens(self) -> tuple[int, int]:
        """Tokens of the training and the validation split."""
        if self.chats is not None:
            return self.chats.train_tokens, self.chats.val_tokens
        return len(self.split.train), len(self.split.val)

    @property
    def tokens_per_step(self) -> int:
        return self.settings.batch_size * self.settings.seq_len

    @property
    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.started

    # ------------------------------------------------------------------ steps

    def train_step(self) -> float:
        """One step: a batch, the loss and its gradients, clipping, the update. Returns the loss."""
        s = self.settings
        if self.chats is not None:
            x, y = self.chats.batch(self.step, s.batch_size, s.data_order, s.seed)  # [B, T] each
        else:
            x, y = data.batch(self.split.train, self.step, s.batch_size, s.seq_len, s.data_order, s.seed)  # [B, T] each
        rng = np.random.default_rng([s.seed, self.step, 1]) if s.dropout > 0 else None
        loss, grads = self.model.loss_and_grads(x, y, rng)
        if not math.isfinite(loss):
            where = "no checkpoint was saved"
            if self.saved_step:
                where = f"the last good checkpoint (step {self.saved_step:,}) is in {self.out}"
            raise TrainError(f"the loss became {loss} at step {self.step + 1:,}; training stopped, {where}",
                             "lower --lr, or clip the gradients with --clip 1")  # fmt: skip
        clip_by_global_norm(grads, s.clip)
        self.optimizer.step(self.model.params, grads, self.lr)
        self.step += 1
        self.losses.append(loss)
        return loss

    @property
    def lr(self) -> float:
        s = self.settings
        return lr_at(self.step, s.lr, s.warmup, s.steps, s.lr_schedule)

    def evaluate(self) -> float | None:
        """Mean loss on the fixed validation batches (None without a validation split)."""
        if not self.val_batches:
            return None
        val = float(np.mean([self.model.loss(x, y) for x, y in self.val_batches]))
        self.evals.append((self.step, val))
        return val

    def train_loss(self) -> float | None:
        """The mean training loss of the last 10 steps (one batch's loss is noisy)."""
        return float(np.mean(self.losses[-10:])) if self.losses else None

    def sample(self, n_tokens: int | None = None, temperature: float = 0.8) -> tuple[str, str]:
        """(prompt, continuation): the start of the validation text, continued by the model.

        A masked model is run by tfcli's inference engine from the checkpoint just saved (a KV
        cache: milliseconds, and proof that the checkpoint loads); an unmasked one runs as it was
        trained, each position reading the whole prefix, recomputed for every new token."""
        s = self.settings
        if self.chats is not None:
            ids = self.chats.prompt()  # a held-out conversation, up to the assistant's answer
        else:
            source = self.split.val if len(self.split.val) else self.split.train
            ids = [int(i) for i in source[: max(1, min(16, s.seq_len // 2))]]
        n = min(n_tokens or (200 if self.tokenizer.chars is not None else 60), self.config.n_ctx - len(ids))
        rng = np.random.default_rng([s.seed, self.step, 2])
        saved = s.causal and self.saved_step == self.step
        next_logits = self._engine_sampler(ids) if saved else self._trained_sampler(ids)
        new: list[int] = []
        for _ in range(n):
            logits = next_logits(new[-1] if new else None).astype(np.float64) / temperature  # [V]
            p = np.exp(logits - logits.max())
            new.append(int(rng.choice(len(p), p=p / p.sum())))
        return self.tokenizer.decode(ids), self.tokenizer.decode(new)

    def _engine_sampler(self, prompt: list[int]):
        from ..generate import Session
        from ..loader import load_folder

        if self.adapter is not None:  # the base with the adapter just saved
            lm = lora.adapted(load_folder(Path(self.settings.from_model)), self.out)
        else:
            lm = load_folder(self.out)
        session = Session(lm.model)
        first, _ = session.prefill(prompt)  # [V]
        return lambda token: first if token is None else session.step(token)

    def _trained_sampler(self, prompt: list[int]):
        ids = list(prompt)

        def next_logits(token):
            if token is not None:
                ids.append(token)
            return self.model.logits_last(np.array(ids[-self.settings.context :]))  # [V]

        return next_logits

    # ------------------------------------------------------------------ checkpoints

    def save(self, command: str) -> None:
        """Write the checkpoint (atomically: folder.write_files)."""
        if self.adapter is not None:
            return self._save_adapter(command)
        eos = (self.config.eos_token_ids or [None])[0]
        generation = {"bos_token_id": self.config.bos_token_id, "eos_token_id": eos, "do_sample": True,
                      "temperature": 0.8, "top_k": 40}  # fmt: skip
        files = {
            folder.WEIGHTS: folder.safetensors_bytes(self.model.params),
            "config.json": folder.json_bytes(folder.hf_config(self.config, self.raw_config)),
            "tokenizer.json": self.tokenizer.json_text.encode("utf-8"),
            folder.STATE: folder.json_bytes(self.state(command)),
            "README.md": model_card(self, self.commands(command)).encode("utf-8"),
        }
        files |= self.extra_files
        if self.raw_config is None:
            files["generation_config.json"] = folder.json_bytes(generation)
        if self.tokenizer.config is not None:
            files["tokenizer_config.json"] = folder.json_bytes(self.tokenizer.config)
        opt = self.optimizer.state()
        if opt:
            files[folder.OPTIMIZER] = folder.safetensors_bytes(opt)
        folder.write_files(self.out, files)
        self.saved_step = self.step

    def _save_adapter(self, command: str) -> None:
        """--lora: the adapter as PEFT saves it, beside the run's state and card (no base weights)."""
        files = {
            lora.CONFIG: lora.config_bytes(self.adapter),
            lora.WEIGHTS: lora.weights_bytes(self.adapter),
            folder.STATE: folder.json_bytes(self.state(command)),
            "README.md": model_card(self, self.commands(command)).encode("utf-8"),
        }
        opt = self.optimizer.state()
        if opt:
            files[folder.OPTIMIZER] = folder.safetensors_bytes(opt)
        folder.write_files(self.out, files)
        self.saved_step = self.step

    def commands(self, command: str) -> list[tuple[int, str]]:
        """(step begun at, command) of every part of the run: the first, then each --resume."""
        return [*self.commands_before, (self.begun_at, command)]

    def state(self, command: str) -> dict:
        return {
            "settings": dataclasses.asdict(self.settings),
            "step": self.step,
            "losses": [round(x, 6) for x in self.losses],
            "evals": [[s, round(v, 6)] for s, v in self.evals],
            "seconds": round(self.seconds, 3),
            "commands": [list(c) for c in self.commands(command)],
            "text_sha256": self.sha256,
            **({"threads": self.threads} if self.threads else {}),
        }


def start(settings: Settings, out: Path, base_name: str = "") -> Run:
    """A new run: a new GPT-2 (with a tokenizer made from the text), or --from a model folder."""
    s = settings
    text, sha = data.read_text(Path(s.text))
    adapter = None
    if s.from_model:
        from ..families import load_config

        affordable(load_config(Path(s.from_model) / "config.json"), s)
        cfg, raw, params = folder.load_params(Path(s.from_model))
        if s.seq_len > cfg.n_ctx:
            raise TrainError(f"--seq-len {s.seq_len:,} is beyond {Path(s.from_model).name}'s context of {cfg.n_ctx:,}",
                             f"use --seq-len {cfg.n_ctx} or less")  # fmt: skip
        tok = data.folder_tokenizer(Path(s.from_model))
        if s.lora:
            base = base_name or Path(s.from_model).name
            adapter = lora.new_adapter(cfg, params, s.lora, s.lora_alpha, tuple(s.lora_targets), s.seed, base)
            s.lora_targets = list(adapter.targets)  # the family's default when none were given
    else:
        if s.tokenizer == "char":
            tok = data.char_tokenizer(text, s.context)
        else:
            tok = data.bpe_tokenizer(text, int(s.tokenizer[4:]), s.context)
        cfg = new_gpt2_config(s, tok.vocab_size)
        affordable(cfg, s)
        raw, params = None, init_gpt2(cfg, np.random.default_rng(s.seed))
    run = Run(s, out, tok, sha, cfg, raw, params, adapter)
    if s.from_model and not adapter:
        run.extra_files = folder.companions(Path(s.from_model))
    run.load_data(text)
    return run


def affordable(cfg: ModelConfig, s: Settings) -> cost.Cost:
    """The run's cost; a ResourceError with the figures, before anything is allocated, if its steps
    would need more memory than this process can have."""
    c = cost.estimate(cfg, s.batch_size, s.seq_len, s.optimizer, bool(s.lora))
    check_allocation(
        c.nbytes, f"training {shown_number(c.parameters)} parameters ({cfg.n_layer:,} layers, d_model {cfg.d_model:,}) "
        f"on batches of {s.batch_size:,} x {s.seq_len:,}",
        "use fewer --layers, a smaller --d-model, --batch-size or --seq-len",
    )  # fmt: skip
    return c


def new_gpt2_config(s: Settings, vocab_size: int) -> ModelConfig:
    raw = {"model_type": "gpt2", "n_embd": s.d_model, "n_head": s.heads, "n_layer": s.layers, "n_positions": s.context,
           "vocab_size": vocab_size, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
    return config_from_hf(raw)


def resume(out: Path, text_path: Path, steps: int | None, eval_every: int | None) -> Run:
    """The run saved in `out`, to go on from its last checkpoint with its own settings (only the
    number of steps and --eval-every may change)."""
    state, opt = folder.read_state(out)
    fields = {f.name for f in dataclasses.fields(Settings)}
    s = Settings(**{k: v for k, v in state["settings"].items() if k in fields})
    s.betas = tuple(s.betas)
    s.text = str(text_path)
    s.steps = steps if steps is not None else s.steps
    s.eval_every = eval_every if eval_every is not None else s.eval_every
    text, sha = data.read_text(text_path)
    if sha != state.get("text_sha256"):
        raise TrainError(f"{text_path} is not the text the run in {out} was trained on",
                         "resume with the same TEXT_FILE, or start a new run")  # fmt: skip
    from ..families import load_config

    if s.lora:
        return _resume_adapter(out, s, state, opt, sha, text)
    affordable(load_config(Path(out) / "config.json"), s)
    cfg, raw, params = folder.load_params(out)
    shape = (cfg.n_layer, cfg.d_model, cfg.n_head, cfg.n_ctx)
    if not s.from_model and shape != (s.layers, s.d_model, s.heads, s.context):
        raise TrainError(
            f"{out}: the weights are {cfg.n_layer} layers, d_model {cfg.d_model}, {cfg.n_head} heads, "
            f"context {cfg.n_ctx}; "
            f"{folder.STATE} says {s.layers}, {s.d_model}, {s.heads}, {s.context}",
            "the files come from different runs: start the run again without --resume",
        )  # fmt: skip
    if s.seq_len > cfg.n_ctx:
        raise TrainError(f"{out}: {folder.STATE} trains on {s.seq_len:,} tokens, beyond the context of {cfg.n_ctx:,}",
                         "start the run again without --resume")  # fmt: skip
    folder.check_optimizer(opt, params, s.optimizer, out, state["step"])
    run = Run(s, out, data.folder_tokenizer(out), sha, cfg, raw if s.from_model else None, params)
    run.extra_files = folder.companions(out) if s.from_model else {}
    return _continued(run, state, opt, text)


def _resume_adapter(out: Path, s: Settings, state: dict, opt, sha: str, text: str) -> Run:
    """--resume of a --lora run: the base from its folder, the adapter and AdamW's moments from `out`."""
    from ..families import load_config

    base = Path(s.from_model or "")
    if not (base / "config.json").is_file():
        raise TrainError(f"{out} adapts {base}, which is no longer a model folder",
                         "restore the base model, or start a new run")  # fmt: skip
    affordable(load_config(base / "config.json"), s)
    cfg, raw, params = folder.load_params(base)
    adapter = lora.load(out, cfg, params)
    if (adapter.rank, adapter.alpha, sorted(adapter.targets)) != (s.lora, s.lora_alpha, sorted(s.lora_targets)):
        raise TrainError(f"{out}: {lora.CONFIG} and {folder.STATE} describe different adapters",
                         "the files come from different runs: start the run again without --resume")  # fmt: skip
    folder.check_optimizer(opt, adapter.tensors, s.optimizer, out, state["step"])
    run = Run(s, out, data.folder_tokenizer(base), sha, cfg, raw, params, adapter)
    return _continued(run, state, opt, text)


def _continued(run: Run, state: dict, opt, text: str) -> Run:
    """`run` put back where its checkpoint left it: the step, AdamW's moments, the losses, the time."""
    run.optimizer.load_state(opt, state["step"])
    run.step, run.saved_step, run.begun_at = state["step"], state["step"], state["step"]
    # (none in checkpoints written before it was kept)
    run.commands_before = [(int(c[0]), str(c[1])) for c in state.get("commands", [])]
    run.losses = list(state["losses"])
    run.evals = [tuple(e) for e in state["evals"]]
    run.seconds_before = float(state["seconds"])
    run.threads_before = state.get("threads")
    run.load_data(text)
    return run
