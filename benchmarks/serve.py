"""Throughput of `tfcli serve` with 1, 4 and 8 concurrent clients.

Starts `tfcli serve -m MODEL` on a free loopback port, then, in interleaved rounds, lets C clients
(C = 1, 4, 8) each send one /v1/completions request at the same moment (each its own prompt,
sampled with its own seed, `--new-tokens` tokens, no stop), and times the round until the last
answer. The clients share the server's decode steps, so C requests cost far less than C times
one: the ratio time(C) / time(1) is what this prints (issue 25's target: 4 clients in at most
about 1.6x the time of one), with the aggregate new tokens per second.

    python benchmarks/serve.py -m smollm2 --rounds 3 --new-tokens 64
    python benchmarks/serve.py -m /work/files/SmolLM2-135M-Instruct.Q4_1.gguf --clients 1,4
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ["The history of the bicycle", "A recipe for bread:", "In the beginning", "def fibonacci(n):", "The ocean is", "Dear diary, today", "Mountains form when", "The best way to learn"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def complete(url: str, i: int, new: int) -> int:
    body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": new, "temperature": 0.8, "seed": i, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["usage"]["completion_tokens"]


def round_of(url: str, clients: int, new: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(lambda i: complete(url, i, new), range(clients)))
    return time.perf_counter() - t0, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", default="smollm2", help="a model name, folder or GGUF file (or -m)")
    ap.add_argument("-m", "--model", default=None, help="a model name, folder or GGUF file, e.g. -m FILE.gguf")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--serve-option", action="append", default=[], help="passed on to tfcli serve (repeatable), e.g. --serve-option=--no-batch-invariant")
    args = ap.parse_args()
    args.model = args.model or args.name
    counts = [int(c) for c in args.clients.split(",")]
    port = free_port()
    cmd = [sys.executable, "-m", "tfcli", "serve", "-m", args.model, "--port", str(port), "--parallel", str(max(counts))]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += args.serve_option
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the server did not start")
                time.sleep(0.2)
        round_of(url, 1, 8)  # warm-up: first-call costs (RoPE tables, BLAS threads)
        times: dict[int, list[float]] = {c: [] for c in counts}
        tokens: dict[int, int] = {}
        for r in range(args.rounds):
            for c in counts:
                seconds, tokens[c] = round_of(url, c, args.new_tokens)
                times[c].append(seconds)
                print(f"round {r + 1}: {c} client(s): {seconds:.2f} s, {tokens[c]} tokens", file=sys.stderr)
        one = statistics.median(times[counts[0]])
        print(f"\n{args.model}, {args.new_tokens} new tokens per request, median of {args.rounds} interleaved rounds\n")
        print("| clients | time (median, range) | time / time of 1 | new tokens/s (all clients) |")
        print("|---:|---:|---:|---:|")
        for c in counts:
            m = statistics.median(times[c])
            print(f"| {c} | {m:.2f} s ({min(times[c]):.2f}-{max(times[c]):.2f}) | {m / one:.2f}x | {tokens[c] / m:.1f} |")
    finally:
        proc.terminate()
        proc.wait(20)


if __name__ == "__main__":
    main()
