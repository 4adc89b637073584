"""Constrained decoding, verified: 20 JSON schemas x 3 prompts on real models, each answer parsed and
validated with jsonschema (the reference), through the server and through the command line.

For each model (-m, repeatable; default smollm2 and gemma3) and each of the 20 schemas below (nested
objects, arrays with bounds, enums, numbers with ranges, required and optional fields, strings with
patterns, nullable and anyOf values), three prompts:

- the server: `tfcli serve -m MODEL` as a process of its own, asked with the openai client and
  `response_format: {"type": "json_schema", ...}` (chat completions for a model with a chat
  template, completions for a base model such as Gemma 3 270M); the first prompt answered whole,
  the second streamed, the third with n=3 (three answers, each validated);
- the command line: `tfcli generate [--chat] PROMPT --json-schema SCHEMA --json` (in this process,
  through the CLI's own entry point), one answer per prompt.

A case passes when every answer it gave parses as JSON, validates against its schema and ended by
the grammar (finish_reason "stop"), not by max_tokens. Prints a table per model and path, each
failure in full, and exits 1 if any case failed.

    python benchmarks/schemas.py                          # all 120 cases (20 x 3 x 2 models), both paths
    python benchmarks/schemas.py -m smollm2 --only person,order --paths server

Needs jsonschema and openai (test-only references; `pip install jsonschema openai`) and llguidance.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 300  # an answer that needs more is a failure ("length"): every schema bounds its strings and arrays
S = {"type": "string"}


def text(n: int) -> dict:
    return {"type": "string", "maxLength": n}  # bounded: a 135M model may loop inside a free string


def obj(props: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


# (name, what the prompts ask about, schema): 20 schemas, each kind of constraint at least twice.
SCHEMAS: list[tuple[str, str, dict]] = [
    ("person", "a person", obj({"name": text(40), "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                "email": {"type": "string", "pattern": "^[a-z]{1,12}@[a-z]{1,12}\\.com$"}}, ["name", "age"])),
    ("order", "a shop order", obj({
        "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": obj(
            {"product": text(30), "quantity": {"type": "integer", "minimum": 1, "maximum": 99}}, ["product", "quantity"])},
        "total": {"type": "number", "minimum": 0, "maximum": 10000}}, ["items", "total"])),
    ("weather", "the weather in a city", obj({
        "city": text(30), "sky": {"enum": ["sunny", "cloudy", "rainy", "snowy"]},
        "celsius": {"type": "integer", "minimum": -60, "maximum": 60}}, ["city", "sky", "celsius"])),
    ("book", "a book", obj({
        "title": text(40), "author": obj({"first": text(20), "last": text(20)}, ["last"]),
        "year": {"type": "integer", "minimum": 1400, "maximum": 2030},
        "tags": {"type": "array", "items": text(15), "maxItems": 3}}, ["title", "author", "year"])),
    ("colour", "a colour", obj({
        "name": text(20), "hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"},
        "rgb": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}, "minItems": 3, "maxItems": 3}},
        ["name", "hex", "rgb"])),
    ("event", "an event in a calendar", obj({
        "title": text(40), "date": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"},
        "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}, "online": {"type": "boolean"}},
        ["title", "date", "online"])),
    ("movie", "a film", obj({
        "title": text(40), "genre": {"enum": ["drama", "comedy", "action", "horror", "documentary"]},
        "rating": {"type": "number", "minimum": 0, "maximum": 10}, "minutes": {"type": "integer", "minimum": 1, "maximum": 300}},
        ["title", "genre", "rating"])),
    ("recipe", "a recipe", obj({
        "dish": text(30), "servings": {"type": "integer", "minimum": 1, "maximum": 12},
        "ingredients": {"type": "array", "minItems": 2, "maxItems": 5, "items": obj(
            {"name": text(20), "grams": {"type": "integer", "minimum": 1, "maximum": 2000}}, ["name", "grams"])},
        "vegetarian": {"type": "boolean"}}, ["dish", "ingredients"])),
    ("address", "a postal address", obj({
        "street": text(40), "city": text(30), "postcode": {"type": "string", "pattern": "^[0-9]{5}$"},
        "country": {"type": "string", "pattern": "^[A-Z]{2}$"}}, ["street", "city", "country"])),
    ("product", "a product in a catalogue", obj({
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "name": text(30),
        "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 5000}, "in_stock": {"type": "boolean"},
        "sizes": {"type": "array", "items": {"enum": ["S", "M", "L", "XL"]}, "maxItems": 4}},
        ["sku", "name", "price"])),
    ("team", "a sports team", obj({
        "name": text(30), "sport": {"enum": ["football", "basketball", "tennis", "hockey"]},
        "players": {"type": "array", "minItems": 2, "maxItems": 4, "items": obj(
            {"name": text(25), "number": {"type": "integer", "minimum": 1, "maximum": 99}}, ["name"])}},
        ["name", "sport", "players"])),
    ("login", "a login attempt", obj({
        "user": {"type": "string", "pattern": "^[a-z][a-z0-9_]{2,11}$"}, "success": {"type": "boolean"},
        "attempts": {"type": "integer", "minimum": 1, "maximum": 5}, "ip": {"type": "string", "pattern":
        "^[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}$"}}, ["user", "success"])),
    ("planet", "a planet", obj({
        "name": text(20), "moons": {"type": "integer", "minimum": 0, "maximum": 200},
        "gas_giant": {"type": "boolean"}, "distance_au": {"type": "number", "minimum": 0.1, "maximum": 50}},
        ["name", "moons", "gas_giant"])),
    ("survey", "an answer to a survey", obj({
        "score": {"type": "integer", "minimum": 1, "maximum": 5}, "comment": {"type": ["string", "null"], "maxLength": 60},
        "would_recommend": {"enum": ["yes", "no", "maybe"]}}, ["score", "comment", "would_recommend"])),
    ("shape", "a geometric shape", obj({
        "shape": {"anyOf": [obj({"kind": {"const": "circle"}, "radius": {"type": "number", "minimum": 0, "maximum": 100}},
                                ["kind", "radius"]),
                            obj({"kind": {"const": "square"}, "side": {"type": "number", "minimum": 0, "maximum": 100}},
                                ["kind", "side"])]},
        "colour": text(15)}, ["shape"])),
    ("matrix", "a small matrix of numbers", obj({
        "rows": {"type": "array", "minItems": 2, "maxItems": 3, "items": {
            "type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "integer", "minimum": -9, "maximum": 9}}}},
        ["rows"])),
    ("company", "a company", obj({
        "name": text(30), "founded": {"type": "integer", "minimum": 1800, "maximum": 2026},
        "ceo": obj({"name": text(30), "since": {"type": "integer", "minimum": 1900, "maximum": 2026}}, ["name"]),
        "offices": {"type": "array", "maxItems": 3, "items": obj({"city": text(20), "staff": {"type": "integer",
                    "minimum": 1, "maximum": 100000}}, ["city"])}}, ["name", "ceo"])),
    ("flight", "a flight", obj({
        "flight": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2,4}$"}, "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "to": {"type": "string", "pattern": "^[A-Z]{3}$"}, "status": {"enum": ["on time", "delayed", "cancelled"]},
        "delay_minutes": {"type": "integer", "minimum": 0, "maximum": 600}}, ["flight", "from", "to", "status"])),
    ("todo", "a to-do list", obj({
        "owner": text(20), "tasks": {"type": "array", "minItems": 1, "maxItems": 4, "items": obj(
            {"task": text(40), "done": {"type": "boolean"}, "priority": {"enum": ["low", "medium", "high"]}}, ["task", "done"])}},
        ["tasks"])),
    ("sensor", "a sensor reading", obj({
        "sensor_id": {"type": "string", "pattern": "^S[0-9]{3}$"}, "temperature": {"type": "number", "minimum": -40, "maximum": 85},
        "humidity": {"type": "integer", "minimum": 0, "maximum": 100}, "battery": {"enum": ["ok", "low"]},
        "location": {"anyOf": [text(20), {"type": "null"}]}}, ["sensor_id", "temperature", "battery"])),
]  # fmt: skip

CHAT_ASKS = ("Give me {} as JSON.", "Describe {} in JSON.", "Answer with a JSON object about {}.")
TEXT_ASKS = ("Here is {} as a JSON object:\n", "An example of {} in JSON:\n", "JSON record describing {}:\n")


def prompt_of(topic: str, k: int, chat: bool) -> str:
    return (CHAT_ASKS if chat else TEXT_ASKS)[k].format(topic)


def response_format(name: str, schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@dataclass
class Case:
    model: str
    path: str  # "server" or "generate"
    schema: str
    prompt: int  # which of the three prompts
    mode: str  # "whole", "stream", "n=3", or "generate"
    answers: list[tuple[str, str]] = field(default_factory=list)  # (text, how it ended)
    problems: list[str] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.answers) and not self.problems


def judge(case: Case, schema: dict) -> Case:
    """Each answer: ended by the grammar, parses, validates (jsonschema). Problems are kept in words."""
    import jsonschema

    for i, (answer, finish) in enumerate(case.answers):
        if finish != "stop":
            case.problems.append(f"answer {i} ended by {finish!r}: {answer[:200]!r}")
            continue
        try:
            doc = json.loads(answer)
        except ValueError as e:
            case.problems.append(f"answer {i} is not JSON ({e}): {answer[:200]!r}")
            continue
        try:
            jsonschema.validate(doc, schema)
        except jsonschema.ValidationError as e:
            case.problems.append(f"answer {i} does not validate ({e.message}): {answer[:200]!r}")
    return case


def server_case(client, served: str, chat: bool, name: str, topic: str, schema: dict, k: int) -> Case:
    """Prompt k of a schema through the server: whole (k = 0), streamed (1), or n=3 (2)."""
    mode = ("whole", "stream", "n=3")[k]
    case = Case(served, "server", name, k, mode)
    prompt = prompt_of(topic, k, chat)
    knobs = {"max_tokens": MAX_TOKENS, "seed": 100 + k, "temperature": 1.0 if k == 2 else 0.7}
    knobs |= {"n": 3} if k == 2 else {}
    extra = {"top_k": 40, "min_p": 0.05}
    fmt = response_format(name, schema)
    t0 = time.perf_counter()
    if chat:
        create = client.chat.completions.create
        asked = dict(
            model=served, messages=[{"role": "user", "content": prompt}], response_format=fmt, extra_body=extra
        )
    else:
        create = client.completions.create
        asked = dict(model=served, prompt=prompt, extra_body={**extra, "response_format": fmt})
    if mode == "stream":
        got, finish = "", None
        for chunk in create(**asked, **knobs, stream=True):
            for c in chunk.choices:
                got += (c.delta.content or "") if chat else c.text
                finish = c.finish_reason or finish
        case.answers.append((got, finish))
    else:
        out = create(**asked, **knobs)
        for c in out.choices:
            case.answers.append((c.message.content if chat else c.text, c.finish_reason))
        case.tokens = out.usage.completion_tokens
    case.seconds = time.perf_counter() - t0
    return judge(case, schema)


def generate_case(run_cli, model: str, served: str, chat: bool, name: str, topic: str, schema: dict, k: int) -> Case:
    """Prompt k of a schema through `tfcli generate --json-schema ... --json`; run_cli(*args) -> (exit code, stdout, stderr)."""
    case = Case(served, "generate", name, k, "generate")
    prompt = prompt_of(topic, k, chat)
    args = ["generate", "-m", model, prompt, "--json-schema", json.dumps(schema), "-n", str(MAX_TOKENS), "-t", "0.7",
            "--top-k", "40", "--min-p", "0.05", "--seed", str(200 + k), "--json"] + (["--chat"] if chat else [])  # fmt: skip
    t0 = time.perf_counter()
    code, out, err = run_cli(*args)
    case.seconds = time.perf_counter() - t0
    if code != 0:
        case.problems.append(f"exit {code}: {err.strip()[-300:]}")
        return case
    doc = json.loads(out)
    answer = doc["text"][len(prompt) :] if not chat and doc["text"].startswith(prompt) else doc["text"]
    reason = doc["stats"]["stop_reason"]
    case.answers.append((answer, "stop" if reason in ("grammar", "eos") else reason))
    case.tokens = doc["stats"]["new_tokens"]
    return judge(case, schema)


def in_process_cli():
    """tfcli's own entry point (error boundary included), run in this process: -> run_cli(*args)."""
    from typer.testing import CliRunner

    from tfcli.cli import app

    runner = CliRunner()

    def run(*args: str) -> tuple[int, str, str]:
        r = runner.invoke(app, list(args), env={"NO_COLOR": "1"})
        return r.exit_code, r.stdout, r.stderr

    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "tfcli", "serve", "-m", model, "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=2).close()
            return proc, url
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit(f"the server for {model} did not start")
            time.sleep(0.3)


def has_chat(model: str) -> bool:
    from tfcli.store import load

    return load(model).chat is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "-m", "--model", action="append", help="a model name or path (repeatable; default smollm2 and gemma3)"
    )
    ap.add_argument("--only", default=None, help="schema names, comma-separated (default: all 20)")
    ap.add_argument("--paths", default="server,generate", help="server, generate, or both (default)")
    ap.add_argument("--prompts", type=int, default=3, help="prompts per schema, 1-3 (default 3)")
    args = ap.parse_args()
    import openai

    models = args.model or ["smollm2", "gemma3"]
    chosen = [s for s in SCHEMAS if args.only is None or s[0] in args.only.split(",")]
    paths = args.paths.split(",")
    cases: list[Case] = []
    started = time.perf_counter()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    for model in models:
        served, chat = Path(model).name, has_chat(model)
        if "server" in paths:
            proc, url = start_server(model)
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=900, max_retries=0)
            try:
                for name, topic, schema in chosen:
                    for k in range(args.prompts):
                        cases.append(
                            guarded(
                                lambda: server_case(client, served, chat, name, topic, schema, k),
                                Case(served, "server", name, k, ("whole", "stream", "n=3")[k]),
                            )
                        )
                        report(cases[-1])
            finally:
                proc.terminate()
                proc.wait(30)
        if "generate" in paths:
            run_cli = in_process_cli()
            for name, topic, schema in chosen:
                for k in range(args.prompts):
                    cases.append(
                        guarded(
                            lambda: generate_case(run_cli, model, served, chat, name, topic, schema, k),
                            Case(served, "generate", name, k, "generate"),
                        )
                    )
                    report(cases[-1])
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    summary(cases, time.perf_counter() - started)
    sys.exit(0 if all(c.ok for c in cases) else 1)


def guarded(run, failed: Case) -> Case:
    """run() -> its Case; an error (a 400, a crash) is the case's failure, said in words."""
    try:
        return run()
    except Exception as e:  # noqa: BLE001 - reported, and the run goes on
        failed.problems.append(f"{type(e).__name__}: {str(e)[:300]}")
        return failed


def report(c: Case) -> None:
    mark = "ok " if c.ok else "FAIL"
    print(
        f"{mark} {c.model:>10} {c.path:>8} {c.schema:>9} prompt {c.prompt} {c.mode:>8} {c.seconds:6.1f} s",
        file=sys.stderr,
    )
    for p in c.problems:
        print(f"     {p}", file=sys.stderr)


def summary(cases: list[Case], seconds: float) -> None:
    print("\n| model | path | cases valid | answers valid | new tokens | time |")
    print("|---|---|---:|---:|---:|---:|")
    for model in dict.fromkeys(c.model for c in cases):
        for path in ("server", "generate"):
            some = [c for c in cases if c.model == model and c.path == path]
            if not some:
                continue
            answers = sum(len(c.answers) for c in some)
            bad = sum(len(c.problems) for c in some)
            print(f"| {model} | {path} | {sum(c.ok for c in some)}/{len(some)} | {answers - bad}/{answers} | "
                  f"{sum(c.tokens for c in some):,} | {sum(c.seconds for c in some):.0f} s |")  # fmt: skip
    print(f"\n{sum(c.ok for c in cases)} of {len(cases)} cases valid, {seconds:.0f} s in all")


if __name__ == "__main__":
    main()
