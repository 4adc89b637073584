"""How long `tfcli --help`, `tfcli params --preset gpt3` and `tfcli attn --show-mask` take to start,
and what they import.

    python benchmarks/startup.py            # median of 10 runs each
    python benchmarks/startup.py -n 15 --check
    python benchmarks/startup.py --against 69067ca   # an older commit and this tree, in turn

With --against REV the commit's files are unpacked (`git archive`) into a temporary folder and each
command runs there and here in turn, run after run, so that both meet the same load; the table
gives both medians.

Each command runs as a fresh subprocess (`python -m tfcli ...` from the repository root), so the
times include the interpreter, Typer and Rich. The reference, measured in the same run, is a bare
`python -c pass`. Then `-X importtime` lists the heavy modules the params command loads (NumPy,
tokenizers, safetensors, torch, the tfcli engine) and the chain of imports that pulled each in:
`tfcli params --preset` only needs tfcli/analysis (pure Python) and the error classes of
tfcli.engine.errors, so anything else is overhead.

--check exits with 1 if either command takes 0.3 s or more, or params loads any of those modules.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# seconds (median of the runs): issue 17 asks 0.2 for `tfcli --help` and 0.25 for `tfcli params --preset gpt3`
BUDGETS = {"help": 0.2, "params": 0.25, "attn": 0.3}
COMMANDS = (
    ("help", "tfcli --help", ["-m", "tfcli", "--help"]),
    ("params", "tfcli params --preset gpt3", ["-m", "tfcli", "params", "--preset", "gpt3"]),
    ("attn", "tfcli attn --show-mask", ["-m", "tfcli", "attn", "--show-mask"]),
)
HEAVY = ("numpy", "tokenizers", "safetensors", "torch", "transformers")


def environment() -> dict[str, str]:
    """This environment, with bytecode cached in a temporary folder (not in the source tree), as an
    installed tfcli would have it: with PYTHONDONTWRITEBYTECODE set, every run would recompile tfcli."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | {"NO_COLOR": "1", "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "tfcli-startup-pycache")}


def timed(args: list[str], runs: int, trees: tuple[Path, ...] = (ROOT,)) -> list[tuple[float, float]]:
    """Median wall time and median CPU time (user + system) of `python ARGS` in each tree, after one
    warm-up run, output discarded; the trees take turns, run after run. The CPU time is what
    start-up costs whatever else the machine is doing: on a busy machine the wall time also counts
    the waits for a core."""
    env = environment()
    for tree in trees:
        subprocess.run([sys.executable, *args], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    walls, cpus = [[] for _ in trees], [[] for _ in trees]
    for _ in range(runs):
        for i, tree in enumerate(trees):
            t0 = time.perf_counter()
            p = subprocess.Popen([sys.executable, *args], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(p.pid, 0)
            walls[i].append(time.perf_counter() - t0)
            p.returncode = os.waitstatus_to_exitcode(status)
            if p.returncode != 0:
                raise subprocess.CalledProcessError(p.returncode, args)
            cpus[i].append(usage.ru_utime + usage.ru_stime)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus)]


def unpacked(rev: str) -> Path:
    """The files of commit REV in a temporary folder (`python -m tfcli` run there imports that tfcli)."""
    folder = Path(tempfile.mkdtemp(prefix=f"tfcli-{rev[:12]}-"))
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def import_tree(args: list[str]) -> list[tuple[str, int, int, int]]:
    """(module, depth, self µs, cumulative µs) for each import of `python -X importtime ARGS`, in the
    order Python reports them: a module's own imports come before it, one level deeper."""
    env = environment()
    r = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    rows = []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, name = line[len("import time:") :].split("|", 2)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((name.strip(), depth, int(self_us), int(cumulative)))
    return rows


def chain(rows: list[tuple[str, int, int, int]], i: int) -> list[str]:
    """The imports that led to rows[i], outermost first."""
    names = [rows[i][0]]
    depth = rows[i][1]
    for name, d, _, _ in rows[i + 1 :]:
        if d == depth - 1:
            names.append(name)
            depth = d
            if d == 0:
                break
    return names[::-1]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=10, help="runs per command (the median is shown)")
    ap.add_argument(
        "--check", action="store_true",
        help="exit 1 if a command is over its budget (wall time, or CPU time when the machine is busy), or params loads a heavy module",
    )  # fmt: skip
    ap.add_argument("--against", metavar="REV", help="also time commit REV, in turn with this tree")
    a = ap.parse_args()

    params = ["-m", "tfcli", "params", "--preset", "gpt3"]
    [(bare, bare_cpu)] = timed(["-c", "pass"], a.runs)
    load = os.getloadavg()[0]
    busy = load > (os.cpu_count() or 1)  # more runnable processes than cores: the wall time counts waits
    print(f"median of {a.runs} runs, {os.cpu_count()} CPUs ({cpu_name()}), load average {load:.2f}" + ("  (busy: judged by CPU time)" if busy else ""))
    print(f"  {'':30} {'wall':>7}   {'cpu':>7}")
    print(f"  {'python -c pass':30} {bare * 1000:5.0f} ms   {bare_cpu * 1000:5.0f} ms   (reference)")
    if a.against:
        old = unpacked(a.against)
        for _, label, args in COMMANDS:
            (ow, oc), (nw, nc) = timed(args, a.runs, (old, ROOT))
            print(f"  {label:30} {ow * 1000:5.0f} ms   {oc * 1000:5.0f} ms   {a.against[:12]}")
            print(f"  {'':30} {nw * 1000:5.0f} ms   {nc * 1000:5.0f} ms   this tree ({nw / ow:.2f} x wall, {nc / oc:.2f} x cpu)")
        return 0
    over = False
    for key, label, args in COMMANDS:
        [(wall, cpu)] = timed(args, a.runs)
        budget = BUDGETS[key]
        judged = cpu if busy else wall
        over |= judged > budget
        print(
            f"  {label:30} {wall * 1000:5.0f} ms   {cpu * 1000:5.0f} ms   {wall / bare:4.1f} x reference (wall)"
            f"   budget {budget * 1000:.0f} ms: {'ok' if judged <= budget else 'OVER'}"
        )

    rows = import_tree(params)
    total = sum(r[2] for r in rows)
    mine = [r for r in rows if r[0].startswith(("tfcli.analysis", "tfcli.cli.params"))]
    print(f"\nimports of `tfcli params --preset gpt3` (-X importtime): {len(rows)} modules, {total / 1000:.0f} ms in all")
    for name, _, self_us, _ in mine:
        print(f"  {name:32} {self_us / 1000:6.1f} ms")
    heavy = [i for i, r in enumerate(rows) if r[0] in HEAVY]
    # The error classes live in tfcli.engine.errors, which the CLI's error boundary imports; that
    # also runs tfcli/engine/__init__.py. Both are fine if that file imports nothing itself.
    # tfcli.engine.config is the one description of a shape (ModelConfig), which the accounting reads;
    # it imports nothing but the errors. Anything else of the engine would pull NumPy with it.
    engine = [r[0] for r in rows if r[0].startswith("tfcli.engine.") and r[0] not in ("tfcli.engine.errors", "tfcli.engine.config")]
    if not heavy and not engine:
        print("  no heavy module: not NumPy, tokenizers, safetensors, torch, transformers, nor the engine (beyond its errors and ModelConfig)")
    else:
        print("  heavy modules loaded, each with the chain of imports that pulled it in:")
        for i in heavy:
            name, _, _, cumulative = rows[i]
            print(f"  {name:16} {cumulative / 1000:6.1f} ms   {' → '.join(chain(rows, i))}")
        if engine:
            print(f"  engine modules loaded ({len(set(engine))}): {', '.join(dict.fromkeys(engine))}")
    if a.check and (over or heavy or engine):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
