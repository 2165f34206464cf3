"""The server for some routes, run by uvicorn in a thread of this process on a free port of 127.0.0.1:
for a command that sends requests through the same HTTP path clients take (``llmproxy bfcl``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from llmproxy.route import Route
from llmproxy.server.app import create_app
from llmproxy.server.config import ConnectionLimits
from llmproxy.server.connections import uvicorn_options

START_SECONDS = 10.0


@contextmanager
def serving_in_background(routes: dict[str, Route]) -> Iterator[str]:
    """Serve ``routes`` (model name -> route) until the block ends; yields the base URL
    (``http://127.0.0.1:PORT/v1``)."""
    import uvicorn

    # A TCP socket named as such, so asyncio turns Nagle off on each connection, as on uvicorn's own.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(routes), log_level="warning", access_log=False,
                            **uvicorn_options(ConnectionLimits()))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="llmproxy-background")
    thread.start()
    deadline = time.monotonic() + START_SECONDS
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError("the in-process llmproxy server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(START_SECONDS)
        sock.close()
