"""A LoRA step of `tfcli train --lora` against peft + PyTorch: the same base, the same adapter, the
same batches, in one run.

    python benchmarks/lora.py [--model smollm2] [--rank 8 --targets q,k,v,o --batch-size 4 --seq-len 128]
                              [--steps 3 --rounds 3 --threads 2 --text /work/shared/data/tinyshakespeare.txt]

--model is a float model folder, or a name or GGUF file that is first widened to a float32 folder
(tfcli convert), so that both sides train on the same weights. Each round times --steps LoRA steps
(forward, backward, clipping, AdamW on the adapter) of tfcli's NumPy trainer, then as many with
peft (PeftModel over transformers' model, torch.optim.AdamW), alternating, so that a busy machine
slows both alike. Both start from the same adapter (tfcli's, saved and loaded by peft). Printed:
tokens per second of each round, the medians and their ratio, the losses of the last step (they
should agree), the load average of the machine before and after, and the memory: tfcli's side
alone (measured before peft's model is loaded) and both.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# not benchmarks/ itself: its kernels.py would shadow the package transformers imports by that name
sys.path = [str(HERE.parent)] + [q for q in sys.path if Path(q or ".").resolve() != HERE]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--text", default="/work/shared/data/tinyshakespeare.txt")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--targets", default="q,k,v,o")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=3, help="steps per round and engine")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    import numpy as np
    import torch

    from tfcli.engine.threads import set_blas_threads
    from tfcli.engine.train import lora
    from tfcli.engine.train.card import cpu_name
    from tfcli.engine.train.run import Settings, start

    load_before = os.getloadavg()
    set_blas_threads(a.threads)
    torch.set_num_threads(a.threads)
    folder = float_folder(a.model)
    s = Settings(text=a.text, layers=0, d_model=0, heads=0, context=0, tokenizer="model", from_model=str(folder),
                 dropout=0.0, optimizer="adamw", lr=1e-4, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, warmup=0,
                 lr_schedule="constant", clip=1.0, batch_size=a.batch_size, seq_len=a.seq_len, steps=10**6, seed=1337,
                 val_fraction=0.1, data_order="random", eval_every=10**6, lora=a.rank, lora_alpha=2.0 * a.rank,
                 lora_targets=a.targets.split(","))  # fmt: skip
    run = start(s, Path("/nonexistent-benchmark-output"), base_name=folder.name)  # never saved
    step_peak, rss_ours = tfcli_memory(run)  # before peft's model exists: tfcli's alone
    with tempfile.TemporaryDirectory() as tmp:
        lora.save(Path(tmp), run.adapter)
        model, opt = peft_twin(folder, Path(tmp), torch)
    tokens = a.steps * a.batch_size * a.seq_len
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
            print(f"round {r}: tfcli {ours[-1]:,.3g} tok/s, peft {theirs[-1]:,.3g} tok/s, "
                  f"ratio {ours[-1] / theirs[-1]:.2f}", flush=True)  # fmt: skip
        else:
            print(f"warm-up: last losses tfcli {loss_np:.4f}, peft {loss_t:.4f}", flush=True)
    import peft

    n = sum(v.size for v in run.model.params.values())
    n_base = sum(v.size for v in run.model.base.values())
    print(f"\n{cpu_name()}, {a.threads} threads; {folder.name}: {n_base:,} frozen, LoRA rank {a.rank} on {a.targets}: "
          f"{n:,} trained; batch {a.batch_size} x {a.seq_len}; torch {torch.__version__}, peft {peft.__version__}, "
          f"numpy {np.__version__}")  # fmt: skip
    print(f"tfcli   median {statistics.median(ours):,.3g} tok/s (range {min(ours):,.3g}-{max(ours):,.3g})")
    print(f"peft    median {statistics.median(theirs):,.3g} tok/s (range {min(theirs):,.3g}-{max(theirs):,.3g})")
    print(f"ratio   {statistics.median(ours) / statistics.median(theirs):.2f} (tfcli / peft + PyTorch, medians)")
    print(f"last losses: tfcli {loss_np:.4f}, peft {loss_t:.4f} (same steps, same batches)")
    after = os.getloadavg()[0]
    print(f"load average before {load_before[0]:.2f}, after {after:.2f} (1 minute; {os.cpu_count()} cores)")
    print(f"memory: tfcli's side {rss_ours:,.0f} MB (the peak before peft's model was loaded; "
          f"torch imported), a step's own NumPy arrays at their peak {step_peak:,.0f} MB (tracemalloc); both sides "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")  # fmt: skip


def tfcli_memory(run) -> tuple[float, float]:
    """(MB) the peak of what one LoRA step allocates (gradient and tape: tracemalloc sees NumPy's
    arrays), and the process's peak resident memory after it. A step holds the batch's activations,
    never the text: a longer text costs its token ids (8 bytes a token), nothing more a step."""
    import tracemalloc

    from tfcli.engine.train import data

    s = run.settings
    x, y = data.batch(run.split.train, 0, s.batch_size, s.seq_len, s.data_order, s.seed)
    tracemalloc.start()
    try:
        run.model.loss_and_grads(x, y)  # no update: the timed rounds start from the same adapter
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def float_folder(model: str) -> Path:
    """A float32 model folder for `model`: itself, or its GGUF widened once into the temp folder."""
    from tfcli.store.gguf import convert as convert_gguf
    from tfcli.store.registry import resolve

    path = Path(model) if Path(model).exists() else resolve(model)
    if path.is_dir() and (path / "model.safetensors").is_file():
        return path
    gguf = path if path.is_file() else next(path.glob("*.gguf"))
    target = Path(tempfile.gettempdir()) / f"tfcli-bench-{path.stem if path.is_file() else path.name}"
    if not (target / "model.safetensors").is_file():
        convert_gguf(gguf, target, replace=True)
    return target


def peft_twin(folder: Path, adapter: Path, torch):
    """transformers' model of the folder under peft with tfcli's starting adapter; AdamW as tfcli's."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter, is_trainable=True).train()
    trained = [q for q in model.parameters() if q.requires_grad]
    return model, torch.optim.AdamW(trained, lr=1e-4, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)


def batch_of(run, step, torch):
    from tfcli.engine.train import data

    s = run.settings
    x, y = data.batch(run.split.train, step, s.batch_size, s.seq_len, s.data_order, s.seed)
    return torch.tensor(x), torch.tensor(y)


def torch_step(model, opt, x, y, torch) -> float:
    loss = torch.nn.functional.cross_entropy(model(x).logits.flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([q for q in model.parameters() if q.requires_grad], 1.0)
    opt.step()
    return loss.item()


if __name__ == "__main__":
    main()
