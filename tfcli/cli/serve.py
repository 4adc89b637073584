"""tfcli serve: the model behind an OpenAI-compatible HTTP server (tfcli/serve/)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options
from .lora import Lora, with_lora
from .quantize import Quantize
from .quantize import apply as apply_quantize
from .command import interrupted
from .console import note, warn
from .inputs import warned


def serve(
    model: options.Model = None,
    lora: Lora = None,
    host: Annotated[
        str,
        typer.Option(
            "--host", help="Address to listen on. Anything but loopback lets other machines in (a warning says so)."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    api_key: Annotated[
        Optional[str],
        typer.Option(
            "--api-key", help="Require 'Authorization: Bearer KEY' on every route but /health.", show_default=False
        ),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel",
            help="Sequences that share a decode step at most (requests join and leave it as they come and go).",
        ),
    ] = 8,
    queue: Annotated[
        int,
        typer.Option("--queue", help="Requests that may wait for a place; more are refused with 503 and Retry-After."),
    ] = 16,
    max_body: Annotated[
        int,
        typer.Option(
            "--max-body", help="Largest request body in MiB; a longer one is refused with 413 before it is read."
        ),
    ] = 16,
    batch_invariant: Annotated[
        bool,
        typer.Option(
            "--batch-invariant/--no-batch-invariant",
            help="Each request's numbers exactly those it gets alone, whatever shares its decode steps (a greedy "
            "answer never changes with the company). --no-batch-invariant: OpenBLAS's batched kernels, which round "
            "by the number of rows.",
        ),
    ] = True,
    prompt_cache: Annotated[
        int,
        typer.Option(
            "--prompt-cache",
            help="MiB of earlier requests' keys and values to keep (least recently used out): a request that starts "
            "like one of them, such as a chat's next turn, reads only what is new. 0 = off.",
        ),
    ] = 0,
    threads: options.Threads = None,
    kv_type: options.KvTypeOption = None,
    quantize: Quantize = None,
) -> None:
    """Serve a model over the OpenAI API: /v1/completions (with echo and logprobs), /v1/chat/completions
    (with response_format and tools), /v1/embeddings, /v1/models, /tokenize, /detokenize, /health,
    and the live explorer page at /.

    Concurrent requests share decode steps. Ctrl-C or SIGTERM ends open streams and stops.

    Examples:

      tfcli serve -m smollm2

      tfcli serve -m smollm2 --prompt-cache 512

      curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"prompt": "The sky is", "temperature": 0}'
    """
    from tfcli.engine.errors import UsageError

    if not 0 <= port < 65536:
        raise UsageError(f"--port must be between 0 and 65535, not {port}")
    if parallel < 1 or queue < 0:
        raise UsageError(f"--parallel must be at least 1 and --queue 0 or more, not {parallel} and {queue}")
    if not 1 <= max_body <= 4096:
        raise UsageError(f"--max-body must be between 1 and 4,096 (MiB), not {max_body:,}")
    if not 0 <= prompt_cache <= 1 << 20:
        raise UsageError(f"--prompt-cache must be between 0 (off) and 1,048,576 (MiB), not {prompt_cache:,}")
    from tfcli.serve import server as http

    sock = http.listen(host, port)  # first: a port in use or a host that is no address is said before the model loads
    port = sock.getsockname()[1]  # --port 0: the port the system chose
    if not http.is_loopback(host):
        keyless = "" if api_key else " and use it without a key (see --api-key)"
        warn(f"listening on {host}: other machines can reach this server{keyless}")
    n_threads = options.apply_threads(threads)
    lm = apply_quantize(warned(with_lora(options.load_model(model), lora)), quantize)
    options.apply_kv_type(lm, kv_type)
    name = model or lm.name
    from tfcli.serve.live import Page

    from . import explore

    lang = "zh" if options.chinese(None) else "en"
    from tfcli.analysis.experiments.steer import from_texts
    from tfcli.engine.fast import FAST

    page = Page(  # the explore page, run on the engine thread; the steering box gives its pass a direction
        lambda text, hooks: explore.page_html(lm, text, explore.page_tokens(lm, text), lang, hooks),
        lambda toward, away, layer, scale: from_texts(lm.model, lm.tokenizer, toward, away, layer, scale, FAST),
        lm.config.n_layer,
    )
    srv = http.build(
        lm,
        name,
        host,
        port,
        workers=n_threads,
        max_rows=parallel,
        queue=queue,
        api_key=api_key,
        page=page,
        invariant=batch_invariant,
        max_body=max_body << 20,
        prompt_cache=prompt_cache << 20,
    )
    shown_host = f"[{host}]" if ":" in host else host
    cached = f"; prompt cache {prompt_cache:,} MiB" if prompt_cache else ""
    note(f"serving {name} at http://{shown_host}:{port}/ (OpenAI API under /v1{cached}; Ctrl-C stops)")
    http.run(srv, sock)
    if srv.signalled is None and not srv.started:
        raise UsageError(f"could not listen on {host}:{port}", "is another server using the port? try --port")
    note("stopped")
    import signal

    if srv.signalled == signal.SIGINT:
        raise interrupted()
