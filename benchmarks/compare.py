"""tfcli against transformers, measured in one run on this machine.

    python benchmarks/compare.py MODEL [--new-tokens 128] [--runs 3] [--prompts 16,128,512]

MODEL is a model name ('smollm2', 'shakespeare': found as tfcli finds it, in weights/ or under
$TFCLI_HOME/models) or a model folder. It is not pulled: 'tfcli pull NAME' first.

Each engine runs in its own subprocess (so that peak memory is its own), on the same float32
weights, the same prompt tokens, greedy, with a KV cache and batch 1. Printed: load time, load to
first token, prefill tokens/s for each prompt length, decode tokens/s (median of --runs), peak
resident memory, each as a ratio tfcli / transformers; then the roofline: the machine's read
bandwidth, the bandwidth-bound decode ceiling (weight bytes / bandwidth) and tfcli's decode as a
fraction of it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


# --------------------------------------------------------------------------------------------
# Children: one engine each, reporting JSON on stdout.


def child_tfcli(folder: str, prompts: list[int], new_tokens: int, runs: int, threads: int) -> dict:
    from tfcli.engine import bench
    from tfcli.engine.threads import set_blas_threads

    set_blas_threads(threads)

    r = bench.run(Path(folder), prompts, new_tokens, runs, roofline=False, workers=threads)
    return {
        "load_s": r.load_s, "first_token_s": r.first_token_s, "prefill_tps": r.prefill_tps, "decode_tps": r.decode_tps,
        "decode_all": r.decode_runs, "peak_rss": r.peak_rss, "kv_bytes": r.kv_bytes, "weight_bytes": r.weight_bytes,
    }


def child_transformers(folder: str, prompts: list[int], new_tokens: int, runs: int, threads: int) -> dict:
    from tfcli.engine.bench import peak_rss, prompt_ids

    t0 = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    t_import = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    load_s = time.perf_counter() - t_import
    vocab = model.config.vocab_size
    with torch.inference_mode():
        model(torch.tensor([prompt_ids(vocab, 4)])).logits[0, -1].argmax()
        first_token_s = time.perf_counter() - t0

        prefill = {}
        for n in prompts:
            times = []
            for _ in range(runs):
                ids = torch.tensor([prompt_ids(vocab, n)])
                t = time.perf_counter()
                model(ids, use_cache=True, logits_to_keep=1)
                times.append(time.perf_counter() - t)
            prefill[n] = n / statistics.median(times)

        decode = []
        for _ in range(runs):
            out = model(torch.tensor([prompt_ids(vocab, 16)]), use_cache=True, logits_to_keep=1)
            past, tok = out.past_key_values, out.logits[0, -1].argmax().view(1, 1)
            t = time.perf_counter()
            for _ in range(new_tokens):
                out = model(tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[0, -1].argmax().view(1, 1)
            decode.append(new_tokens / (time.perf_counter() - t))
    return {"load_s": load_s, "first_token_s": first_token_s, "prefill_tps": prefill, "decode_tps": statistics.median(decode), "decode_all": decode, "peak_rss": peak_rss()}


# --------------------------------------------------------------------------------------------


def run_child(engine: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", engine, args.model, "--new-tokens", str(args.new_tokens), "--runs", str(args.runs), "--prompts", args.prompts, "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if out.returncode != 0:
        sys.exit(f"{engine} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a model name (see 'tfcli models') or a model folder (float32 safetensors + config.json)")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--prompts", default="16,128,512")
    p.add_argument("--threads", type=int, default=None, help="threads for both engines (default: all cores; run on an idle machine)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown (for RESULTS.md)")
    args = p.parse_args()
    prompts = [int(x) for x in args.prompts.split(",")]
    if args.threads is None:
        from tfcli.engine.threads import available_cpus

        args.threads = available_cpus()
    if not args.child:
        from tfcli.engine.errors import TfcliError
        from tfcli.store.registry import resolve

        try:  # a name or a path, as -m takes it; the children get the folder
            args.model = str(resolve(args.model))
        except TfcliError as e:
            sys.exit(f"error: {e}")
    if args.child:
        fn = child_tfcli if args.child == "tfcli" else child_transformers
        print(json.dumps(fn(args.model, prompts, args.new_tokens, args.runs, args.threads)))
        return

    from tfcli.engine.bandwidth import measure_read_bandwidth
    from tfcli.numbers import size

    folder = Path(args.model)
    ours = run_child("tfcli", args)
    ref = run_child("transformers", args)
    bw = measure_read_bandwidth()  # last: the 1 GB it allocates must not be in the children's memory
    wbytes = ours["weight_bytes"]
    ceiling = bw / wbytes

    rows = [("model load (s)", ours["load_s"], ref["load_s"], "lower"), ("load to first token (s)", ours["first_token_s"], ref["first_token_s"], "lower")]
    for n in prompts:
        rows.append((f"prefill {n} tokens (tok/s)", ours["prefill_tps"][str(n)], ref["prefill_tps"][str(n)], "higher"))
    rows.append((f"decode {args.new_tokens} tokens (tok/s, median of {args.runs})", ours["decode_tps"], ref["decode_tps"], "higher"))
    rows.append(("peak resident memory", ours["peak_rss"], ref["peak_rss"], "lower"))

    def fmt(name, v):
        return size(v) if "memory" in name else f"{v:,.3f}" if "(s)" in name else f"{v:,.1f}"

    lines = []
    header = ["measure", "tfcli", "transformers", "tfcli / transformers"]
    lines.append(header)
    for name, a, b, better in rows:
        ratio = a / b
        lines.append([name, fmt(name, a), fmt(name, b), f"{ratio:.2f}x" + (" (lower is better)" if better == "lower" else "")])
    widths = [max(len(r[i]) for r in lines) for i in range(4)]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {args.threads} threads for both engines, load average {os.getloadavg()[0]:.2f}")
    print(f"model: {folder} ({size(wbytes)} of float32 weights)")
    for i, r in enumerate(lines):
        if args.markdown:
            print("| " + " | ".join(r) + " |")
            if i == 0:
                print("|" + "|".join("---" for _ in r) + "|")
        else:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print()
    print(f"read bandwidth (matrix-vector product over 1 GB, 3 runs, best): {size(bw)}/s")
    print(f"decode ceiling = weight bytes / bandwidth = {size(wbytes)} / {size(bw)}/s = {ceiling:.1f} tok/s")
    print(f"tfcli decode = {ours['decode_tps']:.1f} tok/s = {ours['decode_tps'] / ceiling:.0%} of the ceiling")
    mem_budget = 1.2 * wbytes + ours["kv_bytes"]
    print(f"tfcli peak memory {size(ours['peak_rss'])} vs 1.2 x weights + KV cache = {size(mem_budget)}")


if __name__ == "__main__":
    main()
