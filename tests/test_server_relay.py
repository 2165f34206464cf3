"""A streamed answer relayed to its client: every token is written from the backend connection's own
callback (llmproxy.backends._stream_reply's relay), by the server's body writer (llmproxy.server.connections'
BODY_WRITER) where it can, else by the ASGI send (a client that reads slowly, a middleware that may rewrite
bodies). Whichever way, the client gets the whole answer, in order."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import httpx
from fastapi import FastAPI
from server_helpers import RunningServer, fake_llamacpp, route
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from llmproxy.server import responses
from llmproxy.server.app import create_app
from llmproxy.server.connections import BODY_WRITER, _body_writer
from llmproxy.server.responses import EventStream

HI = [{"role": "user", "content": "hi"}]


class Transport:
    """What a response cycle writes, kept."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


def cycle_on(transport: Transport) -> RequestResponseCycle:
    return RequestResponseCycle({"type": "http", "method": "POST", "http_version": "1.1"}, transport,
                                FlowControl(transport), logging.getLogger("test"), logging.getLogger("test"), False, [],
                                asyncio.Event(), False, True, lambda: None)


def test_the_body_writer_writes_only_what_the_asgi_send_would_write_at_once():
    async def run() -> list[object]:
        transport = Transport()
        cycle = cycle_on(transport)
        write = _body_writer(cycle, transport)
        seen: list[object] = [write(b"early")]  # no response started: the ASGI send says what is wrong
        await cycle.send({"type": "http.response.start", "status": 200, "headers": []})
        transport.written.clear()
        seen += [write(b"data: a\n\n"), list(transport.written)]
        cycle.flow.pause_writing()  # the client reads slowly: the ASGI send waits for it
        seen.append(write(b"data: b\n\n"))
        cycle.flow.resume_writing()
        cycle.disconnected = True
        seen.append(write(b"data: c\n\n"))
        sized = cycle_on(Transport())  # a body with a Content-Length is not chunked
        await sized.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"3")]})
        seen.append(_body_writer(sized, Transport())(b"abc"))
        return seen

    assert asyncio.run(run()) == [False, True, [b"9\r\ndata: a\n\n\r\n"], False, False, False]


def event_stream_writes(send_waits: bool, writer: bool) -> tuple[list[object], list[bytes]]:
    """An EventStream whose body writes "a" and "b" from outside its iteration (as a relay does) and yields
    "c": what each write gave, and the body's pieces in the order they reached the client, through the
    server's body writer (``writer``) or an ASGI send that waits for a slow client (``send_waits``)."""

    async def run() -> tuple[list[object], list[bytes]]:
        sent: list[bytes] = []
        readable = asyncio.Event()
        gave: list[object] = []

        async def send(message: dict) -> None:
            if message["type"] == "http.response.body" and send_waits:
                await readable.wait()
            sent.append(message.get("body", b""))

        async def receive() -> dict:
            await asyncio.sleep(10)
            return {"type": "http.disconnect"}

        async def body():
            for piece in (b"a", b"b"):
                blocked = stream.write(piece)
                gave.append(blocked is None)
                if blocked is not None:
                    asyncio.get_running_loop().call_later(0.05, readable.set)
                    await blocked
            yield b"c"

        async def closed() -> None: ...

        stream = EventStream(body(), closed)
        extensions = {BODY_WRITER: lambda chunk: sent.append(chunk) or True} if writer else {}
        await asyncio.wait_for(stream({"type": "http", "extensions": extensions}, receive, send), 5)
        return gave, [piece for piece in sent if piece]

    return asyncio.run(run())


def test_a_relayed_write_goes_out_at_once_by_the_body_writer_or_a_send_that_does_not_wait():
    assert event_stream_writes(send_waits=False, writer=True) == ([True, True], [b"a", b"b", b"c"])
    assert event_stream_writes(send_waits=False, writer=False) == ([True, True], [b"a", b"b", b"c"])


def test_a_relayed_write_to_a_slow_client_is_waited_for_before_anything_else():
    gave, pieces = event_stream_writes(send_waits=True, writer=False)
    assert gave == [False, True] and pieces == [b"a", b"b", b"c"]  # once readable, "b" went out at once


# --- through the real server ---------------------------------------------------------------------


def request_bytes(port: int, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


def content_of(stream: bytes) -> str:
    """The content deltas of a chunked server-sent event stream (its HTTP head included), joined."""
    head, _, chunked = stream.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    body, rest = b"", chunked
    while True:
        size, _, rest = rest.partition(b"\r\n")
        if int(size, 16) == 0:
            break
        body, rest = body + rest[:int(size, 16)], rest[int(size, 16) + 2:]
    text = ""
    for event in body.split(b"\n\n"):
        if event.startswith(b"data: {"):
            choice = json.loads(event[6:])["choices"]
            text += (choice[0]["delta"].get("content") or "") if choice else ""
    return text


def test_a_client_that_reads_slowly_gets_a_long_answer_whole_and_in_order(monkeypatch):
    """The answer outgrows what the sockets hold while the client does not read: the writes wait for it
    (and the relay stops reading the backend meanwhile); once it reads, every token comes, in order."""
    waited = []
    rest = responses._rest
    monkeypatch.setattr(responses, "_rest", lambda *args: waited.append(1) or rest(*args))
    with fake_llamacpp() as llama:
        llama.script = "".join(f"w{i:05d} " for i in range(12_000)).strip()  # 84 kB of text, 16,800 events
        server = RunningServer({"fake": route(llama.backend())})
        try:
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
            client.connect(("127.0.0.1", server.port))
            client.sendall(request_bytes(server.port, {"model": "fake", "messages": HI, "stream": True}))
            deadline = time.monotonic() + 30
            while not waited and time.monotonic() < deadline:  # reads nothing until a write must wait
                time.sleep(0.05)
            client.settimeout(30)
            received = b""
            while data := client.recv(65536):
                received += data
            client.close()
        finally:
            server.stop()
    assert content_of(received) == llama.script
    assert waited, "the client never made a write wait: the test did not test a slow client"


class Recording:
    """A middleware that sees the response's body pieces (as one that rewrites them would)."""

    def __init__(self, app) -> None:  # noqa: ANN001 - an ASGI app
        self.app = app
        self.seen: list[bytes] = []

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        async def seeing(message: dict) -> None:
            if message["type"] == "http.response.body":
                self.seen.append(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, seeing)


def test_a_middleware_sees_every_relayed_piece():
    """The server's body writer skips the ASGI send: with a middleware in the app, which may rewrite
    bodies, every piece goes through the send instead."""
    recording: list[Recording] = []
    with fake_llamacpp() as llama:
        llama.script = "quiet words, streamed in many pieces"
        app = create_app({"fake": route(llama.backend())})
        app.add_middleware(lambda inner: recording.append(Recording(inner)) or recording[-1])
        server = RunningServer({}, app=app)
        try:
            with httpx.stream("POST", f"{server.base_url}/chat/completions", timeout=30,
                              json={"model": "fake", "messages": HI, "stream": True}) as answer:
                body = b"".join(answer.iter_raw())
        finally:
            server.stop()
    assert content_of(b"transfer-encoding: chunked\r\n\r\n" + chunked(body)) == llama.script
    assert b"".join(recording[0].seen) == body


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def test_the_body_writer_and_the_asgi_send_interleave_in_order_on_a_real_connection():
    """An ASGI app behind this server's connections: pieces written by the body writer and sent through
    the ASGI send reach a real HTTP client as one chunked body, in order."""

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        write = scope["extensions"][BODY_WRITER]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for i in range(6):
            if i % 2:
                await send({"type": "http.response.body", "body": b"%d," % i, "more_body": True})
            else:
                assert write(b"%d," % i)
        await send({"type": "http.response.body", "body": b"end", "more_body": False})

    served = FastAPI()
    served.mount("/", app)
    server = RunningServer({}, app=served)
    try:
        answer = httpx.get(f"http://127.0.0.1:{server.port}/", timeout=10)
    finally:
        server.stop()
    assert answer.status_code == 200 and answer.text == "0,1,2,3,4,5,end"
