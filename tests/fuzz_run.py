"""The server a fuzzing run sends its cases to, and how one case is sent and timed.

A real server (tests/server_helpers.py: uvicorn in a thread, instant in-process backends) with a route
per call syntax family, so that a case reaches each way of rendering a conversation (a case's
``model`` picks one; any other name is answered by ``fake``), and with the inspector's capture on,
which keeps every request's body. Before the first case it stores a Responses turn and captures a
request, which the seeds' placeholders then name (tests/fuzz_endpoints.py). Shared by
tests/test_fuzz_faces.py and bench/bench_fuzz.py.

The server's error log is kept too: a failure after an answer went out (storing a response that was
streamed whole) shows nowhere else, but in the next request on the connection that it closed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from fuzz_endpoints import Endpoint, with_run
from fuzz_mutations import encode
from server_helpers import InstantBackend, RunningServer, route, running

# Served model -> its wrapper: JSON calls, MemGPT's, Hermes' tags, Qwen3-Coder's XML, Mistral's name
# and arguments, Llama 3.2's Python calls.
WRAPPERS = {"fake": "chatml-json", "memgpt": "chatml", "hermes": "hermes", "qwen3-coder": "qwen3-coder",
            "mistral-v11": "mistral-v11", "llama3.2": "llama3.2"}


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    seconds: float


class Target:
    """A running server, a client kept open to it, and what its seeds' placeholders stand for: a stored
    response's id, and a captured request's number in the inspector (one recaptured before the
    inspector's list of the last 500 requests lets it go)."""

    RECAPTURE = 400  # requests

    def __init__(self, server: RunningServer, client: httpx.Client) -> None:
        self.server = server
        self.client = client
        self.root = server.base_url.removesuffix("/v1")
        stored = client.post(server.base_url + "/responses", json={"model": "fake", "input": "Hi", "store": True})
        self.previous = stored.json()["id"]
        self.seq = self.sent = 0
        self.capture()
        self.errors = _Kept(logging.ERROR)

    def capture(self) -> None:
        """A request captured afresh, for the placeholder to name (after requests sent by other means)."""
        self.client.post(self.server.base_url + "/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]})
        self.seq = self.client.get(self.root + "/inspect/api/requests").json()[-1]["seq"]

    def send(self, endpoint: Endpoint, body: Any) -> Answer:
        self.sent += 1
        if self.sent % self.RECAPTURE == 0:
            self.capture()
        path = with_run(endpoint.path, self.previous, self.seq)
        payload = with_run(encode(body).decode(), self.previous, self.seq).encode()
        started = time.perf_counter()
        response = self.client.post(self.root + path, content=payload, headers={"content-type": "application/json"})
        return Answer(response.status_code, response.headers.get("content-type", ""), response.content,
                      time.perf_counter() - started)

    def logged(self) -> list[str]:
        """The errors the server logged since this was last asked."""
        taken, self.errors.records[:] = list(self.errors.records), []
        return [record.getMessage() + (f": {record.exc_info[1]!r}" if record.exc_info else "") for record in taken]

    def answers(self) -> bool:
        """Whether the server still answers a plain request."""
        return self.client.get(self.server.base_url + "/models").status_code == 200


class _Kept(logging.Handler):
    """Keeps the records it is given."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


SERVER_LOGGERS = ("llmproxy", "uvicorn.error")  # the app's own, and uvicorn's for what escapes the app


@contextlib.contextmanager
def fuzzed_server() -> Iterator[Target]:
    routes = {name: route(InstantBackend(), name, wrapper=wrapper) for name, wrapper in WRAPPERS.items()}
    # One client for every case: a client per request builds an SSL context, most of a case's time.
    with running(routes, default_model="fake", capture=True) as server, httpx.Client(timeout=60) as client:
        target = Target(server, client)
        for name in SERVER_LOGGERS:
            logging.getLogger(name).addHandler(target.errors)
        try:
            yield target
        finally:
            for name in SERVER_LOGGERS:
                logging.getLogger(name).removeHandler(target.errors)
