"""Write a 1.5B-class Q4_K_M GGUF: Qwen2.5-1.5B's shape, random weights, llama.cpp's Q4_K_M mix.

No 1.5B model is at hand, so this writes one of the same shape for speed and accuracy checks
(`benchmarks/quant.py`, `benchmarks/perplexity.py`): 28 layers, width 1,536, 12 query heads and 2
key/value heads of 128, an MLP of 8,960, a vocabulary of 151,936 tied to the unembedding, q/k/v
biases, RoPE base 1e6. Each matrix is Q4_K or Q6_K where llama.cpp's `llama-quantize ... Q4_K_M`
puts them (llama-quant.cpp, `llama_tensor_get_type`): Q6_K for the tied embedding (it is the
output), for attn_v and ffn_down of the layers `use_more_bits` picks (the first and last eighth,
and every third one between), Q4_K elsewhere; norms and biases F32. About 1.1 GB, as the real
Qwen2.5-1.5B-Instruct Q4_K_M file.

gguf-py cannot quantize to the k-quants, so the blocks are random bytes with small float16 scales
(the weights stay in a range whose activations neither vanish nor overflow float16); the
tokenizer is SmolLM2's (byte-level BPE), its 49,152 tokens padded with unused ones to 151,936.

    python benchmarks/qwen15_file.py /tmp/qwen15-q4_k_m.gguf [--smollm2 PATH_TO_ITS_GGUF]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

LAYERS, D, F, HEADS, KV_HEADS, VOCAB = 28, 1536, 8960, 12, 2, 151936
DH = D // HEADS
SMOLLM2 = Path.home() / ".cache/tfcli/models/smollm2/model.gguf"


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's choice of the layers whose attn_v and ffn_down get Q6_K in Q4_K_M."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tokenizer(path: Path) -> tuple[list[str], list[int], list[str]]:
    """SmolLM2's tokens, types and merges, padded with never-produced tokens to VOCAB."""
    import gguf

    r = gguf.GGUFReader(str(path))

    def strings(key: str) -> list[str]:
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    pad = VOCAB - len(tokens)
    return tokens + [f"<|unused_{i}|>" for i in range(pad)], types + [5] * pad, merges  # 5 = UNUSED


def write(out: Path, smollm2: Path = SMOLLM2, seed: int = 0) -> Path:
    import gguf
    from gguf import GGMLQuantizationType as Q

    rng = np.random.default_rng(seed)
    # float16 scales (d, and dmin for Q4_K): Q4_K weights up to about d*63*15, Q6_K up to d*128*32.
    scales = {Q.Q4_K: ((0, 4), (2e-4, 6e-4)), Q.Q6_K: ((208, 210), (2e-5, 6e-5))}

    def blocks(rows: int, cols: int, qtype) -> np.ndarray:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        data = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)  # [blocks, bytes]
        (a, b), (lo, hi) = scales[qtype]
        data[:, a:b] = rng.uniform(lo, hi, (len(data), (b - a) // 2)).astype(np.float16).view(np.uint8)
        return data.reshape(rows, -1)  # [rows, row bytes]

    tokens, types, merges = tokenizer(smollm2)
    w = gguf.GGUFWriter(str(out), "qwen2")
    w.add_name("random Qwen2.5-1.5B shape")
    w.add_block_count(LAYERS)
    w.add_context_length(32768)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    w.add_tensor("token_embd.weight", blocks(VOCAB, D, Q.Q6_K), raw_dtype=Q.Q6_K)  # tied: it is the output
    w.add_tensor("output_norm.weight", np.ones(D, np.float32))
    kv = KV_HEADS * DH
    for i in range(LAYERS):
        more = Q.Q6_K if use_more_bits(i, LAYERS) else Q.Q4_K
        for name, rows, cols, qtype in (("attn_q", D, D, Q.Q4_K), ("attn_k", kv, D, Q.Q4_K), ("attn_v", kv, D, more),
                                        ("attn_output", D, D, Q.Q4_K), ("ffn_gate", F, D, Q.Q4_K), ("ffn_up", F, D, Q.Q4_K),
                                        ("ffn_down", D, F, more)):  # fmt: skip
            w.add_tensor(f"blk.{i}.{name}.weight", blocks(rows, cols, qtype), raw_dtype=qtype)
        for name, n in (("attn_q", D), ("attn_k", kv), ("attn_v", kv)):
            w.add_tensor(f"blk.{i}.{name}.bias", rng.normal(0, 0.02, n).astype(np.float32))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(D, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(D, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="where to write the GGUF")
    ap.add_argument("--smollm2", type=Path, default=SMOLLM2, help="the SmolLM2 GGUF whose tokenizer it borrows")
    args = ap.parse_args()
    write(args.out, args.smollm2)
    print(f"{args.out}: {args.out.stat().st_size / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
