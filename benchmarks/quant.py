"""tfcli against llama.cpp's own llama-bench on the same GGUF files, in turn, in the same run.

The reference is what llama.cpp's users quote: `llama-bench` (C++, the CPU backend built for this
CPU: ../shared/tools/llama.cpp/run picks amx, avx512 or avx2 and says which), pp512 (a 512-token
prompt pass), tg128 (128 decode steps from an empty cache) and tg128 at a depth of 4,096 tokens
(`-d 4096`: the steps after 4,096 tokens of context). tfcli runs the same three in a fresh process
of its own (load; one warm-up pass; a 512-token prompt pass; 128 greedy steps after one token; a
4,096-token prompt, then 128 steps). Both with --threads threads (default 2) and float32 / float16
keys and values as each keeps them by default.

Each round runs llama-bench then tfcli (the next round the other way round) for every file, so
that a machine whose speed drifts slows both alike; --rounds rounds (default 3, --quick 1),
llama-bench with -r --repeats (default 1) in each. Prints, per file: median and range of tokens
per second, the ratio of the medians, peak resident memory of each (the process's high-water mark;
tfcli's also above a bare process that only imports it, as a multiple of the file), then a
Markdown table for the docs with the CPU, llama.cpp's build and backend, and the load average
before and after (a busy machine slows both, unequally: rerun on an idle one).

With no files, the set the speed issue names: SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M
(`tfcli pull`'s files), a 1.5B-class Q4_K_M file of random weights (benchmarks/qwen15_file.py) and
SmolLM2 as Q4_0 and Q8_0 (`tfcli convert --quantize`), the last three written once into --work.

    python benchmarks/quant.py                 # the whole set, 3 rounds (about 20 minutes idle)
    python benchmarks/quant.py --quick         # 1 round
    python benchmarks/quant.py FILE.gguf --rounds 5 --no-depth --json out.json
    python benchmarks/quant.py --memory        # tfcli's peak alone, above the bare process (no llama-bench)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA_RUN = ROOT.parent / "shared/tools/llama.cpp/run"
MODELS = Path.home() / ".cache/tfcli/models"
PROMPT, NEW, DEPTH = 512, 128, 4096

TFCLI = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import tfcli
from tfcli.engine.threads import set_blas_threads

def hwm():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))

path, threads, depth = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
set_blas_threads(threads)
if path == "-":  # a bare process: what importing tfcli and NumPy holds
    print(json.dumps({"peak": hwm()}))
    sys.exit()
from tfcli.engine.bench import prompt_ids
from tfcli.engine.generate import Session
from tfcli.store import load
P, N = %d, %d
t0 = time.perf_counter()
lm = load(path)
load_s = time.perf_counter() - t0
vocab = lm.config.vocab_size
s = Session(lm.model, capacity=P + 8, workers=threads)
s.prefill(prompt_ids(vocab, P)[:64])  # warm: the kernels' loading, the first pass's copies, RoPE tables
s = Session(lm.model, capacity=P, workers=threads)
t0 = time.perf_counter()
s.prefill(prompt_ids(vocab, P))
pp = P / (time.perf_counter() - t0)

def tg(s, first):
    tok = int(np.argmax(s.prefill(first)[0]))
    t0 = time.perf_counter()
    for _ in range(N):
        tok = int(np.argmax(s.step(tok)))
    return N / (time.perf_counter() - t0)

out = {"load": load_s, "pp": pp, "tg": tg(Session(lm.model, capacity=N + 8, workers=threads), [1]), "peak": hwm()}
if depth:
    s = Session(lm.model, capacity=depth + N + 8, workers=threads)
    out["tg_depth"] = tg(s, prompt_ids(vocab, depth))
    out["peak_depth"] = hwm()
print(json.dumps(out))
""" % (PROMPT, NEW)


def run_measured(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> tuple[str, str, int]:
    """stdout, stderr and the peak resident bytes of the command's own process (wait4's rusage)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=dict(os.environ, **(env or {})))
        t0 = time.monotonic()
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                p.kill()
                sys.exit(f"{cmd[0]}: no answer in {timeout:.0f} s")
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if p.returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {p.returncode}"
        sys.exit(f"{' '.join(cmd[:4])}...: {last}")
    return stdout, stderr, usage.ru_maxrss * 1024


def llama_bench(path: Path, args, depth: int) -> tuple[dict, str, int]:
    """{test: tokens/s} of one llama-bench run, the backend it said it picked, its peak bytes."""
    tests = ["-p", "0", "-n", str(NEW), "-d", str(depth)] if depth else ["-p", str(PROMPT), "-n", str(NEW)]
    cmd = [str(args.llama), "llama-bench", "-m", str(path), "-t", str(args.threads), "-r", str(args.repeats), "-o", "json", *tests]
    stdout, stderr, peak = run_measured(cmd)
    backend = next((line.split(":", 1)[1].strip() for line in stderr.splitlines() if "CPU backend" in line), "?")
    rows = json.loads(stdout[stdout.index("[") :])
    got = {}
    for r in rows:
        key = "tg_depth" if r["n_depth"] else ("pp" if r["n_prompt"] else "tg")
        got[key] = r["avg_ts"]
        got["build"] = r.get("build_commit", "?")
    return got, backend, peak


def tfcli(path: Path | str, args, depth: int) -> dict:
    env = {"TFCLI_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}
    stdout, _, _ = run_measured([sys.executable, "-c", TFCLI, str(ROOT), str(path), str(args.threads), str(depth)], env)
    return json.loads(stdout.strip().splitlines()[-1])


def cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "?"


def default_files(work: Path) -> list[Path]:
    """The issue's set, the generated files written into `work` once."""
    work.mkdir(parents=True, exist_ok=True)
    smollm2 = MODELS / "smollm2/model.gguf"
    qwen = work / "qwen15-q4_k_m.gguf"
    if not qwen.exists():
        print(f"writing {qwen} (benchmarks/qwen15_file.py)", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "benchmarks/qwen15_file.py"), str(qwen), "--smollm2", str(smollm2)], check=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    folder = work / "smollm2-f32"
    made = []
    for kind in ("q4_0", "q8_0"):
        target = work / f"smollm2-{kind}.gguf"
        if not target.exists():
            if not folder.exists():
                subprocess.run([sys.executable, "-m", "tfcli", "convert", str(smollm2), str(folder)], check=True, env=env, cwd=ROOT)
            subprocess.run([sys.executable, "-m", "tfcli", "convert", str(folder), str(target), "--quantize", kind], check=True, env=env, cwd=ROOT)
        made.append(target)
    return [smollm2, MODELS / "gemma3/model.gguf", qwen, *made]


NAMES = {"smollm2/model.gguf": "SmolLM2-135M Q4_1", "gemma3/model.gguf": "Gemma 3 270M Q4_K_M",
         "qwen15-q4_k_m.gguf": "1.5B-class Q4_K_M (random)", "smollm2-q4_0.gguf": "SmolLM2-135M Q4_0",
         "smollm2-q8_0.gguf": "SmolLM2-135M Q8_0"}  # fmt: skip


def name(path: Path) -> str:
    key = next((k for k in NAMES if str(path).endswith(k)), None)
    return NAMES[key] if key else path.name


def span(values: list[float], fmt: str = ".1f") -> str:
    """'median (min-max)', or the value alone for one round."""
    m = statistics.median(values)
    if len(values) == 1:
        return f"{m:{fmt}}"
    return f"{m:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="GGUF files (default: the set above)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of llama-bench and tfcli in turn (default 3; --quick 1)")
    ap.add_argument("--quick", action="store_true", help="one round (a first look; the figures for the docs take 3 or more)")
    ap.add_argument("--repeats", type=int, default=1, help="llama-bench's -r within each round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=DEPTH, help=f"the context of the second decode figure (default {DEPTH:,}, as -d)")
    ap.add_argument("--no-depth", action="store_true", help="skip the decode at a depth (the slowest part)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "tfcli-quant", help="where the generated files are kept")
    ap.add_argument("--llama", type=Path, default=LLAMA_RUN, help="llama.cpp's run script (../shared/tools/llama.cpp/run)")
    ap.add_argument("--json", type=Path, help="also write every round's figures here")
    ap.add_argument("--memory", action="store_true", help="only tfcli's peak per file (one process each), no llama-bench")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    depth = 0 if args.no_depth else args.depth
    files = args.files or default_files(args.work)
    for f in files:
        if not f.is_file():
            sys.exit(f"{f}: no such file")
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"CPU: {cpu()}, {os.cpu_count()} cores; {args.threads} threads; {rounds} rounds; load average {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}; {started}", flush=True)
    bare = tfcli("-", args, 0)["peak"]
    if args.memory:
        print(f"\n| file | file size | tfcli peak | above the bare process ({mb(bare)}) | x file |\n|---|---|---|---|---|")
        for f in files:
            peak, size = tfcli(f, args, 0)["peak"], f.stat().st_size  # after pp512 and tg128, as the table's peak
            print(f"| {name(f)} | {mb(size)} | {mb(peak)} | {mb(peak - bare)} | {(peak - bare) / size:.2f}x |", flush=True)
        return
    results: dict[Path, dict[str, list]] = {f: {"llama": [], "tfcli": []} for f in files}
    backend, build = "?", "?"
    for r in range(rounds):
        for f in files:
            order = ("llama", "tfcli") if r % 2 == 0 else ("tfcli", "llama")
            for who in order:
                if who == "llama":
                    got, backend, peak = llama_bench(f, args, 0)
                    got["peak"] = peak
                    if depth:
                        more, _, peak_d = llama_bench(f, args, depth)
                        got["tg_depth"], got["peak_depth"] = more["tg_depth"], peak_d
                    build = got.pop("build", build)
                else:
                    got = tfcli(f, args, depth)
                results[f][who].append(got)
            t, ll = results[f]["tfcli"][-1], results[f]["llama"][-1]
            print(f"round {r + 1}: {name(f)}: pp {t['pp']:.1f} / {ll['pp']:.1f}, tg {t['tg']:.1f} / {ll['tg']:.1f}"
                  + (f", tg@{depth} {t['tg_depth']:.1f} / {ll['tg_depth']:.1f}" if depth else "")
                  + f" tok/s; peak {mb(t['peak'])} / {mb(ll['peak'])} (tfcli / llama.cpp); load {os.getloadavg()[0]:.2f}", flush=True)
    load_after = os.getloadavg()
    tests = [("pp", f"prefill pp{PROMPT}"), ("tg", f"decode tg{NEW}")] + ([("tg_depth", f"decode tg{NEW} at {depth:,}")] if depth else [])
    print(f"\nllama.cpp build {build}, CPU backend {backend}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"(1-minute); tfcli bare process {mb(bare)}\n")
    head = "| file | " + " | ".join(f"{label} tok/s: tfcli / llama.cpp (ratio)" for _, label in tests) + " | peak: tfcli (above bare, x file) / llama.cpp |"
    print(head)
    print("|" + "---|" * (len(tests) + 2))
    for f in files:
        t, ll = results[f]["tfcli"], results[f]["llama"]
        size = f.stat().st_size
        cells = []
        for key, _ in tests:
            a, b = [x[key] for x in t], [x[key] for x in ll]
            cells.append(f"{span(a)} / {span(b)} (**{statistics.median(a) / statistics.median(b):.2f}x**)")
        tp, lp = max(x["peak"] for x in t), max(x["peak"] for x in ll)
        print(f"| {name(f)} ({mb(size)}) | " + " | ".join(cells) + f" | {mb(tp)} ({(tp - bare) / size:.2f}x) / {mb(lp)} |")
    print(f"\n{cpu()}, {args.threads} threads, llama.cpp {build} ({backend}), {rounds} round(s), median (range) of the rounds; "
          f"load average {load_before[0]:.2f} / {load_after[0]:.2f} (start / end).")
    if args.json:
        doc = {"cpu": cpu(), "threads": args.threads, "rounds": rounds, "llama_build": build, "backend": backend, "started": started,
               "load_before": load_before, "load_after": load_after, "bare_peak": bare,
               "files": {str(f): {"size": f.stat().st_size, **results[f]} for f in files}}
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
