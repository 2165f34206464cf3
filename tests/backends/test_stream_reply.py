"""The server's streamed reads (``AsyncHTTPClient.stream`` on a ``StreamReply``): against servers written
here byte by byte, so each case is exactly the HTTP/1.1 a real server may send, keep-alive and its
races included."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from llmproxy.backends._http import AsyncHTTPClient, EventReader, StreamExchange, Timeouts
from llmproxy.backends._stream_reply import PAUSE_BYTES, ConnectionEnded, IdleConnections, StreamReply
from llmproxy.backends._openai import parse_chunk
from llmproxy.backends.llamacpp import parse_stream_event
from llmproxy.errors import BackendConnectionError, BackendProtocolError, BackendTimeoutError

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(text: str, stop: bool = False) -> bytes:
    return b"data: " + json.dumps({"content": text, "stop": stop, "stop_type": "eos"}).encode() + b"\n\n"


def answer(*texts: str) -> bytes:
    """A whole chunked llama.cpp stream: one event a text, then the closing one."""
    return HEAD + b"".join(chunk(event(text)) for text in texts) + chunk(event("", stop=True)) + b"0\r\n\r\n"


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's body, or None where the client closed the connection instead."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return await reader.readexactly(length)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def with_server(handler: Handler, client_steps: Callable[[AsyncHTTPClient], Awaitable[object]],
                      **timeouts: float) -> tuple[object, int]:
    """Run ``client_steps`` against a server whose connection number i is handled by ``handler(..., i)``;
    what the steps returned, and how many connections the server accepted."""
    handlers: list[asyncio.Task] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())
        try:
            await handler(reader, writer, len(handlers) - 1)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = AsyncHTTPClient("llamacpp", f"http://127.0.0.1:{port}", default_url="http://localhost:8080", headers={},
                             timeouts=Timeouts(**timeouts))
    try:
        result = await client_steps(client)
    finally:
        await client.aclose()  # its kept connections close: each handler reads their end
        server.close()
        for task in handlers:
            task.cancel()  # one still serving (a failed case): stopped, not left to the loop's end
        await asyncio.gather(*handlers, return_exceptions=True)
    return result, len(handlers)


def exchange(prompt: str = "p") -> StreamExchange:
    return StreamExchange("/completion", {"prompt": prompt, "stream": True}, parse_stream_event)


async def text_of(client: AsyncHTTPClient, prompt: str = "p") -> str:
    return "".join([delta.text async for delta in client.stream(exchange(prompt))])


def test_streams_one_after_another_share_one_connection():
    async def handler(reader, writer, index):
        while (body := await read_request(reader)) is not None:
            writer.write(answer("a", json.loads(body)["prompt"]))

    async def steps(client):
        return [await text_of(client, prompt) for prompt in ("1", "2", "3")]

    texts, connections = asyncio.run(with_server(handler, steps))
    assert texts == ["a1", "a2", "a3"] and connections == 1


def test_a_reply_that_asks_to_close_is_not_kept():
    asked_again = []  # requests that came on a connection whose reply said it would close

    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(answer("x").replace(b"Transfer-Encoding", b"Connection: close\r\nTransfer-Encoding"))
        if await read_request(reader) is not None:  # the connection is left open: a client must not use it
            asked_again.append(index)

    async def steps(client):
        return [await text_of(client) for _ in range(2)]

    texts, connections = asyncio.run(with_server(handler, steps))
    assert texts == ["x", "x"] and connections == 2 and asked_again == []


def test_a_kept_connection_the_server_closed_while_idle_is_not_used():
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(answer("x"))
        await writer.drain()  # then the server closes it (its keep-alive ran out)

    async def steps(client):
        first = await text_of(client)
        await asyncio.sleep(0.1)  # the close reaches the client
        return [first, await text_of(client)]

    texts, connections = asyncio.run(with_server(handler, steps))
    assert texts == ["x", "x"] and connections == 2


def test_a_kept_connection_closed_as_the_request_went_out_hands_it_to_a_new_one():
    """The race of every keep-alive client: the server closes an idle connection just as a request is
    written on it. It answered nothing, so the request goes once more, on a new connection."""
    requests = []

    async def handler(reader, writer, index):
        await read_request(reader)
        requests.append(index)
        writer.write(answer("x"))
        if index == 0:
            await read_request(reader)  # the second request, on the kept connection: closed unanswered
            requests.append(index)

    async def steps(client):
        return [await text_of(client) for _ in range(2)]

    texts, connections = asyncio.run(with_server(handler, steps))
    assert texts == ["x", "x"] and connections == 2 and requests == [0, 0, 1]


def test_a_kept_connection_that_breaks_off_a_begun_reply_is_an_error_not_a_retry():
    async def handler(reader, writer, index):
        await read_request(reader)
        if index == 0:
            writer.write(answer("x"))
            await read_request(reader)
        writer.write(HEAD + chunk(event("half")))  # then the connection closes mid-body

    async def steps(client):
        first = await text_of(client)
        with pytest.raises(BackendProtocolError, match="broke off"):
            await text_of(client)
        return first

    first, connections = asyncio.run(with_server(handler, steps))
    assert first == "x" and connections == 1


def test_a_body_that_ends_with_its_connection():
    """No Content-Length and not chunked (HTTP/1.0 style, as koboldcpp's Python server sends): the body
    is what comes until the connection closes, its last event cut off included."""

    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + event("a") + event("b")
                     + event("", stop=True).rstrip(b"\n"))

    async def steps(client):
        return [delta async for delta in client.stream(exchange())]

    deltas, _ = asyncio.run(with_server(handler, steps))
    assert "".join(delta.text for delta in deltas) == "ab" and deltas[-1].finish_reason == "stop"


def test_an_error_status_is_read_whole_and_the_stream_never_starts():
    async def handler(reader, writer, index):
        await read_request(reader)
        body = b'{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}'
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    async def steps(client):
        with pytest.raises(Exception) as info:
            await text_of(client)
        return info.value

    error, _ = asyncio.run(with_server(handler, steps))
    assert "HTTP 503" in str(error) and "Loading model" in str(error)


def test_bytes_that_are_not_http_are_a_clear_error():
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    async def steps(client):
        with pytest.raises(BackendConnectionError, match="llamacpp at http://127.0.0.1:\\d+/completion"):
            await text_of(client)

    asyncio.run(with_server(handler, steps))


def test_leaving_a_stream_early_closes_its_connection():
    """The backend sees the close and stops generating."""
    stopped_after: list[int] = []

    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(HEAD)
        for i in range(1000):
            writer.write(chunk(event(str(i))))
            await asyncio.sleep(0.01)
            if reader.at_eof():  # the client went away
                stopped_after.append(i)
                return

    async def steps(client):
        stream = client.stream(exchange())
        got = [(await anext(stream)).text for _ in range(3)]
        await stream.aclose()
        await asyncio.sleep(0.2)
        return got

    got, _ = asyncio.run(with_server(handler, steps))
    assert got == ["0", "1", "2"] and stopped_after and stopped_after[0] < 50


def test_the_first_token_and_each_later_piece_have_their_own_limits():
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(HEAD + chunk(event("a")))
        await asyncio.sleep(0.6)  # longer than read_timeout, shorter than first_token_timeout

    async def steps(client):
        got = []
        with pytest.raises(BackendTimeoutError, match="sent nothing more for 0.2 s .read_timeout."):
            async for delta in client.stream(exchange()):
                got.append(delta.text)
        return got

    got, _ = asyncio.run(with_server(handler, steps, first_token=5, read=0.2))
    assert got == ["a"]


# --- the reply itself, on a socket pair ---------------------------------------------------------


async def reply_on_a_socket_pair() -> tuple[StreamReply, socket.socket]:
    ours, theirs = socket.socketpair()
    reply = StreamReply(EventReader("sse"))
    await asyncio.get_running_loop().connect_accepted_socket(lambda: reply, ours)
    theirs.sendall(HEAD)
    assert await reply.status() == 200
    return reply, theirs


def test_a_wait_that_lasts_fails_not_a_slow_reader():
    """Like a timeout around each wait: the time the reader spends elsewhere does not count."""

    async def run() -> tuple[list[str], float]:
        reply, theirs = await reply_on_a_socket_pair()
        reply.limit_waits(0.1, lambda: TimeoutError("silent"))
        got = []
        for i in range(3):
            theirs.sendall(chunk(b"data: %d\n\n" % i))
            got += await reply.read()
            await asyncio.sleep(0.25)  # the reader is busy (a slow client), the backend has sent all it had
        start = time.perf_counter()
        with pytest.raises(TimeoutError, match="silent"):
            await reply.read()
        reply.close()
        theirs.close()
        return got, time.perf_counter() - start

    got, waited = asyncio.run(run())
    assert got == ["0", "1", "2"] and 0.09 < waited < 2  # failed, not before its time (nor never)


def test_a_reader_that_falls_behind_stops_the_connection_reading_until_it_catches_up():
    async def run() -> tuple[bool, bool, int]:
        reply, theirs = await reply_on_a_socket_pair()
        theirs.setblocking(False)
        piece = chunk(b"data: " + b"x" * 8000 + b"\n\n")
        sent = 0
        with pytest.raises(BlockingIOError):
            while True:  # until the socket's buffers are full: the reply stopped reading
                sent += theirs.send(piece)
                await asyncio.sleep(0)
        paused = not reply.transport.is_reading()
        payloads = await reply.read()
        resumed = reply.transport.is_reading()
        reply.close()
        theirs.close()
        return paused, resumed, len(payloads)

    paused, resumed, count = asyncio.run(run())
    assert paused and resumed and count * 8000 > PAUSE_BYTES


# --- relayed as they arrive -------------------------------------------------------------------------


def test_a_relay_hands_each_payload_on_in_the_connections_own_callback():
    """No task wakes for a token: every payload reaches ``push`` from the connection's callback, in order,
    those that came before the relay began first; the relay returns with the body's end."""

    async def run() -> list[tuple[list[str], bool]]:
        reply, theirs = await reply_on_a_socket_pair()
        theirs.sendall(chunk(b"data: 0\n\n"))
        await asyncio.sleep(0.05)
        pushed: list[tuple[list[str], bool]] = []
        relaying = asyncio.ensure_future(reply.relay(lambda payloads: pushed.append(
            (payloads, asyncio.current_task() is None))))
        for i in (1, 2):
            await asyncio.sleep(0.05)
            theirs.sendall(chunk(b"data: %d\n\n" % i))
        await asyncio.sleep(0.05)
        theirs.sendall(b"0\r\n\r\n")
        await asyncio.wait_for(relaying, 5)
        theirs.close()
        return pushed

    assert asyncio.run(run()) == [(["0"], False), (["1"], True), (["2"], True)]  # the first: taken by the relay


def test_a_relay_whose_writes_wait_stops_reading_until_they_are_done():
    """A push that gives an awaitable (its client reads slowly) holds every later payload, and the connection
    reads nothing more, until that is done; then the held payloads follow, in order."""

    async def run() -> tuple[list[list[str]], list[str], bool, bool]:
        reply, theirs = await reply_on_a_socket_pair()
        written = asyncio.get_running_loop().create_future()
        pushed: list[list[str]] = []

        def push(payloads: list[str]) -> asyncio.Future | None:
            pushed.append(payloads)
            return written if len(pushed) == 1 else None

        relaying = asyncio.ensure_future(reply.relay(push))
        await asyncio.sleep(0)
        theirs.sendall(chunk(b"data: a\n\n"))
        await asyncio.sleep(0.05)
        theirs.sendall(chunk(b"data: b\n\n") + chunk(b"data: c\n\n"))
        await asyncio.sleep(0.1)
        while_waiting = [payload for payloads in pushed for payload in payloads]
        paused = not reply.transport.is_reading()
        written.set_result(None)
        theirs.sendall(chunk(b"data: d\n\n") + b"0\r\n\r\n")
        await asyncio.wait_for(relaying, 5)
        resumed = reply.transport.is_reading() or reply.transport.is_closing()
        theirs.close()
        return pushed, while_waiting, paused, resumed

    pushed, while_waiting, paused, resumed = asyncio.run(run())
    assert while_waiting == ["a"] and paused and resumed
    assert [payload for payloads in pushed for payload in payloads] == ["a", "b", "c", "d"]


def test_a_relay_stopped_by_its_last_push_still_waits_for_that_write():
    async def run() -> tuple[bool, bool]:
        reply, theirs = await reply_on_a_socket_pair()
        written = asyncio.get_running_loop().create_future()

        def push(payloads: list[str]) -> asyncio.Future:
            reply.stop()  # the protocol's end (an SSE [DONE]) came with this payload
            return written

        relaying = asyncio.ensure_future(reply.relay(push))
        await asyncio.sleep(0)
        theirs.sendall(chunk(b"data: [DONE]\n\n"))
        await asyncio.sleep(0.1)
        returned_early = relaying.done()
        written.set_result(None)
        await asyncio.wait_for(relaying, 5)
        reply.close()
        theirs.close()
        return returned_early, relaying.done()

    assert asyncio.run(run()) == (False, True)


def test_a_push_that_fails_fails_the_relay_and_closes_the_connection():
    async def run() -> tuple[BaseException | None, bytes]:
        reply, theirs = await reply_on_a_socket_pair()

        def push(payloads: list[str]) -> None:
            raise ValueError(f"cannot relay {payloads}")

        relaying = asyncio.ensure_future(reply.relay(push))
        await asyncio.sleep(0)
        theirs.sendall(chunk(b"data: x\n\n"))
        await asyncio.wait({relaying}, timeout=5)
        theirs.settimeout(5)
        at_their_end = theirs.recv(100)  # b"": the connection closed (the server stops generating)
        theirs.close()
        return relaying.exception(), at_their_end

    failure, at_their_end = asyncio.run(run())
    assert isinstance(failure, ValueError) and str(failure) == "cannot relay ['x']" and at_their_end == b""


def test_a_relay_fails_a_silence_past_the_read_limit_not_a_slow_stream():
    """The limit counts from the last arrival: a stream that takes longer than it in all, but is never
    silent that long, goes through; a silence that long fails."""

    async def run() -> tuple[list[str], float]:
        reply, theirs = await reply_on_a_socket_pair()
        reply.limit_waits(0.3, lambda: TimeoutError("silent"))
        pushed: list[str] = []
        relaying = asyncio.ensure_future(reply.relay(pushed.extend))
        for i in range(10):  # 0.5 s in all, a piece every 0.05 s
            theirs.sendall(chunk(b"data: %d\n\n" % i))
            await asyncio.sleep(0.05)
        start = time.perf_counter()
        with pytest.raises(TimeoutError, match="silent"):
            await asyncio.wait_for(relaying, 5)
        theirs.close()
        return pushed, time.perf_counter() - start

    pushed, waited = asyncio.run(run())
    assert pushed == [str(i) for i in range(10)] and 0.15 < waited < 2


def test_a_connection_lost_mid_relay_is_an_error():
    async def run() -> BaseException | None:
        reply, theirs = await reply_on_a_socket_pair()
        relaying = asyncio.ensure_future(reply.relay(lambda payloads: None))
        theirs.sendall(chunk(b"data: x\n\n"))
        await asyncio.sleep(0.05)
        theirs.close()
        await asyncio.wait({relaying}, timeout=5)
        return relaying.exception()

    assert isinstance(asyncio.run(run()), ConnectionEnded)


def test_a_stream_hands_the_rest_of_its_deltas_to_a_relay_and_gives_its_closing_one():
    """``AsyncHTTPClient.stream`` takes a callback sent in for the rest of the answer: the text goes to it
    as it comes, the closing delta (finish reason, counts) is the next one the stream gives, and the
    connection, read to its end, is kept for the next stream."""

    async def handler(reader, writer, index):
        while await read_request(reader) is not None:
            writer.write(HEAD + chunk(event("a")))
            await writer.drain()
            for text in ("b", "c"):
                await asyncio.sleep(0.02)
                writer.write(chunk(event(text)))
                await writer.drain()
            writer.write(chunk(event("", stop=True)) + b"0\r\n\r\n")

    async def steps(client):
        results = []
        for _ in range(2):
            deltas = client.stream(exchange())
            first = await anext(deltas)
            relayed: list[str] = []
            closing = await deltas.asend(lambda delta: relayed.append(delta.text))
            results.append((first.text, relayed, closing.finish_reason, await anext(deltas, None)))
        return results

    results, connections = asyncio.run(with_server(handler, steps))
    assert results == [("a", ["b", "c"], "stop", None)] * 2 and connections == 1


def test_a_relay_ends_at_the_sse_done_even_if_the_body_does_not():
    """An OpenAI-compatible server's ``[DONE]`` ends the answer; a server that then keeps the body open
    does not hold the relay."""

    async def handler(reader, writer, index):
        await read_request(reader)
        head = json.dumps({"choices": [{"index": 0, "text": "a", "finish_reason": None}]}).encode()
        last = json.dumps({"choices": [{"index": 0, "text": "b", "finish_reason": "stop"}]}).encode()
        writer.write(HEAD + chunk(b"data: " + head + b"\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunk(b"data: " + last + b"\n\ndata: [DONE]\n\n"))
        await writer.drain()
        await asyncio.sleep(10)  # the body never ends

    async def steps(client):
        deltas = client.stream(StreamExchange("/v1/completions", {"prompt": "p", "stream": True}, parse_chunk))
        first = await anext(deltas)
        relayed: list[str] = []
        closing = await asyncio.wait_for(deltas.asend(lambda delta: relayed.append(delta.text)), 5)
        return first.text, relayed, closing.finish_reason

    (first, relayed, reason), _ = asyncio.run(with_server(handler, steps))
    assert (first, relayed, reason) == ("a", ["b"], "stop")


def test_a_connection_kept_while_its_reading_was_paused_reads_again():
    """Else a server closing it while idle would go unseen, and the next stream on it would wait forever."""

    async def run() -> tuple[bool, bool]:
        reply, theirs = await reply_on_a_socket_pair()
        reply.transport.pause_reading()  # as a reply whose unread payloads passed PAUSE_BYTES leaves it
        kept = IdleConnections()
        kept.keep(reply.transport)
        reading = reply.transport.is_reading()
        theirs.close()  # the server closes the idle connection
        await asyncio.sleep(0.1)
        seen = kept.take() is None  # its close was seen: nothing to hand out
        kept.close()
        return reading, seen

    assert asyncio.run(run()) == (True, True)


# --- https ------------------------------------------------------------------------------------------

FIXTURES = Path(__file__).parent.parent / "fixtures"  # localhost-cert.pem: self-signed, for localhost, 100 years


def over_https() -> str | Exception:
    """A stream from a server whose certificate is tests/fixtures' self-signed one: its text, or the error."""

    async def run() -> str | Exception:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(FIXTURES / "localhost-cert.pem", FIXTURES / "localhost-key.pem")

        async def handler(reader, writer):
            await read_request(reader)
            writer.write(answer("sealed"))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
        port = server.sockets[0].getsockname()[1]
        client = AsyncHTTPClient("llamacpp", f"https://localhost:{port}", default_url="http://localhost:8080",
                                 headers={}, timeouts=Timeouts())
        try:
            return await text_of(client)
        except BackendConnectionError as exc:
            return exc
        finally:
            await client.aclose()
            server.close()

    return asyncio.run(run())


def test_a_stream_over_https_checks_the_certificate_as_a_client_library_would(monkeypatch):
    refused = over_https()  # the system's certificates only
    assert isinstance(refused, BackendConnectionError) and "CERTIFICATE_VERIFY_FAILED" in str(refused)
    monkeypatch.setenv("SSL_CERT_FILE", str(FIXTURES / "localhost-cert.pem"))  # now the server's is trusted
    assert over_https() == "sealed"
