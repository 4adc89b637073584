"""Running the app under uvicorn: one engine thread, and a stop that ends open streams cleanly.

SIGINT / SIGTERM: uvicorn stops accepting and waits for open connections; the engine thread is
told at the same moment to end every running request (finish_reason "abort"), so each stream gets
its last chunk and `data: [DONE]` and closes, and the process exits within a few seconds.
"""

from __future__ import annotations

import errno
import ipaddress
import signal
import socket

import uvicorn

from tfcli.engine.errors import TfcliError, UsageError, shown
from tfcli.engine.loader import LoadedModel

from .app import create_app
from .body import MAX_BODY_MB
from .batcher import Batcher

GRACE_SECONDS = 3  # how long uvicorn waits for open connections after a stop


class Server(uvicorn.Server):
    """uvicorn's server, whose stop also ends the engine's running requests. A signal is remembered
    (`signalled`) instead of being raised again after the stop, so the CLI chooses the exit code."""

    def __init__(self, config: uvicorn.Config, batcher: Batcher):
        super().__init__(config)
        self.batcher = batcher
        self.signalled: int | None = None

    def handle_exit(self, sig: int, frame) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop waiting
        self.signalled = sig
        self.should_exit = True
        self.batcher.stop(timeout=0)


def build(
    lm: LoadedModel,
    name: str,
    host: str,
    port: int,
    workers: int = 1,
    max_rows: int = 8,
    queue: int = 16,
    api_key: str | None = None,
    page=None,
    invariant: bool = True,
    max_body: int = MAX_BODY_MB << 20,
    prompt_cache: int = 0,
) -> Server:
    """prompt_cache: bytes of earlier requests' keys and values kept (serve/promptcache.py); 0: none."""
    batcher = Batcher(
        lm, workers=workers, max_rows=max_rows, queue=queue, invariant=invariant, prompt_cache=prompt_cache
    )
    app = create_app(lm, name, batcher, api_key=api_key, page=page, max_body=max_body)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACE_SECONDS, lifespan="off"
    )
    return Server(config, batcher)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port and listening, or one line saying why not: tfcli binds it, not
    uvicorn, so that a port in use or a host that is no address is tfcli's own error (exit 1 for a
    port in use or not allowed, 2 for a host that is no address), not uvicorn's log line."""
    if not host.strip():
        raise UsageError("--host is empty", "give an address: 127.0.0.1 (this machine only) or 0.0.0.0 (every address)")
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as e:
        why = e.strerror if isinstance(e, socket.gaierror) and e.strerror else type(e).__name__
        raise UsageError(
            f"--host {shown(host, 200)} is not an address this machine can listen on ({why})",
            "give an IP address such as 127.0.0.1, or a name that resolves",
        ) from None
    family, kind, proto, _, address = found[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
        )  # as uvicorn does: a restart need not wait for TIME_WAIT
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        where = f"{shown(host, 200)}:{port}"
        if e.errno == errno.EADDRINUSE:
            raise TfcliError(
                f"port {port} is in use on {where}: another server listens there", "stop it, or choose another --port"
            ) from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise TfcliError(
                f"listening on {where} is not allowed ({e.strerror})",
                "ports below 1024 need privileges: use --port 8000 or above",
            ) from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise UsageError(
                f"--host {shown(host, 200)} is not an address of this machine ({e.strerror})",
                "use 127.0.0.1, 0.0.0.0, or one of this machine's addresses",
            ) from None
        raise TfcliError(f"cannot listen on {where}: {e.strerror or type(e).__name__}") from None
    return sock


def run(server: Server, sock: socket.socket | None = None) -> None:
    """Serve until stopped; on `sock` (listen()) if given, else on the config's host and port."""
    server.batcher.start()
    try:
        server.run(sockets=[sock] if sock is not None else None)
    finally:
        server.batcher.stop()
        if sock is not None:
            sock.close()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
