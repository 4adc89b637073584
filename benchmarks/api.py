"""tfcli's run_with_cache against TransformerLens's, measured in turn in one run on this machine.

    python benchmarks/api.py [MODEL] [--tokens 512] [--rounds 3] [--runs 3] [--threads N] [--reference FOLDER]

MODEL is a model name or folder as tfcli.load takes it (default smollm2: its Q4_1 GGUF, run in
place; 'tfcli pull smollm2' first, TFCLI_HOME honoured). The reference is TransformerLens's
`TransformerBridge.boot_transformers(FOLDER).run_with_cache` on the same model's float32 folder
(--reference; by default written once beside the model cache, `benchmarks/<name>-f32`, by transformers
dequantizing the GGUF: the same weights).

Each engine runs in its own subprocess (so that its peak memory is its own); the two alternate,
--rounds times each, so that a machine whose load changes slows both alike. A child loads the
model, runs one warm-up pass (the kernels compiled and warm, as a notebook's second cell finds
them), then --runs timed passes of `run_with_cache` over the same --tokens tokens, every site
kept; it reports its import, load and pass times and its peak resident memory (ru_maxrss).
Printed: each figure as min-max over the rounds, and the ratios of the medians. Target (issue
52): tfcli at least 2x faster with at most half the peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# benchmarks/ itself off the path: its kernels.py would pass for the `kernels` package transformers looks for
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

TEXT = (HERE.parent / "README.md").read_text(encoding="utf-8")  # English prose and code: enough for 512 tokens


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def child_tfcli(args) -> dict:
    t0 = time.perf_counter()
    import tfcli
    from tfcli.engine.threads import set_blas_threads

    set_blas_threads(args.threads)
    model = tfcli.load(args.model)
    t_load = time.perf_counter() - t0
    ids = model.to_tokens(TEXT)[: args.tokens]
    times = []
    for i in range(args.runs + 1):
        t = time.perf_counter()
        logits, cache = model.run_with_cache(ids)
        times.append(time.perf_counter() - t)
        kept = len(cache)
        del logits, cache
    return {"load": t_load, "pass": statistics.median(times[1:]), "first": times[0], "peak_mb": peak_mb(), "arrays": kept, "tokens": len(ids)}


def child_lens(args) -> dict:
    t0 = time.perf_counter()
    import torch
    from transformer_lens.model_bridge import TransformerBridge

    t_import = time.perf_counter() - t0
    torch.set_num_threads(args.threads)
    t1 = time.perf_counter()
    model = TransformerBridge.boot_transformers(args.reference, device="cpu", dtype=torch.float32)
    t_load = time.perf_counter() - t1
    from tfcli.engine.tokenizer import Tokenizer

    ids = Tokenizer(Path(args.reference) / "tokenizer.json").prompt(TEXT)[: args.tokens]  # the ids tfcli runs
    tokens = torch.tensor([ids])
    times = []
    with torch.no_grad():
        for i in range(args.runs + 1):
            t = time.perf_counter()
            logits, cache = model.run_with_cache(tokens)
            times.append(time.perf_counter() - t)
            kept = len(cache)
            del logits, cache
    return {"import": t_import, "load": t_load, "pass": statistics.median(times[1:]), "first": times[0], "peak_mb": peak_mb(), "arrays": kept, "tokens": len(ids)}


def reference_folder(folder: Path) -> Path:
    """The float32 safetensors folder of a model: the folder itself when it holds one, else the
    GGUF's weights dequantized by transformers and saved once beside it."""
    if not (folder / "model.gguf").exists():
        return folder
    out = folder.parent.parent / "benchmarks" / f"{folder.name}-f32"  # beside the model cache, not in it: never listed as a model
    if (out / "config.json").exists():
        return out
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    print(f"writing the float32 reference folder {out} (once)", file=sys.stderr)
    m = AutoModelForCausalLM.from_pretrained(folder, gguf_file="model.gguf", dtype=torch.float32)
    config = m.config
    config.__dict__.pop("quantization_config", None)  # a model read from a GGUF will not save itself: its weights go into a plain one
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(m.state_dict())
    plain.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (folder / name).exists():
            shutil.copy(folder / name, out / name)
    return out


def run_child(engine: str, args) -> dict:
    cmd = [sys.executable, __file__, args.model, "--child", engine, "--reference", args.reference, "--tokens", str(args.tokens),
           "--runs", str(args.runs), "--threads", str(args.threads)]  # fmt: skip
    # TFCLI_THREADS: tfcli's passes on --threads threads (prompt parts included), whatever cores look idle when it loads
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(HERE.parent), "TFCLI_THREADS": str(args.threads)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{engine} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="smollm2")
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3, help="children of each engine, alternating")
    p.add_argument("--runs", type=int, default=3, help="timed passes per child (after one warm-up)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reference", default=None, help="the float32 folder TransformerLens boots (default: written from the GGUF)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.threads is None:
        from tfcli.engine.threads import available_cpus

        args.threads = available_cpus()
    if args.child:
        print(json.dumps(child_tfcli(args) if args.child == "tfcli" else child_lens(args)))
        return
    from tfcli.engine.errors import TfcliError
    from tfcli.store.registry import resolve

    try:
        folder = resolve(args.model)
    except TfcliError as e:
        sys.exit(f"error: {e}")
    args.model = str(folder)
    args.reference = str(reference_folder(Path(args.reference) if args.reference else folder))
    ours, theirs = [], []
    load0 = os.getloadavg()[0]  # a busy machine slows both engines, not always alike: say how busy it was
    for r in range(args.rounds):
        ours.append(run_child("tfcli", args))
        theirs.append(run_child("lens", args))
        print(f"round {r + 1}: tfcli {ours[-1]['pass']:.2f} s, {ours[-1]['peak_mb']:.0f} MB; "
              f"TransformerLens {theirs[-1]['pass']:.2f} s, {theirs[-1]['peak_mb']:.0f} MB; "
              f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)  # fmt: skip
    from importlib.metadata import version

    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    print(f"run_with_cache of {ours[0]['tokens']} tokens, every site kept ({ours[0]['arrays']} arrays in tfcli's cache, "
          f"{theirs[0]['arrays']} in TransformerLens's); {args.threads} threads; {args.rounds} rounds x {args.runs} passes")  # fmt: skip
    print(f"tfcli {Path(args.model).name} ({'GGUF run in place' if (folder / 'model.gguf').exists() else 'float32'}) against "
          f"TransformerLens {version('transformer-lens')} (torch {version('torch')}) on {Path(args.reference).name}, float32")  # fmt: skip
    rows = [
        ("run_with_cache (s, median of the passes)", [r["pass"] for r in ours], [r["pass"] for r in theirs], "{:.2f}", med(ours, "pass") / med(theirs, "pass")),
        ("first pass (s: compiling, warming)", [r["first"] for r in ours], [r["first"] for r in theirs], "{:.2f}", None),
        ("load (s)", [r["load"] for r in ours], [r["load"] for r in theirs], "{:.2f}", None),
        ("import (s)", [0.0], [r["import"] for r in theirs], "{:.2f}", None),
        ("peak resident memory (MB)", [r["peak_mb"] for r in ours], [r["peak_mb"] for r in theirs], "{:.0f}", med(ours, "peak_mb") / med(theirs, "peak_mb")),
    ]  # fmt: skip
    print("| measure | tfcli | TransformerLens | tfcli / TransformerLens |\n|---|---|---|---|")
    for name, a, b, fmt, ratio in rows:
        print(f"| {name} | {span(a, fmt)} | {span(b, fmt)} | {'' if ratio is None else f'{ratio:.2f}x'} |")
    speed, mem = med(theirs, "pass") / med(ours, "pass"), med(ours, "peak_mb") / med(theirs, "peak_mb")
    print(f"tfcli is {speed:.2f}x as fast (target >= 2x) with {mem:.2f}x the peak memory (target <= 0.5x); "
          f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after (on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
