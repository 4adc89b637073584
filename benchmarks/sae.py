"""SAE training steps of `tfcli features train` against PyTorch: the same shapes, the same start,
the same batches, in one run.

    python benchmarks/sae.py [--d 256 --n 2048 --batch 1024 --kind relu --steps 10 --rounds 4 --threads 2]

Each round times --steps steps (the loss, its gradients, clipping, AdamW, and for topk the decoder
renormalised) of tfcli's NumPy trainer (engine/train/sae.py, gradients written by hand), then the
same number with PyTorch (the same loss written with torch ops, autograd, torch.optim.AdamW), in
turn, so that a busy machine slows both alike. Printed: steps per second of each in each round,
the medians, their ratio, and the last losses (they should agree closely: the same computation).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def torch_step(t, opt, x, kind: str, k: int, l1: float, dead):
    import torch

    h = (x - t["b_dec"]) @ t["W_enc"] + t["b_enc"]
    if kind == "relu":
        f = torch.relu(h)
        x_hat = f @ t["W_dec"] + t["b_dec"]
        loss = ((x_hat - x) ** 2).sum() / len(x) + l1 * (f * t["W_dec"].norm(dim=1)).sum() / len(x)
    else:
        top = torch.topk(h, k, dim=1)
        f = torch.zeros_like(h).scatter(1, top.indices, torch.relu(top.values))
        x_hat = f @ t["W_dec"] + t["b_dec"]
        loss = ((x_hat - x) ** 2).sum() / len(x)
        if dead.any():
            e = (x - x_hat).detach()
            top_aux = torch.topk(torch.where(dead, h, torch.tensor(-torch.inf)), min(int(dead.sum()), x.shape[1] // 2), dim=1)
            f_aux = torch.zeros_like(h).scatter(1, top_aux.indices, torch.relu(top_aux.values))
            loss = loss + ((f_aux @ t["W_dec"] - e) ** 2).sum() / len(x) / 32
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(t.values()), 1.0)
    opt.step()
    if kind == "topk":
        with torch.no_grad():
            t["W_dec"] /= t["W_dec"].norm(dim=1, keepdim=True)
    return loss.detach().item()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--kind", default="relu", choices=["relu", "topk"])
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    import numpy as np
    import torch

    from tfcli.engine.threads import set_blas_threads
    from tfcli.engine.train.optim import AdamW, clip_by_global_norm
    from tfcli.engine.train.sae import SAE, init_params

    set_blas_threads(a.threads)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((a.batch, a.d)).astype(np.float32) for _ in range(a.steps)]
    params = init_params(a.d, a.n, a.kind, rng)
    dead = np.zeros(a.n, bool)
    dead[: a.n // 4] = a.kind == "topk"  # a quarter dead: the auxiliary loss runs in both
    ours = SAE({k: v.copy() for k, v in params.items()}, a.kind, a.k, 5.0, dead=dead)
    opt = AdamW((0.9, 0.999), 1e-8, 0.0)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    topt = torch.optim.AdamW(t.values(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    tdead, tbatches = torch.tensor(dead), [torch.tensor(x) for x in batches]

    def run_ours():
        for x in batches:
            parts, grads, _ = ours.loss_and_grads(x)
            clip_by_global_norm(grads, 1.0)
            opt.step(ours.params, grads, 1e-4)
            ours.after_step()
        return parts["loss"]

    def run_torch():
        for x in tbatches:
            loss = torch_step(t, topt, x, a.kind, a.k, 5.0, tdead)
        return loss

    print(f"{platform.processor() or platform.machine()}, {a.threads} threads; D {a.d}, N {a.n}, batch {a.batch}, {a.kind}" + (f" k {a.k}" if a.kind == "topk" else ""))
    ours_rates, torch_rates = [], []
    for r in range(a.rounds):
        t0 = time.perf_counter()
        l_ours = run_ours()
        t1 = time.perf_counter()
        l_torch = run_torch()
        t2 = time.perf_counter()
        ours_rates.append(a.steps / (t1 - t0))
        torch_rates.append(a.steps / (t2 - t1))
        print(f"round {r + 1}: tfcli {ours_rates[-1]:.2f} steps/s, torch {torch_rates[-1]:.2f} steps/s, ratio {ours_rates[-1] / torch_rates[-1]:.2f}")
    mo, mt = statistics.median(ours_rates), statistics.median(torch_rates)
    print(f"median: tfcli {mo:.2f} steps/s, torch {mt:.2f} steps/s, tfcli / torch = {mo / mt:.2f}")
    print(f"last loss: tfcli {l_ours:.5f}, torch {l_torch:.5f}")


if __name__ == "__main__":
    main()
