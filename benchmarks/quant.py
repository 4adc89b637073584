"""tfcli against llama.cpp on the same GGUF files: decode and prefill speed, in turn, same run.

Each measurement is a fresh process (load, a prompt pass of --prompt tokens, then --new decode
steps, greedy), tfcli and llama.cpp alternating for --rounds rounds, so that a machine whose speed
drifts slows both alike. Prints tokens per second (median and range) and the ratio tfcli / llama.cpp
of each round's pair. Both use the same number of threads (--threads, default 2).

llama.cpp runs through llama-cpp-python in a Python of its own (--llama-python: a venv where it is
installed, never a dependency of tfcli). A folder (float32 safetensors) is compared with an F32
GGUF of the same weights given as FOLDER=FILE.gguf.

    python benchmarks/quant.py SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf --llama-python /opt/lcp/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TEXT = "The history of the river is the history of the city that grew along its banks. " * 200

TFCLI = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import tfcli
import numpy as np
from tfcli.engine.generate import Session
from tfcli.engine.threads import set_blas_threads
from tfcli.store import load
path, n_prompt, n_new, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
set_blas_threads(threads)
t0 = time.perf_counter()
lm = load(path)
try:
    from tfcli.engine.fast import on_kernels
except ImportError:  # a tree from before the textbook was sealed from the fast room
    on_kernels = lambda model: model.on_kernels
if on_kernels(lm.model):  # as the CLI does
    try:
        from tfcli.engine.fast import prepare
    except ImportError:  # a tree from before the fast room's rooms
        from tfcli.engine.fast.quantized import prepare
    prepare()
load_s = time.perf_counter() - t0
ids = lm.tokenizer.encode(sys.argv[6])[:n_prompt]
s = Session(lm.model, capacity=n_prompt + n_new + 8, workers=threads)
s.prefill(ids[:8]); s.cache.reset(0); s.tokens = []  # warm: first-call costs (RoPE tables, kernels' first run) out of the timing
t0 = time.perf_counter()
logits, _ = s.prefill(ids)
prefill_s = time.perf_counter() - t0
tok = int(np.argmax(logits))
t0 = time.perf_counter()
for _ in range(n_new):
    tok = int(np.argmax(s.step(tok)))
decode_s = time.perf_counter() - t0
print(json.dumps({"load": load_s, "prefill": n_prompt / prefill_s, "decode": n_new / decode_s}))
"""

LLAMA = r"""
import json, sys, time
import numpy as np
import llama_cpp
from llama_cpp import Llama
path, n_prompt, n_new, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
t0 = time.perf_counter()
llm = Llama(model_path=path, n_ctx=n_prompt + n_new + 8, n_threads=threads, n_threads_batch=threads, n_batch=512, n_ubatch=512, verbose=False)
load_s = time.perf_counter() - t0
ids = llm.tokenize(sys.argv[6].encode())[:n_prompt]
llm.eval(ids[:8]); llm.reset()  # warm
t0 = time.perf_counter()
llm.eval(ids)
prefill_s = time.perf_counter() - t0
last = lambda: int(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(llm.n_vocab(),)).argmax())
tok = last()
t0 = time.perf_counter()
for _ in range(n_new):
    llm.eval([tok])
    tok = last()
decode_s = time.perf_counter() - t0
print(json.dumps({"load": load_s, "prefill": n_prompt / prefill_s, "decode": n_new / decode_s}))
"""


TRANSFORMERS = r"""
import json, sys, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path, n_prompt, n_new, threads = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
t0 = time.perf_counter()
kw = {"gguf_file": path.name} if path.suffix == ".gguf" else {}
where = path.parent if path.suffix == ".gguf" else path
model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kw).eval()  # a GGUF is dequantized to float32
tok = AutoTokenizer.from_pretrained(where, **kw)
load_s = time.perf_counter() - t0
ids = torch.tensor([tok(sys.argv[6])["input_ids"][:n_prompt]])
with torch.no_grad():
    model(ids[:, :8])
    t0 = time.perf_counter()
    out = model(ids, use_cache=True)
    prefill_s = time.perf_counter() - t0
    past, tok_id = out.past_key_values, out.logits[0, -1].argmax().view(1, 1)
    t0 = time.perf_counter()
    for _ in range(n_new):
        out = model(tok_id, past_key_values=past, use_cache=True)
        past, tok_id = out.past_key_values, out.logits[0, -1].argmax().view(1, 1)
    decode_s = time.perf_counter() - t0
print(json.dumps({"load": load_s, "prefill": ids.shape[1] / prefill_s, "decode": n_new / decode_s}))
"""


def run(python: str, code: str, model: str, args, env: dict | None = None) -> dict:
    cmd = [python, "-c", code, str(ROOT), model, str(args.prompt), str(args.new), str(args.threads), TEXT]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{model}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def line(name: str, values: list[float]) -> str:
    return f"{name} {statistics.median(values):8.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="GGUF files; FOLDER=FILE.gguf compares a folder (tfcli) with a GGUF (llama.cpp)")
    ap.add_argument("--llama-python", required=True, help="a Python with llama-cpp-python installed")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--numpy", action="store_true", help="also tfcli with TFCLI_KERNELS=numpy (the textbook products)")
    ap.add_argument("--transformers", action="store_true", help="also transformers reading the same file (a GGUF dequantized to float32)")
    args = ap.parse_args()
    print(f"CPU: {cpu()}, {os.cpu_count()} cores; {args.threads} threads; prompt {args.prompt} tokens, {args.new} new; {args.rounds} rounds")
    for spec in args.files:
        ours, theirs = spec.split("=", 1) if "=" in spec else (spec, spec)
        results: dict[str, list[dict]] = {"tfcli": [], "llama.cpp": []} | ({"tfcli numpy": []} if args.numpy else {}) | ({"transformers": []} if args.transformers else {})
        for _ in range(args.rounds):
            results["tfcli"].append(run(sys.executable, TFCLI, ours, args))
            results["llama.cpp"].append(run(args.llama_python, LLAMA, theirs, args))
            if args.numpy:
                results["tfcli numpy"].append(run(sys.executable, TFCLI, ours, args, {"TFCLI_KERNELS": "numpy"}))
            if args.transformers:
                results["transformers"].append(run(sys.executable, TRANSFORMERS, ours, args))
        print(f"\n{Path(ours).name}" + (f" (llama.cpp: {Path(theirs).name})" if ours != theirs else ""))
        for what in ("decode", "prefill"):
            print(f"  {what} tok/s:")
            for name, rows in results.items():
                print("    " + line(f"{name:12}", [r[what] for r in rows]))
            ratios = [a[what] / b[what] for a, b in zip(results["tfcli"], results["llama.cpp"])]
            print(f"    tfcli / llama.cpp {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
