"""Write the small random checkpoints and the reference outputs the tests compare tfcli against.

    python tools/make_references.py          # rewrites tests/data/
    python tools/make_references.py --shipped  # only the references of the models in weights/

Uses PyTorch and transformers (test/tool-only dependencies). Each checkpoint is saved with
`save_pretrained`, exactly as users' checkpoints are, and the reference is transformers' own forward
pass in float32: logits for several prompt lengths (one past 64 tokens), a greedy continuation and
the eager attention weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data"
CORPUS = (
    "The quick brown fox jumps over the lazy dog. To be, or not to be, that is the question. "
    "今天天气很好。床前明月光，疑是地上霜。Attention is all you need 🙂 café naïve. "
) * 20
PROMPTS = {"one": [5], "short": [17, 3, 250, 99, 42, 7, 7], "long": [int(i) for i in np.random.default_rng(0).integers(0, 300, 70)]}
GREEDY_PROMPT = [17, 3, 250, 99]
GREEDY_TOKENS = 40


def byte_level_tokenizer(vocab_size: int) -> Tokenizer:
    """A small byte-level BPE (the GPT-2 scheme), so that multi-byte characters span several tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer)
    return tok


def save(model, tok: Tokenizer, name: str, extra: dict) -> None:
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))
    ref = {}
    with torch.no_grad():
        for key, ids in PROMPTS.items():
            out = model(torch.tensor([ids]), output_attentions=True)
            ref[f"logits_{key}"] = out.logits[0].numpy()  # [T, V]
            ref[f"attn_{key}"] = torch.stack(out.attentions)[:, 0].numpy()  # [L, H, T, T]
            ref[f"ids_{key}"] = np.array(ids)
        gen = model.generate(
            torch.tensor([GREEDY_PROMPT]), max_new_tokens=GREEDY_TOKENS, do_sample=False,
            eos_token_id=None, pad_token_id=0, min_new_tokens=GREEDY_TOKENS,
        )
    ref["greedy_prompt"] = np.array(GREEDY_PROMPT)
    ref["greedy"] = gen[0, len(GREEDY_PROMPT):].numpy()
    np.savez_compressed(OUT / f"{name}.reference.npz", **ref)
    (folder / "REFERENCE.md").write_text(
        f"Random {extra['what']} written by tools/make_references.py (seed {extra['seed']}); "
        "the reference outputs are in ../" + f"{name}.reference.npz.\n"
    )


# Prompts for the shipped models: each model's own kind of text.
SHIPPED_PROMPTS = {"shakespeare": "ROMEO:\nWhat light through yonder window breaks?", "tang": "床前明月光，"}


def shipped_references() -> None:
    """transformers' logits and greedy continuation for each model in weights/ (float16 weights,
    computed in float32 by both sides)."""
    from transformers import GPT2LMHeadModel

    for name, text in SHIPPED_PROMPTS.items():
        folder = ROOT / "weights" / name
        if not (folder / "model.safetensors").exists():
            print(f"skipping {name}: {folder} has no weights yet")
            continue
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        ids = tok.encode(text, add_special_tokens=False).ids
        model = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
            gen = model.generate(
                torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS, min_new_tokens=GREEDY_TOKENS, do_sample=False,
                eos_token_id=None, pad_token_id=0,
            )
        np.savez_compressed(
            OUT / f"{name}.reference.npz",
            ids=np.array(ids),
            logits=out.logits[0].numpy(),  # [T, V]
            attn=torch.stack(out.attentions)[:, 0].numpy(),  # [L, H, T, T]
            greedy=gen[0, len(ids):].numpy(),
        )
        print(f"{name}: {len(ids)} prompt tokens, greedy {tok.decode(gen[0, len(ids):].tolist())!r}")


def main() -> None:
    import sys

    if "--shipped" in sys.argv:
        shipped_references()
        return
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tok = byte_level_tokenizer(300)
    vocab = tok.get_vocab_size()

    torch.manual_seed(0)
    # A larger init than the default 0.02 spreads the logits, so greedy choices are never near-ties.
    gcfg = GPT2Config(
        vocab_size=vocab, n_positions=128, n_embd=64, n_layer=3, n_head=4, initializer_range=0.2,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager",
    )
    gpt2 = GPT2LMHeadModel(gcfg).eval()
    save(gpt2, tok, "tiny-gpt2", {"what": "GPT-2 (3 layers, 4 heads, d 64)", "seed": 0})

    torch.manual_seed(1)
    # Grouped-query attention (6 query heads on 2 kv heads), untied embeddings, an odd layer count.
    lcfg = LlamaConfig(
        vocab_size=vocab, hidden_size=96, intermediate_size=160, num_hidden_layers=3,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.1,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager",
    )
    llama = LlamaForCausalLM(lcfg).eval()
    # Random norms instead of ones, so that a missing scale would be caught.
    with torch.no_grad():
        for name, p in llama.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    save(llama, tok, "tiny-llama", {"what": "Llama (3 layers, 6 query / 2 kv heads, d 96, untied)", "seed": 1})
    print(json.dumps({"vocab": vocab, "out": str(OUT)}))
    shipped_references()


if __name__ == "__main__":
    main()
