"""Train a small character-level GPT-2 on a text corpus and write a Hugging Face model folder.

This is how the models in `weights/` were made. PyTorch and transformers are needed here only:
tfcli itself never imports them. The model is a plain `transformers.GPT2LMHeadModel` (gelu_new,
pre-LN, tied embeddings), so the folder is loadable by transformers by construction, and tfcli's
NumPy engine can be checked against it.

Two corpus formats:
  plain   one continuous text (tinyshakespeare); validation = the last --val-fraction of it,
          the nanoGPT convention.
  poems   blocks separated by a blank line (a title line, then the poem's lines); the stream is
          <|endoftext|> poem <|endoftext|> poem ... so the model learns where a poem ends;
          validation = every --val-every-th poem, held out whole.

The output folder holds config.json, generation_config.json, model.safetensors (float16),
tokenizer.json, tokenizer_config.json and a model card README.md with the measured figures.

Example, a one-minute smoke test (the exact commands of the shipped models are in their cards):
  python tools/train.py --data ../shared/data/tinyshakespeare.txt --out /tmp/tiny \\
      --n-layer 2 --n-embd 64 --n-head 4 --context 64 --steps 100 --warmup 10 --prompt ROMEO:
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

EOT = "<|endoftext|>"  # id 0: separates documents, and is bos/eos (the GPT-2 convention)
UNK = "<unk>"  # id 1: any character not seen in the corpus
SPECIALS = [EOT, UNK]


# ---------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class Corpus:
    chars: list[str]  # the character vocabulary, sorted; token id = index + len(SPECIALS)
    train_ids: torch.Tensor  # [N_train] int64 token stream
    val_ids: torch.Tensor  # [N_val] int64 token stream
    val_text: str  # the validation stream as text (EOT spelled out), for tokenizer checks
    n_chars: int  # characters in the corpus file
    n_docs: tuple[int, int] | None  # (train, val) poems, for the poems format
    sha256: str
    first_lines: torch.Tensor | None = None  # [N_poems] offsets in train_ids of each poem's first line (after its title)


def load_corpus(path: Path, fmt: str, val_fraction: float, val_every: int, mark_titles: bool = False) -> Corpus:
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    # The vocabulary is every character of the whole corpus (nanoGPT's convention): ids stay
    # the same whatever the split, and <unk> is only for text from outside the corpus.
    chars = sorted(set(text))
    stoi = {c: i + len(SPECIALS) for i, c in enumerate(chars)}
    eot = SPECIALS.index(EOT)

    def encode(s: str) -> list[int]:
        return [stoi[c] for c in s]

    if fmt == "plain":
        cut = int(len(text) * (1 - val_fraction))
        train_text, val_text = text[:cut], text[cut:]
        train, val = encode(train_text), encode(val_text)
        n_docs = None
        first_lines = []
    else:
        poems = [b.strip("\n") for b in text.split("\n\n") if b.strip()]
        if mark_titles:
            poems = [_marked(p) for p in poems]
        train_poems = [p for i, p in enumerate(poems) if i % val_every != val_every - 1]
        val_poems = [p for i, p in enumerate(poems) if i % val_every == val_every - 1]

        first_lines: list[int] = []

        def stream(ps: list[str], starts: list[int] | None = None) -> list[int]:  # EOT p1 EOT p2 ... EOT pN EOT
            ids = [eot]
            for p in ps:
                title, _, rest = p.partition("\n")
                if starts is not None and rest:
                    starts.append(len(ids) + len(title) + 1)  # one token per character: the title, its newline
                ids += encode(p) + [eot]
            return ids

        train, val = stream(train_poems, first_lines), stream(val_poems)
        val_text = EOT + "".join(p + EOT for p in val_poems)
        n_docs = (len(train_poems), len(val_poems))
    return Corpus(
        chars=chars,
        train_ids=torch.tensor(train, dtype=torch.long),
        val_ids=torch.tensor(val, dtype=torch.long),
        val_text=val_text,
        n_chars=len(text),
        n_docs=n_docs,
        sha256=hashlib.sha256(raw).hexdigest(),
        first_lines=torch.tensor(first_lines, dtype=torch.long) if fmt == "poems" else None,
    )


def _marked(poem: str) -> str:
    """The poem with its title line in 《》, the corpus's own mark for a title (《全唐诗》), so that a
    bare first line reads as verse: without the mark a short line after <|endoftext|> is as often a
    title as a first line, and a model given 床前明月光 may end it as a title with 。 and stop."""
    title, sep, rest = poem.partition("\n")
    return f"《{title}》{sep}{rest}"


def build_tokenizer(chars: list[str]) -> Tokenizer:
    """One token per character: specials at ids 0, 1, then the sorted characters.

    A BPE model with no merges never joins characters, and with no normalizer and no
    pre-tokenizer every character (spaces and newlines included) is its own token, so
    decode(encode(s)) == s. Fuse() concatenates the pieces instead of joining them with spaces.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({c: i + len(SPECIALS) for i, c in enumerate(chars)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.decoder = decoders.Fuse()
    return tok


def unigram_baseline(train_ids: torch.Tensor, val_ids: torch.Tensor, vocab_size: int) -> float:
    """Cross-entropy (nats/token) of val under train's token frequencies, add-one smoothed."""
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    logp = torch.log(counts / counts.sum())  # [V]
    return float(-logp[val_ids].mean())


def random_batch(ids: torch.Tensor, batch: int, ctx: int, gen: torch.Generator, first_lines: torch.Tensor | None = None, fraction: float = 0.0):
    """Random windows of ctx + 1 tokens: inputs [B, T] and next-token targets [B, T].

    With `fraction`, that share of the windows starts at a poem's first line instead, so that the
    model also learns what a text that *starts* with a bare line is: a poem's first line (a random
    window that starts with five characters is as often the second half of a line, ending in 。).
    """
    starts = torch.randint(len(ids) - ctx - 1, (batch,), generator=gen)
    n_first = round(batch * fraction) if first_lines is not None and len(first_lines) else 0
    if n_first:
        usable = first_lines[first_lines < len(ids) - ctx - 1]
        starts[:n_first] = usable[torch.randint(len(usable), (n_first,), generator=gen)]
    rows = torch.stack([ids[s : s + ctx + 1] for s in starts.tolist()])  # [B, T+1]
    return rows[:, :-1], rows[:, 1:]


# ---------------------------------------------------------------------------------------------
# model and training


def lr_at(step: int, args) -> float:
    """Linear warmup to --lr, then cosine decay to --lr * --min-lr-ratio at the last step."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    floor = args.lr * args.min_lr_ratio
    return floor + 0.5 * (args.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, args) -> torch.optim.AdamW:
    # Weight decay on matrices only, not on biases and LayerNorm gains (as nanoGPT does).
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.99))


def loss_on(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x).logits  # [B, T, V]
    return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())


@torch.no_grad()
def estimate_loss(model, batches) -> float:
    model.eval()
    loss = sum(float(loss_on(model, x, y)) for x, y in batches) / len(batches)
    model.train()
    return loss


@torch.no_grad()
def full_loss(model, ids: torch.Tensor, ctx: int, batch: int = 32) -> float:
    """Mean loss over every token of a split: non-overlapping windows of ctx tokens."""
    model.eval()
    n = (len(ids) - 1) // ctx
    x_all = ids[: n * ctx].view(n, ctx)  # [n, T]
    y_all = ids[1 : n * ctx + 1].view(n, ctx)  # [n, T]
    total = 0.0
    for i in range(0, n, batch):
        x, y = x_all[i : i + batch], y_all[i : i + batch]
        total += float(loss_on(model, x, y)) * len(x)
    model.train()
    return total / n


def fixed_batches(ids: torch.Tensor, n: int, batch: int, ctx: int, seed: int):
    """The same n batches at every evaluation, so the logged curve is not sampling noise."""
    gen = torch.Generator().manual_seed(seed)
    return [random_batch(ids, batch, ctx, gen) for _ in range(n)]


def train(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    corpus = load_corpus(Path(args.data), args.format, args.val_fraction, args.val_every, args.mark_titles)
    vocab_size = len(SPECIALS) + len(corpus.chars)
    eot = SPECIALS.index(EOT)
    print(
        f"corpus {args.data}: {corpus.n_chars:,} chars, vocab {vocab_size:,}, "
        f"train {len(corpus.train_ids):,} tokens, val {len(corpus.val_ids):,} tokens"
        + (f", poems train/val {corpus.n_docs[0]:,}/{corpus.n_docs[1]:,}" if corpus.n_docs else ""),
        flush=True,
    )
    baseline = unigram_baseline(corpus.train_ids, corpus.val_ids, vocab_size)
    print(f"unigram baseline on val: {baseline:.4f} nats/token", flush=True)

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=args.context,
        n_embd=args.n_embd,
        n_layer=args.n_layer,
        n_head=args.n_head,
        resid_pdrop=args.dropout,
        embd_pdrop=args.dropout,
        attn_pdrop=args.dropout,
        bos_token_id=eot,
        eos_token_id=eot,
    )
    if args.init_from:
        # Fine-tuning: the same shape and the same vocabulary as the folder, or the ids would mean
        # other characters than the ones the weights learned.
        model = GPT2LMHeadModel.from_pretrained(args.init_from, dtype=torch.float32)
        old = Tokenizer.from_file(str(Path(args.init_from) / "tokenizer.json")).get_vocab()
        require(old == build_tokenizer(corpus.chars).get_vocab(), f"{args.init_from}'s vocabulary is this corpus's")
        config = model.config
        for key, value in (("n_layer", args.n_layer), ("n_embd", args.n_embd), ("n_head", args.n_head), ("n_positions", args.context)):
            require(getattr(config, key) == value, f"--{key.replace('_', '-')} {value} is {args.init_from}'s ({getattr(config, key)})")
    else:
        model = GPT2LMHeadModel(config)
    n_params = sum(p.numel() for p in model.parameters())  # tied lm_head counted once
    print(
        f"model: n_layer {args.n_layer}, n_embd {args.n_embd}, n_head {args.n_head}, "
        f"n_positions {args.context}, {n_params:,} parameters",
        flush=True,
    )
    optimizer = make_optimizer(model, args)
    gen = torch.Generator().manual_seed(args.seed)  # batch sampling, independent of init
    train_eval = fixed_batches(corpus.train_ids, args.eval_batches, args.batch_size, args.context, args.seed + 1)
    val_eval = fixed_batches(corpus.val_ids, args.eval_batches, args.batch_size, args.context, args.seed + 2)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)

    t0 = time.perf_counter()
    t_log, history = t0, []
    model.train()
    for step in range(args.steps):
        if step % args.eval_every == 0 and step > 0:
            with autocast:
                tl, vl = estimate_loss(model, train_eval), estimate_loss(model, val_eval)
            history.append((step, tl, vl))
            print(f"eval step {step}: train {tl:.4f} val {vl:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        x, y = random_batch(corpus.train_ids, args.batch_size, args.context, gen, corpus.first_lines, args.first_line_windows)
        with autocast:
            loss = loss_on(model, x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        if (step + 1) % args.log_every == 0:
            now = time.perf_counter()
            ms = (now - t_log) * 1000 / args.log_every
            tok_s = args.batch_size * args.context / (ms / 1000)
            print(
                f"step {step + 1}/{args.steps}: loss {loss.item():.4f} lr {lr_at(step, args):.2e} "
                f"{ms:.0f} ms/step {tok_s:,.0f} tok/s elapsed {now - t0:.0f} s",
                flush=True,
            )
            t_log = now
    train_seconds = time.perf_counter() - t0

    # Final figures in float32, without autocast: these are the numbers of the model card.
    train_loss = estimate_loss(model, train_eval)
    val_loss = estimate_loss(model, val_eval)
    history.append((args.steps, train_loss, val_loss))
    print(
        f"final: train {train_loss:.4f} val {val_loss:.4f} (fixed batches), "
        f"baseline {baseline:.4f}, {train_seconds:.0f} s",
        flush=True,
    )
    if not args.save:
        return
    val_full = full_loss(model, corpus.val_ids, args.context)
    print(f"val {val_full:.4f} (whole split)", flush=True)

    # -- write the folder ---------------------------------------------------------------------
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(corpus.chars)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": EOT,
                "eos_token": EOT,
                "unk_token": UNK,
                "model_max_length": args.context,
                # transformers would otherwise "clean up" spaces before punctuation on decode
                "clean_up_tokenization_spaces": False,
            },
            indent=2,
        )
        + "\n"
    )
    model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=args.temperature,
        top_k=args.top_k,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
    )
    model.half().save_pretrained(out, safe_serialization=True)

    checks = verify(out, corpus, val_eval, val_loss, n_params)
    sample = sample_text(out, args.prompt, args.seed)
    print(f"sample from {args.prompt!r}:\n{sample}\n", flush=True)
    write_card(out, args, corpus, config, n_params, baseline, train_loss, val_loss, val_full,
               train_seconds, history, checks)
    print(f"wrote {out}", flush=True)


# ---------------------------------------------------------------------------------------------
# checks on the written folder


def require(ok: bool, what: str) -> None:
    if not ok:  # not assert: these checks must also run under python -O
        raise SystemExit(f"check failed: {what}")


def verify(out: Path, corpus: Corpus, val_eval, val_loss: float, n_params: int) -> dict:
    """Reload everything from disk and check it matches what was trained."""
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = tok.encode(corpus.val_text).ids
    require(ids == corpus.val_ids.tolist(), "tokenizer ids equal the training stream's")
    plain_val = corpus.val_text.replace(EOT, "")
    enc = tok.encode(plain_val).ids
    require(len(enc) == len(plain_val), "one token per character")
    require(tok.decode(enc) == plain_val, "decode(encode(val)) == val")
    odd = "a☃\n b"  # a character outside the vocabulary must become <unk>, not crash
    unk = tok.token_to_id(UNK)
    want = [unk if tok.token_to_id(c) is None else tok.token_to_id(c) for c in "a☃\n b"]  # the Tang corpus has no "a"
    require(tok.encode(odd).ids == want and want[1] == unk, "unknown characters map to <unk>")

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        stored = {k: f.get_slice(k).get_shape() for k in f.keys()}
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    n_stored = sum(math.prod(s) for s in stored.values())
    require(n_stored == n_params, f"safetensors holds {n_stored:,} values = {n_params:,} parameters")

    reloaded = GPT2LMHeadModel.from_pretrained(out, dtype=torch.float32)
    reloaded_val = estimate_loss(reloaded, val_eval)
    delta = abs(reloaded_val - val_loss)
    require(delta < 5e-3, f"reloaded val loss {reloaded_val:.4f} ~ trained {val_loss:.4f}")
    print(
        f"verified: tokenizer round trip on {len(plain_val):,} chars, {len(stored)} tensors "
        f"({sorted(dtypes)}) = {n_stored:,} values, reloaded val {reloaded_val:.4f} "
        f"(fp32 {val_loss:.4f}, delta {delta:.1e})",
        flush=True,
    )
    return {"n_tensors": len(stored), "reloaded_val": reloaded_val, "delta": delta}


def ids_of(tok: Tokenizer, pieces: list[str]) -> list[int]:
    return [tok.token_to_id(p) for p in pieces]


def sample_text(out: Path, prompt: str, seed: int) -> str:
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    model = GPT2LMHeadModel.from_pretrained(out, dtype=torch.float32).eval()
    torch.manual_seed(seed)
    x = torch.tensor([tok.encode(prompt).ids])
    n = model.config.n_positions - x.shape[1]  # transformers cannot go past n_positions
    y = model.generate(x, max_new_tokens=n)  # sampling defaults from generation_config.json
    return tok.decode(y[0].tolist(), skip_special_tokens=False)


# ---------------------------------------------------------------------------------------------
# model card


def write_card(out, args, corpus, config, n_params, baseline, train_loss, val_loss, val_full,
               seconds, history, checks) -> None:
    vocab = config.vocab_size
    tokens_seen = args.steps * args.batch_size * args.context
    if corpus.n_docs:
        split = (
            f"every {args.val_every}th poem held out whole: {corpus.n_docs[0]:,} train poems "
            f"({len(corpus.train_ids):,} tokens), {corpus.n_docs[1]:,} validation poems "
            f"({len(corpus.val_ids):,} tokens); `{EOT}` before, between and after poems"
        )
    else:
        split = (
            f"the last {args.val_fraction:.0%} of the text (nanoGPT convention): "
            f"{len(corpus.train_ids):,} train, {len(corpus.val_ids):,} validation characters"
        )
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    cpu = platform.machine()
    if Path("/proc/cpuinfo").exists():
        names = [l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")]
        cpu = names[0] if names else cpu
    curve = "\n".join(f"| {s} | {t:.4f} | {v:.4f} |" for s, t, v in history)
    card = f"""# {out.name}: a character-level GPT-2 trained on {Path(args.data).name}

A small GPT-2 (the `transformers` `GPT2LMHeadModel` architecture: pre-LN, `gelu_new`, learned
positions, tied input/output embeddings) trained {"from " + args.init_from + " (fine-tuned)" if args.init_from else "from scratch"} by `tools/train.py`, one token per
character. It ships with tfcli as an embedded model.

## Corpus

{args.source or Path(args.data).name}

- file: `{Path(args.data).name}`, {corpus.n_chars:,} characters, sha256 `{corpus.sha256}`
- split: {split}

## Tokenizer

Character level, vocabulary {vocab:,}: id 0 `{EOT}` (bos/eos), id 1 `<unk>` (characters outside
the corpus), then the corpus's {len(corpus.chars):,} distinct characters in code point order. A BPE
model with no merges, no normalizer, no pre-tokenizer and a `Fuse` decoder, so
`decode(encode(s)) == s` and `len(encode(s)) == len(s)` for any text.

## Shape

| n_layer | n_embd | n_head | n_positions | vocab | parameters |
|---|---|---|---|---|---|
| {config.n_layer} | {config.n_embd} | {config.n_head} | {config.n_positions} | {vocab:,} | {n_params:,} |

Parameters are the values stored in `model.safetensors` ({checks['n_tensors']} tensors, float16),
the tied `lm_head` counted once; the embedding matrix alone is {vocab * config.n_embd:,}.

## Training

| | |
|---|---|
| steps | {args.steps:,} |
| batch | {args.batch_size} sequences x {args.context} tokens |
| tokens seen | {tokens_seen:,} ({tokens_seen / len(corpus.train_ids):.1f} epochs of the train split) |
| optimizer | AdamW, betas (0.9, 0.99), weight decay {args.weight_decay} on matrices only, gradient clipping {args.grad_clip} |
| learning rate | linear warmup over {args.warmup} steps to {args.lr:g}, cosine decay to {args.lr * args.min_lr_ratio:g} |
| dropout | {args.dropout} |
| precision | {"bfloat16 autocast, float32 master weights" if args.bf16 else "float32"}; stored as float16 |
| seed | {args.seed} |
| wall time | {seconds / 60:.1f} min on {args.threads} CPU thread{'s' if args.threads > 1 else ''} ({cpu}, {os.cpu_count()} cores shared with other work), PyTorch {torch.__version__} |

## Results (nats per token; a token is a character{" or the poem separator" if corpus.n_docs else ""})

| | loss |
|---|---|
| train (final, {args.eval_batches} fixed batches) | {train_loss:.4f} |
| validation (final, {args.eval_batches} fixed batches) | {val_loss:.4f} |
| validation (whole split, windows of {args.context}) | {val_full:.4f} |
| character unigram baseline on validation (train frequencies, add-one) | {baseline:.4f} |

Reloaded from the float16 file, the validation loss is {checks['reloaded_val']:.4f}
(difference {checks['delta']:.1e}).

<details><summary>learning curve</summary>

| step | train | val |
|---|---|---|
{curve}

</details>

## Command

```
{command}
```

## What I tried

## Samples

(samples produced by tfcli generate are added here)
"""
    (out / "README.md").write_text(card)


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="the corpus, a UTF-8 text file")
    p.add_argument("--format", choices=["plain", "poems"], default="plain")
    p.add_argument("--out", help="the model folder to write")
    p.add_argument("--source", default="", help="a sentence for the model card: where the corpus comes from, its licence")
    p.add_argument("--val-fraction", type=float, default=0.1, help="plain: the last fraction is validation")
    p.add_argument("--val-every", type=int, default=20, help="poems: every n-th poem is validation")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--context", type=int, default=256, help="training context = n_positions")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward pass")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--prompt", default="\n", help="a sample is printed from this prompt at the end")
    p.add_argument("--temperature", type=float, default=0.8, help="written to generation_config.json")
    p.add_argument("--top-k", type=int, default=40, help="written to generation_config.json")
    p.add_argument("--mark-titles", action="store_true", help="poems: write each title line as 《title》")
    p.add_argument("--first-line-windows", type=float, default=0.0, help="poems: this share of each batch starts at a poem's first line")
    p.add_argument("--init-from", help="fine-tune: start from this model folder's weights (same shape and vocabulary)")
    p.add_argument("--no-save", dest="save", action="store_false", help="exploration: train and report only")
    args = p.parse_args(argv)
    if args.save and not args.out:
        p.error("--out is required unless --no-save")
    if args.n_embd % args.n_head:
        p.error("--n-embd must be divisible by --n-head")
    return args


if __name__ == "__main__":
    train(parse_args())
