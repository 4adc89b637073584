"""Running the app under uvicorn: one engine thread, and a stop that ends open streams cleanly.

SIGINT / SIGTERM: uvicorn stops accepting and waits for open connections; the engine thread is
told at the same moment to end every running request (finish_reason "abort"), so each stream gets
its last chunk and `data: [DONE]` and closes, and the process exits within a few seconds.
"""

from __future__ import annotations

import ipaddress
import signal

import uvicorn

from tfcli.engine.loader import LoadedModel

from .app import create_app
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


def build(lm: LoadedModel, name: str, host: str, port: int, workers: int = 1, max_rows: int = 8, queue: int = 16, api_key: str | None = None, page=None, invariant: bool = True) -> Server:
    batcher = Batcher(lm, workers=workers, max_rows=max_rows, queue=queue, invariant=invariant)
    app = create_app(lm, name, batcher, api_key=api_key, page=page)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACE_SECONDS, lifespan="off")
    return Server(config, batcher)


def run(server: Server) -> None:
    server.batcher.start()
    try:
        server.run()
    finally:
        server.batcher.stop()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
