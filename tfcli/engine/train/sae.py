"""A sparse autoencoder (SAE): a wide ReLU layer that rewrites a residual-stream vector as a few
directions out of many, trained here with a backward pass written by hand.

    x_c   = x - b_dec                      # [B, D]  the decoder bias is subtracted before encoding
    h     = x_c @ W_enc + b_enc            # [B, D] @ [D, N] -> [B, N]   pre-activations
    f     = relu(h)            (relu)      # [B, N]  or: the k largest of h kept, the rest 0 (topk)
    x_hat = f @ W_dec + b_dec              # [B, N] @ [N, D] -> [B, D]   the reconstruction

The names and orientations are SAELens's (W_enc [D, N], b_enc [N], W_dec [N, D], b_dec [D]): a
row W_dec[i] is feature i's direction in the residual stream, f[:, i] how much of it each vector holds.

Two ways to make f sparse, each as its paper trains it:

relu  Anthropic's April 2024 update ("Circuits Updates"): an L1 penalty on the activations, each
      weighted by its decoder row's norm, so that shrinking f while growing W_dec buys nothing:
          loss = mean_b |x - x_hat|^2 + l1 * mean_b sum_i f_i |W_dec[i]|
      (the decoder norms are free; W_dec starts with rows of norm 0.1 and W_enc = W_dec^T).
topk  OpenAI's "Scaling and evaluating sparse autoencoders" (Gao et al. 2024): keep the k largest
      pre-activations per vector (then a ReLU), no L1 at all; decoder rows kept at unit norm after
      each step. Features that have not fired for a while (dead) get a second, auxiliary task:
      reconstruct the error e = x - x_hat (held fixed) from the k_aux largest dead pre-activations,
          loss = mean_b |x - x_hat|^2 + aux * mean_b |e - f_aux @ W_dec|^2     (aux = 1/32)
      which pulls dead features back toward where the data is.

`loss_and_grads` returns the loss and every gradient; tests/test_features.py holds both kinds (and
the auxiliary term) equal to torch autograd, and one AdamW step (optim.py) equal to torch.optim's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .model import Params

KINDS = ("relu", "topk")
AUX_COEF = 1 / 32  # OpenAI's alpha for the auxiliary loss
RELU_INIT_NORM = 0.1  # Anthropic: decoder rows start with random directions and norm 0.1


def init_params(d: int, n: int, kind: str, rng: np.random.Generator) -> Params:
    """W_dec rows in random directions (norm 0.1 for relu, 1 for topk), W_enc = W_dec^T, biases 0."""
    w_dec = rng.standard_normal((n, d)).astype(np.float32)  # [N, D]
    w_dec *= np.float32(RELU_INIT_NORM if kind == "relu" else 1.0) / np.linalg.norm(w_dec, axis=1, keepdims=True)
    return {
        "W_enc": np.ascontiguousarray(w_dec.T),  # [D, N]
        "b_enc": np.zeros(n, np.float32),  # [N]
        "W_dec": w_dec,  # [N, D]
        "b_dec": np.zeros(d, np.float32),  # [D]
    }


def top_k_mask(h: np.ndarray, k: int) -> np.ndarray:
    """[B, N] -> bool [B, N]: True at the k largest values of each row that are also positive."""
    if k >= h.shape[1]:
        return h > 0
    idx = np.argpartition(h, h.shape[1] - k, axis=1)[:, -k:]  # [B, k] the k largest, in no order
    mask = np.zeros(h.shape, dtype=bool)
    np.put_along_axis(mask, idx, True, axis=1)
    return mask & (h > 0)


@dataclass
class SAE:
    params: Params  # W_enc [D, N], b_enc [N], W_dec [N, D], b_dec [D]
    kind: str = "relu"  # relu or topk
    k: int = 0  # topk: features kept per vector
    l1: float = 5.0  # relu: the sparsity coefficient
    k_aux: int = 0  # topk: dead features asked to explain the error (0: D / 2, OpenAI's choice)
    dead: np.ndarray | None = field(default=None, repr=False)  # topk: bool [N], the features counted dead now

    @property
    def d(self) -> int:
        return self.params["W_enc"].shape[0]

    @property
    def n(self) -> int:
        return self.params["W_enc"].shape[1]

    def preacts(self, x: np.ndarray) -> np.ndarray:
        p = self.params
        return (x - p["b_dec"]) @ p["W_enc"] + p["b_enc"]  # [B, D] @ [D, N] -> [B, N]

    def activate(self, h: np.ndarray) -> np.ndarray:
        """Pre-activations [B, N] -> features [B, N]."""
        if self.kind == "topk":
            return np.where(top_k_mask(h, self.k), h, np.float32(0))  # [B, N]
        return np.maximum(h, np.float32(0))  # [B, N]

    def encode(self, x: np.ndarray) -> np.ndarray:
        return self.activate(self.preacts(x))  # [B, D] -> [B, N]

    def decode(self, f: np.ndarray) -> np.ndarray:
        return f @ self.params["W_dec"] + self.params["b_dec"]  # [B, N] @ [N, D] -> [B, D]

    def loss_and_grads(self, x: np.ndarray) -> tuple[dict[str, float], Params, np.ndarray]:
        """x [B, D] -> ({"loss", "mse", "sparsity" or "aux"}, gradients by name, features f [B, N])."""
        p, b = self.params, x.shape[0]
        xc = x - p["b_dec"]  # [B, D]
        h = xc @ p["W_enc"] + p["b_enc"]  # [B, N]
        on = top_k_mask(h, self.k) if self.kind == "topk" else h > 0  # [B, N] where f = h
        f = np.where(on, h, np.float32(0))  # [B, N]
        x_hat = f @ p["W_dec"] + p["b_dec"]  # [B, D]
        r = x_hat - x  # [B, D]
        mse = float(np.vdot(r, r)) / b
        d_xhat = np.float32(2 / b) * r  # [B, D]
        d_f = d_xhat @ p["W_dec"].T  # [B, D] @ [D, N] -> [B, N]
        g_dec = f.T @ d_xhat  # [N, B] @ [B, D] -> [N, D]
        parts = {"mse": mse}
        if self.kind == "relu":
            norms = np.linalg.norm(p["W_dec"], axis=1)  # [N]
            total = f.sum(axis=0)  # [N]
            parts["sparsity"] = self.l1 * float(total @ norms) / b
            d_f += np.float32(self.l1 / b) * norms  # d/df of l1 * mean_b sum_i f_i |W_dec[i]|
            # d/dW_dec of |W_dec[i]|
            g_dec += (np.float32(self.l1 / b) * total / np.maximum(norms, 1e-12))[:, None] * p["W_dec"]
        else:
            d_h_aux = self._aux(h, -r, parts, g_dec)  # [B, N] or None
        d_h = np.where(on, d_f, np.float32(0))  # [B, N]
        if self.kind == "topk" and d_h_aux is not None:
            d_h += d_h_aux
        g_benc = d_h.sum(axis=0)  # [N]
        grads = {
            "W_enc": xc.T @ d_h,  # [D, B] @ [B, N] -> [D, N]
            "b_enc": g_benc,
            "W_dec": g_dec,
            # b_dec adds to x_hat and is subtracted from x: sum_b d_xhat - sum_b d_xc, d_xc = d_h @ W_enc^T
            "b_dec": d_xhat.sum(axis=0) - p["W_enc"] @ g_benc,  # [D] - [D, N] @ [N] -> [D]
        }
        parts["loss"] = parts["mse"] + parts.get("sparsity", 0.0) + parts.get("aux", 0.0)
        return parts, grads, f

    def _aux(self, h: np.ndarray, e: np.ndarray, parts: dict, g_dec: np.ndarray) -> np.ndarray | None:
        """TopK's auxiliary loss: the error e [B, D] (a constant) from the k_aux largest dead
        pre-activations. Adds to g_dec in place; returns its gradient on h [B, N], or None."""
        dead = self.dead
        if dead is None or not dead.any():
            parts["aux"] = 0.0
            return None
        b, p = h.shape[0], self.params
        k_aux = min(int(dead.sum()), self.k_aux or max(1, self.d // 2))
        h_dead = np.where(dead, h, -np.inf).astype(np.float32)  # [B, N] only dead features compete
        on = top_k_mask(h_dead, k_aux)  # [B, N]
        f_aux = np.where(on, h, np.float32(0))  # [B, N]
        r_aux = f_aux @ p["W_dec"] - e  # [B, N] @ [N, D] - [B, D] -> [B, D]; no b_dec: e holds none
        parts["aux"] = AUX_COEF * float(np.vdot(r_aux, r_aux)) / b
        d = np.float32(2 * AUX_COEF / b) * r_aux  # [B, D]
        g_dec += f_aux.T @ d  # [N, B] @ [B, D] -> [N, D]
        return np.where(on, d @ p["W_dec"].T, np.float32(0))  # [B, N]

    def after_step(self) -> None:
        """TopK keeps the decoder rows at unit norm (OpenAI), so that a feature's size is its activation."""
        if self.kind == "topk":
            w = self.params["W_dec"]
            w /= np.maximum(np.linalg.norm(w, axis=1, keepdims=True), np.float32(1e-12))


def unit_rows(w_dec: np.ndarray) -> np.ndarray:
    """Each feature's direction with norm 1: [N, D]."""
    return w_dec / np.maximum(np.linalg.norm(w_dec, axis=1, keepdims=True), np.float32(1e-12))


@dataclass
class Settings:
    """What fixes an SAE run, as `tfcli features train` names it (saved in cfg.json's "tfcli")."""

    kind: str = "relu"
    n: int = 2048  # features
    k: int = 32  # topk
    l1: float = 5.0  # relu
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0  # SAEs are trained without it (Anthropic, OpenAI, SAELens)
    warmup: int = 20
    lr_schedule: str = "constant"
    clip: float = 1.0  # Anthropic clips the gradient norm to 1
    batch_size: int = 1024
    steps: int = 1000
    seed: int = 0
    dead_tokens: int = 100_000  # topk: a feature silent for this many vectors is dead (OpenAI: 10M)


class Trainer:
    """AdamW steps on batches of vectors. Vectors are scaled by one number so that their mean norm
    is sqrt(D) (Anthropic's update; SAELens's "expected_average_only_in"), which makes --l1 and
    --lr mean the same at every layer and in every model; `export` folds the scale back into the
    weights, so the saved SAE reads and writes the model's own vectors."""

    def __init__(self, s: Settings, first: np.ndarray):
        from .optim import AdamW

        self.s = s
        d = first.shape[1]
        self.scale = float(np.sqrt(d) / max(float(np.linalg.norm(first, axis=1).mean()), 1e-12))
        params = init_params(d, s.n, s.kind, np.random.default_rng(s.seed))
        # [D]: start at the data's centre
        params["b_dec"] = (first.mean(axis=0) * np.float32(self.scale)).astype(np.float32)
        self.sae = SAE(params, s.kind, s.k, s.l1)
        self.optimizer = AdamW(tuple(s.betas), s.eps, s.weight_decay)
        self.step = 0
        self.silent = np.zeros(s.n, dtype=np.int64)  # [N] vectors seen since each feature last fired
        self.fired = np.zeros(s.n, dtype=np.int64)  # [N] in the last batch (for progress)

    def train_step(self, x: np.ndarray) -> dict[str, float]:
        """One AdamW step on x [B, D] (the model's units). Returns the loss and its parts."""
        import math

        from .optim import clip_by_global_norm, lr_at

        s, sae = self.s, self.sae
        xs = x * np.float32(self.scale)  # [B, D]
        if s.kind == "relu":  # Anthropic: the L1 coefficient rises linearly over the first 5% of steps
            sae.l1 = s.l1 * min(1.0, (self.step + 1) / max(1, s.steps // 20))
        else:
            sae.dead = self.silent >= s.dead_tokens
        parts, grads, f = sae.loss_and_grads(xs)
        if not math.isfinite(parts["loss"]):
            from . import TrainError

            raise TrainError(f"the SAE's loss became {parts['loss']} at step {self.step + 1:,}", "lower --lr")
        clip_by_global_norm(grads, s.clip)
        self.optimizer.step(sae.params, grads, lr_at(self.step, s.lr, s.warmup, s.steps, s.lr_schedule))
        sae.after_step()
        on = (f > 0).sum(axis=0)  # [N]
        self.silent = np.where(on > 0, 0, self.silent + len(x))
        parts["l0"] = float(on.sum()) / len(x)
        parts["dead"] = float((self.silent >= s.dead_tokens).mean())
        self.step += 1
        return parts

    def export(self) -> Params:
        """The SAE in the model's units: f(x) is the same, x_hat comes back divided by the scale."""
        p, c = self.sae.params, np.float32(self.scale)
        return {"W_enc": p["W_enc"] * c, "b_enc": p["b_enc"].copy(), "W_dec": p["W_dec"] / c, "b_dec": p["b_dec"] / c}
