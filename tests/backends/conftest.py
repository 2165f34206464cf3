"""Fakes for the HTTP backend tests: a pytest-httpserver that records what it was sent and answers
with exact bytes, plus the MemGPT-style exchange every backend must carry intact."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

# --- a MemGPT-style exchange -----------------------------------------------------------------

ASSISTANT_PREFIX = '\n{\n  "function":'
MEMGPT_PROMPT = (
    "<|im_start|>system\nYou are MemGPT. Call one of these functions:\n"
    "send_message(message: str, inner_thoughts: str)\n<|im_end|>\n"
    '<|im_start|>user\n{"type": "user_message", "message": "hi, I am Chad"}<|im_end|>\n'
    "<|im_start|>assistant" + ASSISTANT_PREFIX
)
# What a server returns after cutting at MemGPT's "  }\n}\n" stop string. The message holds U+2028 and
# U+0085, which servers send unescaped and a str.splitlines()-based reader would break a line at.
CALL_TEXT = (
    ' "send_message",\n  "params": {\n    "inner_thoughts": "The user introduced himself.",\n'
    '    "message": "Hi Chad!\u2028Nice to meet you\u0085."\n'
)
CALL_PIECES = [' "send_message",\n  "params": {\n', '    "inner_thoughts": "The user introduced himself.",\n',
               '    "message": "Hi Chad!\u2028Nice', ' to meet you\u0085."\n']
assert "".join(CALL_PIECES) == CALL_TEXT


def function_call(text: str) -> dict[str, Any]:
    """The call the proxy recovers from ``text``: prefix + text + the braces the stop string cut."""
    return json.loads(ASSISTANT_PREFIX + text + "  }\n}")


def assert_memgpt_call(text: str) -> None:
    call = function_call(text)
    assert call["function"] == "send_message"
    assert call["params"] == {"inner_thoughts": "The user introduced himself.",
                              "message": "Hi Chad!\u2028Nice to meet you\u0085."}


def dumps(payload: Any) -> str:
    """JSON the way the C++/Go servers write it: UTF-8, nothing escaped that need not be."""
    return json.dumps(payload, ensure_ascii=False)


# --- the fake server -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def make_httpserver():
    # Threaded, so a handler that sleeps past a client's read timeout does not hold up later tests.
    server = HTTPServer(threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


class Fake:
    """Routes on a pytest-httpserver; records every JSON body and header set it receives."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.bodies: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        # Streams set up from now on: pause before chunk i, s seconds, or until an event is set (by a test that
        # has read what came before: on a busy machine a fixed pause can pass before the reader reads at all).
        self.stall: tuple[int, float | threading.Event] | None = None

    @property
    def url(self) -> str:
        return self.server.url_for("/").rstrip("/")

    def route(self, path: str, respond: Callable[[Request], Response], method: str = "POST") -> None:
        def handler(request: Request) -> Response:
            self.paths.append(request.path)
            self.headers.append(dict(request.headers))
            data = request.get_data()
            self.bodies.append(json.loads(data) if data else None)
            return respond(request)

        self.server.expect_request(path, method=method).respond_with_handler(handler)

    def json(self, path: str, payload: Any, *, status: int = 200, method: str = "POST") -> None:
        self.raw(path, dumps(payload).encode(), status=status, method=method)

    def raw(self, path: str, body: bytes, *, status: int = 200, method: str = "POST",
            content_type: str = "application/json") -> None:
        self.route(path, lambda _: Response(body, status=status, content_type=content_type), method)

    def stream(self, path: str, chunks: Iterable[bytes], *, content_type: str = "text/event-stream",
               then_fail: bool = False) -> None:
        """Send ``chunks`` one network write each; ``then_fail`` drops the connection mid-body."""
        chunks, stall = list(chunks), self.stall

        def body() -> Iterable[bytes]:
            for index, chunk in enumerate(chunks):
                if stall is not None and index == stall[0]:
                    pause = stall[1]
                    if isinstance(pause, threading.Event):
                        pause.wait(10)
                    else:
                        time.sleep(pause)
                yield chunk
            if then_fail:
                raise ConnectionAbortedError("fake server dies mid-stream")

        self.route(path, lambda _: Response(body(), status=200, content_type=content_type))

    def slow(self, path: str, seconds: float, method: str = "POST") -> None:
        def respond(_: Request) -> Response:
            time.sleep(seconds)
            return Response(b"{}", content_type="application/json")

        self.route(path, respond, method)


@pytest.fixture
def fake(httpserver: HTTPServer) -> Fake:
    return Fake(httpserver)


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sse(*payloads: Any, done: bool = True, newline: bytes = b"\n") -> list[bytes]:
    """OpenAI-style SSE chunks, one event per network write: ``data: {...}`` + blank line."""
    chunks = [b"data: " + dumps(p).encode() + newline + newline for p in payloads]
    if done:
        chunks.append(b"data: [DONE]" + newline + newline)
    return chunks
