"""tfcli serve: the OpenAI API over loopback, through the official openai client where it can.

Each server binds 127.0.0.1 on a free port, runs in a thread of the test process (the SIGTERM test
runs one as a process of its own), and is stopped by the test; every request has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import TINY_LLAMA, free_port
from tfcli.engine.fast import FAST

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

TIMEOUT = 60  # seconds for any one request


@contextlib.contextmanager
def serving(lm, name: str, **options):
    """A server for lm on a free loopback port, in a thread; stopped and joined on the way out."""
    from tfcli.serve import server as http
    from tfcli.serve.app import wait_ready

    port = free_port()
    srv = http.build(lm, name, "127.0.0.1", port, **options)
    thread = threading.Thread(target=http.run, args=(srv,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url + "/health", timeout=30)
        yield url, srv
    finally:
        srv.should_exit = True
        srv.batcher.stop(timeout=0)
        thread.join(15)
        assert not thread.is_alive(), "the server did not stop"


def post(url: str, body, key: str | None = None, raw: bytes | None = None) -> tuple[int, dict, dict]:
    """POST JSON; -> (status, body, headers) for success and error statuses alike."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read()), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers


@pytest.fixture(scope="module")
def smol(smollm2_folder):
    from tfcli.store import load

    return load(smollm2_folder)


@pytest.fixture(scope="module")
def server(smol):
    with serving(smol, "smollm2", max_rows=8, queue=16) as (url, srv):
        yield url, srv


def openai_client(url: str, key: str = "unused") -> openai.OpenAI:
    """The official client pointed at a server of these tests (no retries: a failure shows at once)."""
    return openai.OpenAI(base_url=url + "/v1", api_key=key, timeout=TIMEOUT, max_retries=0)


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server[0])


def test_the_model_list_names_the_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["smollm2"]


def test_a_greedy_completion_equals_tfcli_generate(client, cli, smollm2_folder):
    prompt = "The three primary colours are"
    r = cli("generate", "-m", smollm2_folder, prompt, "-t", "0", "-n", "24", "-q")
    assert r.exit_code == 0, r.stderr
    out = client.completions.create(model="smollm2", prompt=prompt, max_tokens=24, temperature=0)
    assert r.stdout in (prompt + out.choices[0].text, prompt + out.choices[0].text + "\n")  # generate echoes the prompt, ends with a newline
    assert out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 24


def test_echo_and_logprobs_equal_tfcli_score(client, cli, smollm2_folder, smol):
    """Against what `tfcli score` computes (engine/score.py); its --json prints 4 significant
    figures, so against that to its printed precision. The server's prompt pass feeds all 14
    tokens, score's the 13 that predict something: the attention products (BLAS) then sum in
    another order, and on SmolLM2's Q4_1 file an activation a float32 step away from a rounding
    edge of the kernels' 8-bit blocks lands on the other side: measured up to 5.1e-4 apart (AMD
    EPYC; 2.5e-5 with TFCLI_KERNELS=numpy), hence 1e-3."""
    from tfcli.engine.score import score

    text = "A learner reads the attention of a small model, token by token."
    r = cli("score", "-m", smollm2_folder, text, "--json")
    assert r.exit_code == 0, r.stderr
    scored = json.loads(r.stdout)["tokens"]
    exact = score(smol.model, smol.tokenizer.prompt(text), run=FAST).logprobs
    out = client.completions.create(model="smollm2", prompt=text, max_tokens=0, echo=True, logprobs=3, temperature=0)
    lp = out.choices[0].logprobs
    assert out.choices[0].text == text
    assert lp.tokens == [t["text"] for t in scored]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for got, want, printed in zip(lp.token_logprobs[1:], exact[1:], scored[1:]):
        assert abs(got - want) <= 1e-3
        assert abs(got - printed["logprob"]) <= 5e-4 * abs(printed["logprob"]) + 1e-3
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert all(text[o:].startswith(t) for o, t in zip(lp.text_offset, lp.tokens))
    assert all(len(top) == 3 and max(top.values()) >= got - 1e-9 for top, got in zip(lp.top_logprobs[1:], lp.token_logprobs[1:]))
    assert out.usage.completion_tokens == 0


def test_echo_with_new_tokens_continues_the_offsets(client):
    text = "Once upon a time"
    out = client.completions.create(model="smollm2", prompt=text, max_tokens=5, echo=True, logprobs=1, temperature=0)
    c = out.choices[0]
    assert c.text.startswith(text) and len(c.logprobs.tokens) == len(c.logprobs.token_logprobs) == 4 + 5
    assert all(c.text[o:].startswith(t) for o, t in zip(c.logprobs.text_offset, c.logprobs.tokens))


def test_a_streamed_chat_carries_top_logprobs(client):
    stream = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Name a colour."}], max_tokens=12, temperature=0, stream=True, logprobs=True, top_logprobs=3
    )
    pieces, entries, finish = [], [], None
    for chunk in stream:
        c = chunk.choices[0]
        pieces.append(c.delta.content or "")
        if c.logprobs and c.logprobs.content:
            entries += c.logprobs.content
        finish = c.finish_reason or finish
    assert finish in ("stop", "length") and 0 < len(entries) <= 12
    for e in entries:
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob >= e.logprob - 1e-9  # greedy: the chosen is the top
        assert e.token == e.top_logprobs[0].token
    whole = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Name a colour."}], max_tokens=12, temperature=0)
    assert "".join(pieces) == whole.choices[0].message.content


def test_stop_n_and_seed(client):
    a = client.completions.create(model="smollm2", prompt="Count: 1, 2, 3,", max_tokens=20, temperature=0, stop=[" 6"])
    assert a.choices[0].finish_reason == "stop" and a.choices[0].text.endswith("5,") and " 6" not in a.choices[0].text
    b = client.completions.create(model="smollm2", prompt="My favourite animal is", max_tokens=8, temperature=1.0, n=3, seed=7)
    c = client.completions.create(model="smollm2", prompt="My favourite animal is", max_tokens=8, temperature=1.0, n=3, seed=7)
    assert [x.text for x in b.choices] == [x.text for x in c.choices] and len(b.choices) == 3
    assert len({x.text for x in b.choices}) > 1  # choice i draws with seed + i


def test_a_streamed_completion_ends_with_done(server):
    url = server[0]
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps({"prompt": "Hello", "max_tokens": 4, "stream": True, "temperature": 0}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        lines = [l for l in r.read().decode().split("\n\n") if l]
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_tokenize_and_detokenize(server, smol):
    url = server[0]
    status, body, _ = post(url + "/tokenize", {"content": "Hello world"})
    assert status == 200 and body["tokens"] == smol.tokenizer.encode("Hello world")
    status, body, _ = post(url + "/detokenize", {"tokens": body["tokens"]})
    assert status == 200 and body["content"] == "Hello world"
    status, body, _ = post(url + "/tokenize", {"content": "Hi", "with_pieces": True})
    assert body["tokens"][0]["piece"] == "Hi"


BAD = [
    ("/v1/completions", None, b"{not json", 400, None),
    ("/v1/completions", None, b"[1, 2]", 400, None),
    ("/v1/completions", {"max_tokens": 3}, None, 400, "prompt"),
    ("/v1/completions", {"prompt": "a", "temperature": -1}, None, 400, "temperature"),
    ("/v1/completions", {"prompt": "a", "temperature": "hot"}, None, 400, "temperature"),
    ("/v1/completions", {"prompt": "a", "top_p": 0}, None, 400, "top_p"),
    ("/v1/completions", {"prompt": "a", "n": 0}, None, 400, "n"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 0}, None, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 100000}, None, 400, "max_tokens"),
    ("/v1/completions", {"prompt": [1, 99999999]}, None, 400, "prompt"),
    ("/v1/completions", {"prompt": "a", "stop": [""]}, None, 400, "stop"),
    ("/v1/completions", {"prompt": "a", "logprobs": 50}, None, 400, "logprobs"),
    ("/v1/completions", {"prompt": "a", "model": "gpt-4"}, None, 404, "model"),
    ("/v1/chat/completions", {"messages": []}, None, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2}, None, 400, "top_logprobs"),
    ("/v1/nothing", {}, None, 404, None),
]


@pytest.mark.parametrize("path, body, raw, status, param", BAD, ids=[f"{p}-{s}-{param or (raw or b'')[:6].decode()}" for p, _, raw, s, param in BAD])
def test_a_bad_request_gets_its_status_and_an_error_object(server, path, body, raw, status, param):
    url = server[0]
    got, answer, _ = post(url + path, body, raw=raw)
    assert got == status, answer
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    ok, _, _ = post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 1})  # and the server goes on
    assert ok == 200


def test_an_overlong_prompt_is_refused_with_the_numbers(server, smol):
    n_ctx = smol.config.n_ctx
    status, answer, _ = post(server[0] + "/v1/completions", {"prompt": [1] * (n_ctx + 5), "max_tokens": 1})
    assert status == 400 and str(n_ctx) in answer["error"]["message"] and str(n_ctx + 5) in answer["error"]["message"]
    assert answer["error"]["code"] == "context_length_exceeded"


def test_the_openai_client_sees_the_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="a", max_tokens=1)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="smollm2", prompt="a", max_tokens=1, temperature=-3)


def six_streams(url: str) -> tuple[list[str], list[str]]:
    """Six greedy requests one after another, then the same six streamed at once, arriving while
    the others decode: -> (answers alone, answers together)."""
    client = openai_client(url)
    prompts = ["The sun", "Water boils at", "def add(a, b):", "Paris is", "Once upon a time", "1, 2, 3,"]
    lengths = [20, 14, 24, 9, 18, 12]  # different budgets: rows leave the batch at different steps
    alone = [client.completions.create(model="smollm2", prompt=p, max_tokens=n, temperature=0).choices[0].text for p, n in zip(prompts, lengths)]

    def streamed(i: int) -> str:
        time.sleep(0.05 * i)
        stream = client.completions.create(model="smollm2", prompt=prompts[i], max_tokens=lengths[i], temperature=0, stream=True)
        return "".join(c.choices[0].text for c in stream)

    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(streamed, range(6)))
    return alone, together


def test_six_concurrent_streamed_greedy_requests_each_equal_their_answer_alone(smol):
    """By default, to the token: each row's products are the one-row products (two threads, as
    `tfcli serve` runs on an idle 2-core machine: half of each product's blocks on the helper)."""
    with serving(smol, "smollm2", workers=2) as (url, srv):
        alone, together = six_streams(url)
        assert together == alone
        assert srv.batcher.steps < sum([20, 14, 24, 9, 18, 12]) * 2 - 6 * 2  # the streams shared steps


def test_concurrent_requests_share_decode_steps_with_the_batched_kernels(smol):
    """--no-batch-invariant: the six streams run in fewer steps than one after another. Their
    texts agree with the answers alone up to float32 rounding of OpenBLAS's batched products,
    which can flip a near-tie, so only their beginnings are compared."""
    with serving(smol, "smollm2", invariant=False) as (url, srv):
        alone, together = six_streams(url)
    shared = srv.batcher.steps - (sum([20, 14, 24, 9, 18, 12]) - 6)  # steps of the concurrent half
    assert shared < sum([20, 14, 24, 9, 18, 12]) - 6
    assert sum(a[:8] == t[:8] for a, t in zip(alone, together)) >= 5


def test_a_client_that_goes_away_frees_its_place(server):
    url = server[0]
    port = int(url.rsplit(":", 1)[1])
    # ignore_eos: a sampled story can end after three tokens, and then no client holds a place
    body = json.dumps({"prompt": "Tell me a long story.", "max_tokens": 2000, "stream": True, "temperature": 0.8, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    while got.count(b"data: ") < 3:
        got += s.recv(4096)
    assert json.loads(urllib.request.urlopen(url + "/health", timeout=TIMEOUT).read())["running"] == 1
    s.close()  # killed mid-stream
    deadline = time.monotonic() + 10
    while json.loads(urllib.request.urlopen(url + "/health", timeout=TIMEOUT).read())["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(urllib.request.urlopen(url + "/health", timeout=TIMEOUT).read())["running"] == 0


def test_a_client_that_leaves_before_a_whole_answer_frees_its_place(server):
    """Not streamed: nothing is sent until the end, yet the rows are freed when the client goes."""
    url = server[0]
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"prompt": "Tell me a long story.", "max_tokens": 2000, "temperature": 0.8, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    deadline = time.monotonic() + 10
    while not json.loads(urllib.request.urlopen(url + "/health", timeout=TIMEOUT).read())["running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    steps = server[1].batcher.steps
    s.close()
    deadline = time.monotonic() + 10
    while json.loads(urllib.request.urlopen(url + "/health", timeout=TIMEOUT).read())["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(urllib.request.urlopen(url + "/health", timeout=TIMEOUT).read())["running"] == 0
    assert server[1].batcher.steps - steps < 200  # stopped long before its 2,000 tokens


def test_a_long_prompt_is_run_a_part_at_a_time_between_the_steps_of_the_others(server):
    """A 600-token prompt arriving while a stream decodes: the stream goes on between its parts."""
    url, srv = server
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"prompt": "Count to a thousand:", "max_tokens": 2000, "stream": True, "temperature": 0.8, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while got.count(b"data: ") < 2:
            got += s.recv(4096)
        before = srv.batcher.steps
        status, answer, _ = post(url + "/v1/completions", {"prompt": [1] + [1005] * 599, "max_tokens": 1, "temperature": 0})
        assert status == 200 and answer["usage"]["prompt_tokens"] == 600
        assert srv.batcher.steps - before >= 600 // 256  # a decode step of the stream between every two parts
    finally:
        s.close()


def run_to_the_end(batcher, done: threading.Semaphore, jobs: int) -> None:
    """Start the batcher, wait until `jobs` jobs have said Finished (each releases `done`), stop it."""
    batcher.start()
    try:
        for _ in range(jobs):
            assert done.acquire(timeout=TIMEOUT)
    finally:
        batcher.stop()


def test_short_prompts_that_come_together_start_decoding_together(smol):
    """Three requests at once: their prompts run in one turn of the engine's loop (up to one
    part's positions), so every decode step carries all three rows (one at a time, the first
    would have decoded two steps alone)."""
    from tfcli.engine.sampling import SamplingParams
    from tfcli.serve.batcher import Batcher, Job
    from tfcli.serve.events import Finished

    batcher = Batcher(smol, max_rows=8)
    done = threading.Semaphore(0)
    ids = smol.tokenizer.encode("The sun")
    for i in range(3):
        batcher.submit(Job([ids], [SamplingParams(temperature=0.8, seed=i)], 1, 6, lambda ev: isinstance(ev, Finished) and done.release()))
    run_to_the_end(batcher, done, 3)
    assert batcher.steps == 6 - 1  # 6 tokens each: 6 draws, a step between each two


def test_short_prompts_that_come_together_share_one_pass_and_each_answers_as_alone(smol, monkeypatch):
    """Four requests at once on the compiled blocks (SmolLM2's Q4_1 file): their prompts run in one
    pass, every weight read once for all four, and each answer is its answer alone, token for token
    (sampled, each with its seed); a request alone takes its own pass."""
    from tfcli.engine.sampling import SamplingParams
    from tfcli.serve import batcher as B

    passes: list[list[int]] = []
    real = B.prefill_together
    monkeypatch.setattr(B, "prefill_together", lambda sessions, prompts: passes.append([len(p) for p in prompts]) or real(sessions, prompts))
    prompts = [smol.tokenizer.encode(t) for t in ("The sun", "Once upon a time", "def add(a, b):", "Paris is")]

    def answers(which: list[int]) -> list[list[int]]:
        batcher, done = B.Batcher(smol, workers=2, max_rows=8), threading.Semaphore(0)
        got: dict[int, list[int]] = {i: [] for i in which}
        for i in which:
            emit = lambda ev, i=i: got[i].append(ev.token) if isinstance(ev, B.Token) else isinstance(ev, B.Finished) and done.release()
            batcher.submit(B.Job([prompts[i]], [SamplingParams(temperature=0.8, seed=i)], 1, 12, emit))
        run_to_the_end(batcher, done, len(which))
        return [got[i] for i in which]

    alone = [answers([i])[0] for i in range(4)]
    assert passes == []
    assert answers([0, 1, 2, 3]) == alone
    assert passes == [[len(p) for p in prompts]]


def test_a_request_of_two_prompts_and_two_choices_shares_the_pass_as_they_run_apart(smol, monkeypatch):
    """A request of two prompts with two choices each, beside a request of one: the three prompts share
    one pass, and each choice's tokens are those it gets with every prompt run on its own."""
    from tfcli.engine.fast.run.fast_executor import Fast
    from tfcli.engine.sampling import SamplingParams
    from tfcli.serve import batcher as B

    prompts = [smol.tokenizer.encode(t) for t in ("The sun", "Paris is", "Once upon a time")]
    real, passes, shared = Fast.rows_apart, [], B.prefill_together
    monkeypatch.setattr(B, "prefill_together", lambda sessions, ps: passes.append(len(ps)) or shared(sessions, ps))

    def answers(together: bool) -> dict:
        monkeypatch.setattr(Fast, "rows_apart", real if together else lambda self, model, rows: False)
        batcher, done, got = B.Batcher(smol, workers=2, max_rows=8), threading.Semaphore(0), {}

        def emit(name):
            return lambda ev: got.setdefault((name, ev.choice), []).append(ev.token) if isinstance(ev, B.Token) else isinstance(ev, B.Finished) and done.release()

        batcher.submit(B.Job(prompts[:2], [SamplingParams(temperature=0.8, seed=s) for s in range(4)], 2, 8, emit("two")))
        batcher.submit(B.Job(prompts[2:], [SamplingParams(temperature=0.8, seed=9)], 1, 8, emit("one")))
        run_to_the_end(batcher, done, 2)
        return got

    apart = answers(False)
    assert sorted(apart) == [("one", 0), ("two", 0), ("two", 1), ("two", 2), ("two", 3)] and passes == []
    assert answers(True) == apart and passes == [3]


def test_an_idle_engine_waits_a_moment_for_requests_being_checked(smol, monkeypatch):
    """A request submitted while two more are still being read and checked (Batcher.arriving): the
    idle engine waits for them (GATHER at most), and the three prompts share one pass. A request
    whose check fails leaves the count, so nothing waits for it."""
    from tfcli.engine.sampling import SamplingParams
    from tfcli.serve import batcher as B

    passes: list[int] = []
    real = B.prefill_together
    monkeypatch.setattr(B, "prefill_together", lambda sessions, prompts: passes.append(len(prompts)) or real(sessions, prompts))
    monkeypatch.setattr(B, "GATHER", 5.0)  # a slow machine's moment; the test waits for far less
    batcher, done = B.Batcher(smol, workers=2), threading.Semaphore(0)
    job = lambda i: B.Job([smol.tokenizer.encode(f"Number {i} is")], [SamplingParams(temperature=0)], 1, 3, lambda ev: isinstance(ev, B.Finished) and done.release())
    with pytest.raises(ValueError), batcher.arriving():
        raise ValueError("a body that does not parse")
    assert batcher.coming == 0
    batcher.start()
    try:
        with batcher.arriving() as a, batcher.arriving() as b, batcher.arriving() as c:
            batcher.submit(job(0), a)
            time.sleep(0.2)  # the engine waits: nothing has run
            assert not batcher.rows and passes == []
            batcher.submit(job(1), b)
            batcher.submit(job(2), c)
        for _ in range(3):
            assert done.acquire(timeout=TIMEOUT)
    finally:
        batcher.stop()
    assert passes == [3] and batcher.coming == 0


def test_a_full_queue_answers_503_with_retry_after(smol):
    with serving(smol, "smollm2", max_rows=1, queue=1) as (url, srv):
        busy = threading.Thread(target=post, args=(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 40, "temperature": 0}))
        busy.start()
        while not srv.batcher.rows:  # the first request runs
            time.sleep(0.01)
        waiting = threading.Thread(target=post, args=(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2}))
        waiting.start()
        while not srv.batcher.waiting:  # the second waits for the one place
            time.sleep(0.01)
        status, answer, headers = post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert status == 503 and answer["error"]["code"] == "server_busy" and headers.get("Retry-After") == "1"
        busy.join(TIMEOUT)
        waiting.join(TIMEOUT)
        assert post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2})[0] == 200


def test_the_api_key_is_required_when_set(smol):
    with serving(smol, "smollm2", api_key="sesame") as (url, _):
        assert post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 1})[0] == 401
        assert post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 1}, key="wrong")[0] == 401
        assert post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 1}, key="sesame")[0] == 200
        assert urllib.request.urlopen(url + "/health", timeout=TIMEOUT).status == 200
        c = openai_client(url, key="sesame")
        assert c.models.list().data[0].id == "smollm2"


def test_chat_is_refused_clearly_without_a_template():
    from tfcli.store import load

    lm = load(TINY_LLAMA)
    assert lm.chat is None
    with serving(lm, "tiny") as (url, _):
        status, answer, _ = post(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and "no chat template" in answer["error"]["message"] and answer["error"]["code"] == "no_chat_template"
        assert post(url + "/v1/completions", {"prompt": "hi", "max_tokens": 3})[0] == 200


def test_a_burst_of_50_requests_from_10_threads_is_answered_or_refused(smol):
    with serving(smol, "smollm2", max_rows=4, queue=4) as (url, srv):

        def one(i: int) -> int:
            return post(url + "/v1/completions", {"prompt": f"Number {i}:", "max_tokens": 4, "temperature": 0.5, "seed": i})[0]

        def rss() -> int:
            return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

        sizes = []
        for burst in range(2):  # memory after the second burst is what it was after the first: nothing kept
            t0 = time.monotonic()
            with ThreadPoolExecutor(10) as pool:
                statuses = list(pool.map(one, range(50), timeout=120))
            assert set(statuses) <= {200, 503} and statuses.count(200) >= 4, statuses
            assert time.monotonic() - t0 < 120
            deadline = time.monotonic() + 5  # the last answer can leave before the engine thread drops its row
            while srv.batcher.load["running"] and time.monotonic() < deadline:
                time.sleep(0.01)
            assert srv.batcher.load["running"] == 0 and srv.batcher.load["waiting"] == 0
            sizes.append(rss())
        assert sizes[1] - sizes[0] < 64 << 20, sizes


def test_sigterm_ends_the_open_stream_and_exits(smollm2_folder, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent), "TFCLI_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "tfcli", "serve", "-m", str(smollm2_folder), "--port", str(port), "--threads", "1"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        from tfcli.serve.app import wait_ready

        wait_ready(f"http://127.0.0.1:{port}/health", timeout=600)  # a cold kernel cache compiles first (minutes)
        body = json.dumps({"prompt": "1, 2, 3, 4, 5,", "max_tokens": 3000, "stream": True, "temperature": 0}).encode()  # counts on for long
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            first = r.readline()
            assert first.startswith(b"data: ")
            proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            rest = r.read().decode()
        assert rest.rstrip().endswith("data: [DONE]")
        last = json.loads([l.strip() for l in rest.split("\n\n") if l.strip().startswith("data: {")][-1][6:])
        assert last["choices"][0]["finish_reason"] == "abort"
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - t0 < 8
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()


def test_other_commands_do_not_import_the_server_stack():
    code = "import sys, tfcli.cli; print(sorted(m for m in ('starlette', 'uvicorn', 'tfcli.serve') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert out.stdout.strip() == "[]", out


def test_only_loopback_hosts_count_as_private():
    from tfcli.serve.server import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "example.com"))


def test_a_public_host_is_warned_about(cli, monkeypatch):
    """The warning comes before anything is loaded or bound (here the model is missing)."""
    r = cli("serve", "-m", "/nonexistent/model", "--host", "0.0.0.0", "--port", "0")
    assert r.exit_code == 1 and "warning: listening on 0.0.0.0" in r.stderr and "without a key" in r.stderr
