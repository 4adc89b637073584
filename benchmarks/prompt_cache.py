"""The prompt cache of `tfcli serve --prompt-cache MB`, measured: its memory under many prompts, and
what it buys a chat's tenth turn.

    python benchmarks/prompt_cache.py turns -m smollm2             # the tenth turn, with and without, in turn
    python benchmarks/prompt_cache.py memory -m tiny --mb 0,16     # 1,000 different 1,000-token prompts
    python benchmarks/prompt_cache.py memory -m smollm2 --mb 0,64 --tokens 256

`turns`: two servers of the same model run side by side, one with `--prompt-cache 256`, one without.
Each round is a new conversation of nine turns (each user message about 100 tokens, each reply the
model's own, greedy, 24 tokens at most) played for real on the server with the cache, as a chat
client plays it (the whole conversation resent every turn); then the tenth turn (about 1,000 tokens
of history) is sent to both, in turn (which one first alternates by round), streamed, and the time
to its first token is taken. Prints each round, the median and range of both and of their ratio
(issue 54's target: at most 0.3x), whether the greedy tenth answers were the same, the tokens the
cache gave (usage.prompt_tokens_details.cached_tokens), and the load average at the start, each round
and the end (the machine is shared: a busy one stretches both sides).

`memory`: for each budget of --mb (0 = no cache: the engine's own memory), one server with
`--prompt-cache MB`. After a warm-up its peak resident memory is reset (/proc/PID/clear_refs), then
1,000 different prompts of about --tokens tokens arrive from 4 clients at once, in pairs: a text, then
the same text with a sentence more (which the cache should serve from the first). Prints, per budget,
the resident memory before, the peak during the run (VmHWM) and their difference; the store's use
(/health's prompt_cache) sampled every 25 requests and its most; how many second prompts of a pair
reported cached tokens (usage.prompt_tokens_details.cached_tokens); and what the run's keys and
values would have taken without a bound. `-m tiny` is the tests' tiny Llama given 2,048 positions:
its passes take milliseconds, so 1,000 prompts of 1,000 tokens run in minutes on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("river mill grain record sack harvest winter market bridge lantern garden letter window orchard "
         "village teacher ledger season weather hill road cart barrel bread candle story morning evening "
         "field stone fence shadow mountain valley forest meadow cottage harbour ship sail anchor rope").split()  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model: str, *options: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "tfcli", "serve", "-m", model, "--port", str(port), *options],
                            env=env, stdout=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=2).close()
            return proc, url
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit(f"the server ({model} {' '.join(options)}) did not start")
            time.sleep(0.3)


def post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.loads(r.read())


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=60) as r:
        return json.loads(r.read())


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


# --- turns -------------------------------------------------------------------------------------------


def first_token(url: str, model: str, messages: list[dict]) -> tuple[float, str, int, int]:
    """Stream a greedy answer: (seconds to its first content, its text, cached prompt tokens, prompt tokens)."""
    body = {"model": model, "messages": messages, "max_tokens": 24, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    t0, first, text, cached, size = time.perf_counter(), None, "", 0, 0
    with urllib.request.urlopen(req, timeout=1800) as r:
        for line in r:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk.get("choices", []):
                if c["delta"].get("content"):
                    first = first or time.perf_counter() - t0
                    text += c["delta"]["content"]
            usage = chunk.get("usage") or {}
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", cached)
            size = usage.get("prompt_tokens", size)
    return first if first is not None else time.perf_counter() - t0, text, cached, size


def conversation(url: str, model: str, round_: int) -> list[dict]:
    """Nine turns played on url (the server with the cache), each user message about 100 tokens of
    this round's own words: -> the messages of the tenth turn."""
    rng = random.Random(round_)
    messages: list[dict] = []
    for turn in range(9):
        messages.append(
            {"role": "user", "content": f"Turn {turn + 1}. " + " ".join(sentence(rng, 11) for _ in range(7))}
        )
        out = post(
            url, "/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 24, "temperature": 0}
        )
        messages.append({"role": "assistant", "content": out["choices"][0]["message"]["content"]})
    messages.append({"role": "user", "content": "Summarise all of that in one line."})
    return messages


def turns(args) -> None:
    print(f"load average at start: {loadavg()}", file=sys.stderr)
    cached_srv, cached_url = start(args.model, "--prompt-cache", "256")
    plain_srv, plain_url = start(args.model)
    name = Path(args.model).name
    rows = []
    try:
        for url in (cached_url, plain_url):  # warm: first-call costs (kernels, RoPE tables, BLAS threads)
            first_token(url, name, [{"role": "user", "content": "Hello!"}])
        for r in range(args.rounds):
            messages = conversation(cached_url, name, 1000 + r)
            order = [("cached", cached_url), ("plain", plain_url)]
            got = {}
            for label, url in order if r % 2 == 0 else order[::-1]:
                got[label] = first_token(url, name, messages)
            size = got["plain"][3]  # the tenth turn's prompt, template and all
            rows.append((got["cached"], got["plain"], size, loadavg()))
            c, p = got["cached"][0], got["plain"][0]
            print(f"round {r + 1}: a prompt of {size:,} tokens, first token {c:.3f} s with the cache "
                  f"({got['cached'][2]:,} cached), {p:.3f} s without: {c / p:.3f}x; load {rows[-1][3]}",
                  file=sys.stderr)  # fmt: skip
    finally:
        for proc in (cached_srv, plain_srv):
            proc.terminate()
            proc.wait(30)
    turns_table(name, rows)


def turns_table(name: str, rows: list) -> None:
    """rows: per round (the cached server's first_token(), the plain one's, prompt tokens, load average)."""
    cached = [x[0][0] for x in rows]
    plain = [x[1][0] for x in rows]
    ratios = [c / p for c, p in zip(cached, plain)]
    same = sum(x[0][1] == x[1][1] for x in rows)
    print(f"\n{name}, the tenth turn of a chat (prompts of {min(x[2] for x in rows):,}-{max(x[2] for x in rows):,} "
          f"tokens), {len(rows)} rounds, load average at the end {loadavg()}\n")  # fmt: skip
    print("| | first token, median (range) |")
    print("|---|---:|")
    print(f"| with --prompt-cache 256 | {statistics.median(cached):.3f} s ({min(cached):.3f}-{max(cached):.3f}) |")
    print(f"| without | {statistics.median(plain):.3f} s ({min(plain):.3f}-{max(plain):.3f}) |")
    print(f"| ratio, per round | {statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f}) |")
    print(f"\ncached tokens per tenth turn: {', '.join(f'{x[0][2]:,}' for x in rows)}; "
          f"greedy tenth answers identical with and without the cache: {same} of {len(rows)}")  # fmt: skip


# --- memory ------------------------------------------------------------------------------------------


def status(pid: int, key: str) -> int:
    """A /proc/PID/status figure in bytes (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def one_budget(model: str, mb: int, n: int, tokens: int) -> dict:
    """n different prompts (pairs: a text, then it and a sentence more) through a server with --prompt-cache mb."""
    proc, url = start(model, "--prompt-cache", str(mb))
    sample = sentence(random.Random(0), 200)
    words = max(
        8, int(tokens * 200 / len(post(url, "/tokenize", {"content": sample})["tokens"]))
    )  # this tokenizer's rate
    lock = threading.Lock()
    got = {"samples": [], "first": [0, 0], "second": [0, 0], "prompt_tokens": 0, "per_token": None}
    try:
        first = post(url, "/v1/completions", {"prompt": sentence(random.Random(-1), words), "max_tokens": 1})
        if mb:
            got["per_token"] = health(url)["prompt_cache"]["used_mb"] * 2**20 / first["usage"]["prompt_tokens"]
        for i in range(2, 4):
            post(url, "/v1/completions", {"prompt": sentence(random.Random(-i), words), "max_tokens": 1})
        base = status(proc.pid, "VmRSS")
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
        t0, done = time.perf_counter(), [0]

        def pair(i: int) -> None:
            rng = random.Random(i)
            text = f"{i}: " + sentence(rng, words)
            for k, prompt in enumerate((text, text + " " + sentence(rng, 12))):
                out = post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
                cached = out["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
                with lock:
                    got["prompt_tokens"] += out["usage"]["prompt_tokens"]
                    which = got["second" if k else "first"]
                    which[0], which[1] = which[0] + (cached > 0), which[1] + cached
                    done[0] += 1
                    if mb and done[0] % 25 == 0:
                        got["samples"].append(health(url)["prompt_cache"]["used_mb"])
                    if done[0] % 100 == 0:
                        print(f"--prompt-cache {mb}: {done[0]} prompts, {time.perf_counter() - t0:.0f} s, "
                              f"RSS {status(proc.pid, 'VmRSS') / 2**20:.0f} MB", file=sys.stderr)  # fmt: skip

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(pair, range(n // 2)))
        got |= {"seconds": time.perf_counter() - t0, "base": base, "peak": status(proc.pid, "VmHWM"),
                "end": status(proc.pid, "VmRSS"), "store": health(url).get("prompt_cache")}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(30)
    return got


def tiny_long(folder: Path) -> str:
    """The tests' tiny Llama with room for long prompts (2,048 positions): a model whose passes are quick."""
    import shutil

    shutil.copytree(ROOT / "tests" / "data" / "tiny-llama", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2048}))
    return str(folder)


def memory(args) -> None:
    import tempfile

    print(f"load average at start: {loadavg()}", file=sys.stderr)
    budgets = [int(b) for b in args.mb.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_long(Path(tmp) / "tiny-llama") if args.model == "tiny" else args.model
        runs = {mb: one_budget(model, mb, args.prompts, args.tokens) for mb in budgets}
    per_token = next((r["per_token"] for r in runs.values() if r["per_token"]), None)
    r0 = next(iter(runs.values()))
    print(f"\n{args.model}, {args.prompts:,} different prompts of about {args.tokens:,} tokens from 4 clients "
          f"({r0['prompt_tokens']:,} prompt tokens a run), load average at the end {loadavg()}\n")  # fmt: skip
    print("| --prompt-cache | RSS before (MB) | peak RSS (MB) | peak - before | the store at most (MB) | "
          "2nd of a pair served from the 1st | tokens reused | time |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mb, r in runs.items():
        most = f"{max(r['samples']):.1f}" if r["samples"] else "-"
        print(f"| {mb} | {r['base'] / 2**20:.0f} | {r['peak'] / 2**20:.0f} | {(r['peak'] - r['base']) / 2**20:.0f} | "
              f"{most} | {r['second'][0]:,} of {args.prompts // 2:,} | {r['first'][1] + r['second'][1]:,} | "
              f"{r['seconds']:.0f} s |")  # fmt: skip
    for mb, r in runs.items():
        if r["store"]:
            s = r["store"]
            print(f"\n--prompt-cache {mb}: /health at the end: {s['used_mb']} MB of {s['mb']} in {s['entries']} "
                  f"entries, {s['hits']:,} hits, {s['reused_tokens']:,} tokens reused; first prompts of a pair "
                  f"with cached tokens: {r['first'][0]:,} ({r['first'][1]:,} tokens: their shared opening)")  # fmt: skip
    if per_token:
        print(
            f"\nunbounded, one run's {r0['prompt_tokens']:,} prompt tokens would keep about "
            f"{r0['prompt_tokens'] * per_token / 2**20:,.0f} MB of keys and values ({per_token / 1024:.2f} KB a token)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["turns", "memory"])
    ap.add_argument(
        "-m",
        "--model",
        default="smollm2",
        help="a model name or path (a chat model for turns); memory: 'tiny' for the tests' tiny Llama",
    )
    ap.add_argument("--rounds", type=int, default=5, help="turns: conversations (default 5)")
    ap.add_argument("--mb", default="0,16", help="memory: budgets in MB, comma-separated, each a run (default 0,16)")
    ap.add_argument("--prompts", type=int, default=1000, help="memory: different prompts (default 1,000)")
    ap.add_argument("--tokens", type=int, default=1000, help="memory: tokens per prompt, about (default 1,000)")
    args = ap.parse_args()
    turns(args) if args.what == "turns" else memory(args)


if __name__ == "__main__":
    main()
