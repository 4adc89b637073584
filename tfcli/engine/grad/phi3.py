"""Phi-3's backward is Llama's (engine/families/phi3.py runs Llama's block); only its checkpoint
keeps Q, K, V as one qkv_proj and the gate and up projections as one gate_up_proj."""

from __future__ import annotations

import numpy as np

from .llama import LlamaBackward


class Phi3Backward(LlamaBackward):
    def attention_names(self, w: dict, i: int, a: str) -> dict[str, np.ndarray]:
        return {a + "qkv_proj.weight": w[f"layers.{i}.w_qkv"].T}  # [(H+2Hkv)*Dh, D]

    def mlp_names(self, w: dict, i: int, m: str) -> dict[str, np.ndarray]:
        return {m + "gate_up_proj.weight": w[f"layers.{i}.mlp.w_in"].T,
                m + "down_proj.weight": w[f"layers.{i}.mlp.w_out"].T}  # fmt: skip
