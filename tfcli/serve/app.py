"""The HTTP side: Starlette routes that check a request, hand it to the engine thread and answer.

Routes: GET /health, GET /v1/models, POST /v1/completions, POST /v1/chat/completions,
POST /v1/embeddings, POST /tokenize, POST /detokenize (llama.cpp's shapes), and the live explorer at GET / with its
pass at POST /explore. A handler never runs the model: it submits a Job (serve/batcher.py) and
awaits its events, which the engine thread hands over with call_soon_threadsafe. A stream that
ends early (the client went away, the task was cancelled) cancels its job, and so does a client
that leaves before a whole answer is ready: either frees its rows at the next step.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tfcli.engine.errors import TfcliError
from tfcli.engine.embeddings import embedding, pooling_of
from tfcli.engine.fast import FAST
from tfcli.engine.loader import LoadedModel

from . import api, body
from .api import ApiError
from .batcher import Arrival, Batcher, Busy, Job
from .events import Failed, Finished
from .shapes import ChatShape, CompletionShape, Shape, embeddings_body

OPEN_PATHS = ("/health",)  # answered without the API key


def create_app(
    lm: LoadedModel,
    name: str,
    batcher: Batcher,
    api_key: str | None = None,
    page=None,
    max_body: int = body.MAX_BODY_MB << 20,
) -> Starlette:
    """page: the live explorer (serve/live.py), or None; max_body: the longest body read, in bytes.

    The event loop only moves bytes: a body is parsed, checked and tokenized on the request thread
    (one thread, so that the tokenizer is never entered twice at once), and the model runs on the
    engine thread. A request that takes a while to check (a long prompt) never delays another
    client's /health or stream."""
    checker = ThreadPoolExecutor(1, thread_name_prefix="tfcli-requests")

    async def checked(request: Request, check, *args):
        """check(the parsed body, *args), on the request thread, after reading the body to its bound."""
        raw = await body.read(request, max_body)
        return await asyncio.get_running_loop().run_in_executor(checker, lambda: check(body.parse(raw), *args))

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": name, **batcher.load})

    async def models(request: Request) -> Response:
        card = {
            "id": name,
            "object": "model",
            "created": int(lm.path.stat().st_mtime),
            "owned_by": "tfcli",
            "max_model_len": lm.config.n_ctx,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def completions(request: Request) -> Response:
        with batcher.arriving() as arrival:
            asked = await checked(request, api.completion, lm, name)
            return await _answer(
                request,
                asked,
                CompletionShape(asked, lm.tokenizer, name),
                arrival,
                echo_logprobs=asked.echo and asked.logprobs is not None,
            )

    async def chat(request: Request) -> Response:
        with batcher.arriving() as arrival:
            asked = await checked(request, api.chat, lm, name)
            return await _answer(request, asked, ChatShape(asked, lm.tokenizer, name), arrival, echo_logprobs=False)

    pooling = pooling_of(lm.path if lm.path.is_dir() else lm.path.parent)

    async def embeddings(request: Request) -> Response:
        asked = await checked(request, api.embeddings, lm, name)

        def run() -> list:  # on the engine thread, between two decode steps
            return [embedding(lm.model, ids, pooling, asked.dimensions, FAST) for ids in asked.inputs]

        try:
            vectors = await asyncio.wrap_future(batcher.call(run))
        except Busy as e:
            raise ApiError(
                503,
                f"the server is busy ({e}); retry in a moment",
                None,
                "server_busy",
                "server_error",
                {"Retry-After": "1"},
            ) from None
        except TfcliError as e:
            raise ApiError(400, str(e), "input") from None
        return JSONResponse(embeddings_body(asked, vectors, name))

    async def tokenize(request: Request) -> Response:
        return JSONResponse(await checked(request, api.tokenize, lm))

    async def detokenize(request: Request) -> Response:
        return JSONResponse(await checked(request, api.detokenize, lm))

    async def _answer(
        request: Request, asked: api.Asked, shape: Shape, arrival: Arrival, echo_logprobs: bool
    ) -> Response:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()  # events, or lists of them
        held: list = []  # a whole answer's events so far (not streamed)

        def emit(ev) -> None:  # on the engine thread
            if (
                not asked.stream
            ):  # nothing is sent before the end: the events go to the event loop together, with the last,
                held.append(ev)  # not one wake-up of the loop (a thread on the engine's cores) per token
                if not isinstance(ev, Finished):
                    return
                ev = held[:]
            try:
                loop.call_soon_threadsafe(events.put_nowait, ev)
            except RuntimeError:  # the event loop has closed: nobody is listening any more
                pass

        job = Job(
            asked.prompts,
            asked.params,
            asked.n,
            asked.max_tokens,
            emit,
            stop=asked.stop,
            eos_ids=asked.eos_ids,
            logprobs=asked.logprobs,
            echo_logprobs=echo_logprobs,
            grammar=asked.grammar,
        )
        shape.job = job
        if batcher.prompts and not echo_logprobs:
            job.cached_tokens = 0
        try:
            batcher.submit(job, arrival)  # no longer arriving (Batcher.arriving)
        except Busy as e:
            raise ApiError(
                503,
                f"the server is busy ({e}); retry in a moment",
                None,
                "server_busy",
                "server_error",
                {"Retry-After": "1"},
            ) from None
        if asked.stream:
            return StreamingResponse(
                _stream(job, events, shape, asked.include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        watch = asyncio.ensure_future(
            _gone(request, job)
        )  # nothing is sent before the answer: listen for the client leaving
        try:
            async for ev in _events(job, events):
                shape.add(ev)
        finally:
            watch.cancel()
            batcher.cancel(job)  # no-op once finished; frees the rows if this handler is cancelled
        return JSONResponse(shape.whole())

    async def _gone(request: Request, job: Job) -> None:
        """Cancel the job when the client disconnects (its body has been read, so the next
        message the server has for this request is the disconnect)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass
        batcher.cancel(job)

    async def _events(job: Job, events: asyncio.Queue):
        while True:
            got = await events.get()
            for ev in got if isinstance(got, list) else (got,):
                if isinstance(ev, Finished):
                    return
                if isinstance(ev, Failed):
                    raise ApiError(
                        ev.status, ev.message, kind="server_error" if ev.status >= 500 else "invalid_request_error"
                    )
                yield ev

    async def _stream(job: Job, events: asyncio.Queue, shape: Shape, include_usage: bool):
        try:
            for c in shape.first_chunks():
                yield _sse(c)
            try:
                async for ev in _events(job, events):
                    for c in shape.add(ev):
                        yield _sse(c)
            except ApiError as e:  # the status line has gone: the error goes in the stream
                yield _sse(e.body())
            if include_usage:
                yield _sse(shape.usage_chunk())
            yield "data: [DONE]\n\n"
        finally:
            batcher.cancel(job)  # a client that went away frees its rows at the next step

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
    ]
    if page is not None:
        routes += page.routes(batcher)
    handlers = {
        ApiError: _api_error,
        HTTPException: _http_error,
        body.Gone: _gone_client,
        ClientDisconnect: _gone_client,
        Exception: _server_error,
    }
    app = Starlette(routes=routes, exception_handlers=handlers)
    return Keyed(app, api_key) if api_key else app


def _sse(doc: dict) -> str:
    return f"data: {json.dumps(doc, ensure_ascii=False)}\n\n"


async def _api_error(request: Request, e: ApiError) -> Response:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


async def _gone_client(request: Request, e: Exception) -> Response:
    """The client left before its body was whole: nobody reads this answer, and nothing is logged."""
    return Response(status_code=400)


async def _http_error(request: Request, e: HTTPException) -> Response:
    kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
    message = f"no route {request.method} {request.url.path}" if e.status_code in (404, 405) else str(e.detail)
    return JSONResponse(
        ApiError(e.status_code, message, kind=kind).body(),
        status_code=e.status_code,
        headers=getattr(e, "headers", None),
    )


async def _server_error(request: Request, e: Exception) -> Response:
    return JSONResponse(
        ApiError(500, f"internal error: {type(e).__name__}: {e}", kind="server_error").body(), status_code=500
    )


class Keyed:
    """ASGI middleware: every path but /health needs `Authorization: Bearer KEY` (compared in constant time)."""

    def __init__(self, app, key: str):
        self.app, self.key = app, key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + self.key):
                body = ApiError(
                    401, "a valid API key is required: send 'Authorization: Bearer KEY'", None, "invalid_api_key"
                ).body()
                await JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


def wait_ready(url: str, timeout: float = 10.0) -> None:
    """Poll GET url until it answers (for tests and the benchmark)."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
