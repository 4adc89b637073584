"""tfcli train against PyTorch: the same GPT-2, the same weights, the same batches, in one run.

    python benchmarks/train.py [--layers 4 --d-model 128 --heads 4 --context 128 --batch-size 16]
                               [--steps 5 --rounds 4 --threads 2 --text ../shared/data/tinyshakespeare.txt]

Each round times --steps training steps (forward, backward, clipping, AdamW) of tfcli's NumPy
trainer, then the same number with PyTorch (transformers' GPT2LMHeadModel, torch.optim.AdamW),
alternating, so that a busy machine slows both alike. Both start from the same weights and see the
same batches. Printed: tokens per second of each in each round, the medians and their ratio, and
the losses of the last step (they should agree: the two are the same computation).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# not benchmarks/ itself: its kernels.py would shadow the package transformers imports by that name
sys.path = [str(HERE.parent)] + [q for q in sys.path if Path(q or ".").resolve() != HERE]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", default="/work/shared/data/tinyshakespeare.txt")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=5, help="steps per round and engine")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    import numpy as np
    import torch

    from tfcli.engine.threads import set_blas_threads
    from tfcli.engine.train.card import cpu_name
    from tfcli.engine.train.run import Settings, start

    set_blas_threads(a.threads)
    torch.set_num_threads(a.threads)
    s = Settings(text=a.text, layers=a.layers, d_model=a.d_model, heads=a.heads, context=a.context, tokenizer="char", from_model=None,
                 dropout=0.0, optimizer="adamw", lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, warmup=0, lr_schedule="constant",
                 clip=1.0, batch_size=a.batch_size, seq_len=a.context, steps=10**6, seed=1337, val_fraction=0.1, data_order="random", eval_every=10**6)  # fmt: skip
    run = start(s, Path("/nonexistent-benchmark-output"))  # never saved
    model, opt = torch_twin(run, torch)
    tokens = a.steps * a.batch_size * a.context
    ours, theirs, t_step = [], [], 0
    for r in range(a.rounds + 1):  # round 0 warms both up and is not counted
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss_np = run.train_step()
        t1 = time.perf_counter()
        for k in range(a.steps):
            x, y = batch_of(run, t_step + k, torch)
            loss_t = torch_step(model, opt, x, y, torch)
        t_step += a.steps
        t2 = time.perf_counter()
        if r:
            ours.append(tokens / (t1 - t0))
            theirs.append(tokens / (t2 - t1))
            print(f"round {r}: tfcli {ours[-1]:,.0f} tok/s, PyTorch {theirs[-1]:,.0f} tok/s, ratio {ours[-1] / theirs[-1]:.2f}", flush=True)
    n = sum(v.size for v in run.model.params.values())
    print(f"\n{cpu_name()}, {a.threads} threads; GPT-2 {a.layers} x {a.d_model} ({a.heads} heads), "
          f"context {a.context}, batch {a.batch_size}, {n:,} parameters; torch {torch.__version__}, numpy {np.__version__}")  # fmt: skip
    print(f"tfcli   median {statistics.median(ours):,.0f} tok/s (range {min(ours):,.0f}-{max(ours):,.0f})")
    print(f"PyTorch median {statistics.median(theirs):,.0f} tok/s (range {min(theirs):,.0f}-{max(theirs):,.0f})")
    print(f"ratio   {statistics.median(ours) / statistics.median(theirs):.2f} (tfcli / PyTorch, medians)")
    print(f"last losses: tfcli {loss_np:.4f}, PyTorch {loss_t:.4f}")


def torch_twin(run, torch):
    """transformers' GPT-2 with tfcli's initial weights, and AdamW with the same groups."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = run.config
    model = GPT2LMHeadModel(GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.n_ctx, n_embd=cfg.d_model, n_layer=cfg.n_layer,
                                       n_head=cfg.n_head, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0))  # fmt: skip
    model.load_state_dict({k: torch.tensor(v) for k, v in run.model.params.items()}, strict=False)
    model.train()
    named = list(model.named_parameters())
    groups = [{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": 0.1}, {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}]
    return model, torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), eps=1e-8)


def batch_of(run, step, torch):
    from tfcli.engine.train import data

    s = run.settings
    x, y = data.batch(run.split.train, step, s.batch_size, s.seq_len, s.data_order, s.seed)
    return torch.tensor(x), torch.tensor(y)


def torch_step(model, opt, x, y, torch) -> float:
    loss = torch.nn.functional.cross_entropy(model(x).logits.flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


if __name__ == "__main__":
    main()
