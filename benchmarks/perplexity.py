"""tfcli's perplexity against llama.cpp's own llama-perplexity, on the same file and text.

`llama-perplexity -c C` cuts the text's tokens into whole chunks of C and scores the second half of
each; `tfcli score --chunks C` does the same (engine/score.py), so the two perplexities compare.
For each GGUF file: llama-perplexity (its CPU backend for this CPU, ../shared/tools/llama.cpp/run),
tfcli on its compiled kernels, and tfcli with TFCLI_KERNELS=numpy (the textbook: every block
dequantized, float32 products), each a fresh process, all on --threads threads (tfcli's numbers move
with the thread count: BLAS sums attention in another order, and the 8-bit activations of the kernels
round some values the other way; llama.cpp's do not). Prints the perplexities and how far tfcli's
are from llama.cpp's and from each other; exits 1 if any is further than --tolerance (default 0.5%).
With --kv-f32, tfcli on its kernels once more with a float32 KV cache (--kv-type f32): the default
float16 cache's perplexity against it, held to --kv-tolerance (default 0.1%).

The text is the first --chars characters (default 20,000) of ../shared/data/tinyshakespeare.txt,
read at run time (or --text FILE).

    python benchmarks/perplexity.py                 # SmolLM2, Gemma 3, the 1.5B-class file
    python benchmarks/perplexity.py FILE.gguf --chunks 512 --no-numpy
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
MODELS = Path.home() / ".cache/tfcli/models"


def llama_perplexity(run: Path, path: Path, text: Path, chunks: int, threads: int) -> tuple[float, str]:
    """llama-perplexity's final estimate, and its CPU backend."""
    cmd = [str(run), "llama-perplexity", "-m", str(path), "-f", str(text), "-c", str(chunks), "-t", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    both = r.stdout + r.stderr
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", both)
    if r.returncode != 0 or not m:
        sys.exit(f"llama-perplexity {path.name}: {both.strip().splitlines()[-1] if both.strip() else r.returncode}")
    backend = next((line.split(":", 1)[1].strip() for line in r.stderr.splitlines() if "CPU backend" in line), "?")
    return float(m.group(1)), backend


def tfcli_perplexity(path: Path, text: Path, chunks: int, threads: int, numpy: bool = False,
                     kv_type: str | None = None) -> tuple[float, int]:
    """tfcli score --chunks: the perplexity and how many tokens it scored (its KV cache's numbers: kv_type)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TFCLI_THREADS=str(threads), **({"TFCLI_KERNELS": "numpy"} if numpy else {}))
    cmd = [sys.executable, "-m", "tfcli", "score", "-m", str(path), "--file", str(text), "--chunks", str(chunks), "--json"]
    cmd += ["--kv-type", kv_type] if kv_type else []
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"tfcli score {path.name}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    doc = json.loads(r.stdout)
    # from the tokens' log-probabilities (5 decimals each): the summary's perplexity has 4 significant digits
    scored = [t["logprob"] for t in doc["tokens"] if t["logprob"] is not None]
    return math.exp(-sum(scored) / len(scored)), doc["scored_tokens"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="GGUF files (default: SmolLM2, Gemma 3 and the 1.5B-class file of quant.py)")
    ap.add_argument("--text", type=Path, default=SHARED / "data/tinyshakespeare.txt")
    ap.add_argument("--chars", type=int, default=20_000, help="characters of the text to score (its start)")
    ap.add_argument("--chunks", type=int, default=512, help="llama-perplexity's -c and tfcli's --chunks")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.005, help="largest relative difference allowed (0.005: 0.5%%)")
    ap.add_argument("--no-numpy", action="store_true", help="skip the TFCLI_KERNELS=numpy run (slow on large files)")
    ap.add_argument("--kv-f32", action="store_true", help="also run the kernels with a float32 KV cache")
    ap.add_argument("--kv-tolerance", type=float, default=0.001, help="largest f16 / f32 KV difference (0.001: 0.1%%)")
    ap.add_argument("--llama", type=Path, default=SHARED / "tools/llama.cpp/run")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "tfcli-quant", help="where quant.py keeps the 1.5B-class file")
    args = ap.parse_args()
    files = args.files or [MODELS / "smollm2/model.gguf", MODELS / "gemma3/model.gguf", args.work / "qwen15-q4_k_m.gguf"]
    for f in files:
        if not f.is_file():
            sys.exit(f"{f}: no such file (benchmarks/qwen15_file.py writes the 1.5B-class one)")
    body = args.text.read_text(encoding="utf-8")[: args.chars]
    worst = kv_worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "text.txt"
        text.write_text(body, encoding="utf-8")
        print(f"{args.chars:,} characters of {args.text.name}; chunks of {args.chunks}; {args.threads} threads; load average "
              f"{os.getloadavg()[0]:.2f}")
        print("| file | llama-perplexity | tfcli (kernels) | tfcli (numpy) | kernels / llama.cpp | kernels / numpy "
              "| f16 / f32 KV |")
        print("|---|---|---|---|---|---|---|")
        for f in files:
            ref, backend = llama_perplexity(args.llama, f, text, args.chunks, args.threads)
            ours, scored = tfcli_perplexity(f, text, args.chunks, args.threads)
            plain = None if args.no_numpy else tfcli_perplexity(f, text, args.chunks, args.threads, numpy=True)[0]
            f32 = tfcli_perplexity(f, text, args.chunks, args.threads, kv_type="f32")[0] if args.kv_f32 else None
            d_kv = None if f32 is None else ours / f32 - 1
            kv_worst = max(kv_worst, abs(d_kv or 0.0))
            d_ref = ours / ref - 1
            d_plain = None if plain is None else ours / plain - 1
            worst = max(worst, abs(d_ref), abs(d_plain or 0.0))
            plain_cell = "-" if plain is None else f"{plain:.4f}"
            plain_diff = "-" if d_plain is None else f"{d_plain:+.3%}"
            print(f"| {f.name if f.parent.name not in ('smollm2', 'gemma3') else f.parent.name} | {ref:.4f} ({backend}) | {ours:.4f} "
                  f"({scored:,} tokens) | {plain_cell} | {d_ref:+.3%} | {plain_diff} | "
                  f"{'-' if d_kv is None else f'{d_kv:+.3%} ({f32:.4f})'} |", flush=True)
    print(f"largest difference {worst:.3%} (tolerance {args.tolerance:.1%}); f16 / f32 KV {kv_worst:.3%} (tolerance "
          f"{args.kv_tolerance:.1%}); load average {os.getloadavg()[0]:.2f}")
    sys.exit(0 if worst <= args.tolerance and kv_worst <= args.kv_tolerance else 1)


if __name__ == "__main__":
    main()
