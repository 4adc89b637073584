"""Write tests/data/gemma3.reference.npz: what transformers computes for Gemma 3 270M (the Q4_K_M GGUF
that `tfcli pull gemma3` fetches), for tests/test_gemma3.py.

    python tools/make_gemma3_reference.py FOLDER    # a pulled gemma3 folder (model.gguf, tokenizer.json)

transformers reads the GGUF itself (`from_pretrained(dir, gguf_file=...)`, its own dequantization);
the passes run in float32. Token ids are tfcli's (its tokenizer is checked against llama.cpp's test
vectors elsewhere). Stored per prompt: ids, the top-16 logits (ids, values) and the log-sum-exp at
every position; a 24-token greedy continuation; and for the first prompt the logit lens: the
top-5 probabilities at every layer and position (the hidden states through the final norm and lm_head).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "gemma3.reference.npz"
PROMPTS = {"plain": "The capital of France is", "code": "def fibonacci(n):\n    ", "zh": "今天天气很好，我们"}
GREEDY_TOKENS, TOP = 24, 16


def main(folder: Path) -> None:
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(ROOT))
    from tfcli.engine.tokenizer import Tokenizer
    from tfcli.engine.config import ModelConfig  # noqa: F401  (tfcli importable: the ids are its)

    tok = Tokenizer(folder / "tokenizer.json")
    bos = json.loads((folder / "config.json").read_text())["bos_token_id"]
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file="model.gguf", dtype=torch.float32).eval()
    out: dict[str, np.ndarray] = {}
    for key, text in PROMPTS.items():
        ids = [bos] + tok.encode(text)
        with torch.no_grad():
            result = model(torch.tensor([ids]), output_hidden_states=key == "plain")
            logits = result.logits[0].double().numpy()  # [T, V]
            greedy = model.generate(torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS, do_sample=False)[0, len(ids):].numpy()
        top = np.argsort(-logits, axis=-1)[:, :TOP]  # [T, 16]
        out[f"ids_{key}"] = np.array(ids)
        out[f"top_ids_{key}"] = top
        out[f"top_logits_{key}"] = np.take_along_axis(logits, top, axis=-1).astype(np.float32)
        out[f"lse_{key}"] = (np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)).astype(np.float32)
        out[f"greedy_{key}"] = greedy
        if key == "plain":
            lens = []
            with torch.no_grad():
                for i, h in enumerate(result.hidden_states):
                    normed = h[0] if i == len(result.hidden_states) - 1 else model.model.norm(h[0])  # the last one is already normed
                    lens.append(torch.softmax(model.lm_head(normed).double(), -1).numpy())
            lens = np.stack(lens)  # [L+1, T, V]
            out["lens_top_probs"] = -np.sort(-lens, axis=-1)[:, :, :5].astype(np.float32)  # [L+1, T, 5]
    np.savez_compressed(OUT, **out, prompts=json.dumps(PROMPTS))
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
