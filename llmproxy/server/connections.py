"""Connection hygiene: no client holds a connection by sending slowly, or nothing at all.

uvicorn closes a keep-alive connection left idle after a response, but waits forever for a new
connection's first request, for a request's headers and for its body, and takes connections until
the process runs out of file descriptors. ``Connections`` serves uvicorn's own HTTP protocol
(httptools) with deadlines and a cap; ``uvicorn_options`` is what ``run`` and the tests start it with.
The limits (llmproxy.server.config.ConnectionLimits, which has the defaults):

    idle_timeout      a connection with no request under way (new, or between requests) is closed
    header_timeout    a request's line and headers must arrive within this time of its first byte (408)
    body_timeout      its body within this time of its headers (408)
    max_header_bytes  a request's line and headers take at most this many bytes (431)
    max_connections   past this many, a new connection closes the oldest one that runs no request,
                      so idle or slow clients can never lock out a real one; when every connection
                      runs a request, the new one gets a 429
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from llmproxy.errors import HeadersTooLargeError, LLMProxyError, OverloadedError, RequestTimeoutError
from llmproxy.server.config import ConnectionLimits
from llmproxy.faces.chat.envelope import envelope

logger = logging.getLogger("llmproxy.server")
# An ASGI extension this server's connections give each request: ``write(chunk) -> bool`` sends ``chunk``
# as the next piece of a started, chunked response body at once, with none of the ASGI send's machinery
# (a coroutine a call: a relayed token's largest cost after the socket's), or says False and writes
# nothing where the ASGI send must take it (the client reads slowly, has left, or the body is not chunked).
BODY_WRITER = "llmproxy.body_writer"
# Another: ``write(status, headers, body) -> bool`` sends a whole response (head and body in one write) and
# completes the request as uvicorn's send would, or says False and writes nothing where the ASGI send must
# take it (a response begun already, a client that left or reads slowly, a HEAD request). A generation's
# answer has the server's whole response at once: this spares it two trips through the ASGI send.
WHOLE_WRITER = "llmproxy.whole_writer"
# And: ``watch(callback)`` has the connection call ``callback`` when the client goes away while the request
# runs (at once where it has gone already), and ``watch(None)`` stops it. A request watched so costs no task
# of its own waiting on the ASGI receive for the disconnect (llmproxy.server.disconnects).
DISCONNECT_WATCH = "llmproxy.disconnect_watch"


class Connections:
    """One server's open connections, oldest first, held to ``limits``."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[GuardedProtocol, None] = {}  # insertion order: the oldest first

    def protocol(self, **uvicorn_arguments: Any) -> GuardedProtocol:
        """A protocol for a new connection (uvicorn calls this as it would a protocol class)."""
        return GuardedProtocol(self, **uvicorn_arguments)

    def admit(self, connection: GuardedProtocol) -> bool:
        """Count ``connection`` in; past the cap, make room by closing the oldest that runs no request."""
        self.open[connection] = None
        if len(self.open) <= self.limits.max_connections:
            return True
        oldest = next((other for other in self.open if other is not connection and not other.serving), None)
        if oldest is None:
            return False
        oldest.close()
        return True

    def leave(self, connection: GuardedProtocol) -> None:
        self.open.pop(connection, None)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with one deadline at a time for what the client must send next."""

    def __init__(self, connections: Connections, **uvicorn_arguments: Any) -> None:
        super().__init__(**uvicorn_arguments)
        self.registry = connections
        self.limits = connections.limits
        self.phase = "idle"  # idle -> head -> body -> running -> idle ...
        self.head_bytes = 0
        self.deadline: asyncio.TimerHandle | None = None
        self.on_lost: Callable[[], None] | None = None  # the running request's DISCONNECT_WATCH callback

    @property
    def serving(self) -> bool:
        """Whether a request's headers have come and its response is not yet complete."""
        return self.cycle is not None and not self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.registry.admit(self):
            self.refuse(OverloadedError(
                f"The server has {self.limits.max_connections} connections open, each running a request "
                "(its max_connections); retry shortly.", retry_after=1))
            return
        self.expect("idle", self.limits.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.leave(self)
        self.expect("closed", None)
        super().connection_lost(exc)
        if self.on_lost is not None:
            lost, self.on_lost = self.on_lost, None
            lost()

    def data_received(self, data: bytes) -> None:
        if self.phase == "idle":  # the first bytes of a request
            self.head_bytes = 0
            self.expect("head", self.limits.header_timeout)
        super().data_received(data)
        if self.phase == "head":  # still no end to the headers
            self.head_bytes += len(data)
            if self.head_bytes > self.limits.max_header_bytes:
                self.refuse(HeadersTooLargeError(
                    f"The request's headers are over this server's limit of {self.limits.max_header_bytes} bytes."))

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # a request to answer (not an upgrade)
            extensions = self.scope.setdefault("extensions", {})
            extensions[BODY_WRITER] = _body_writer(cycle, self.transport)
            extensions[WHOLE_WRITER] = _whole_writer(cycle, self.transport)
            extensions[DISCONNECT_WATCH] = self._disconnect_watch(cycle)
        self.expect("body", self.limits.body_timeout)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self.serving:
            self.expect("running", None)  # a generation takes as long as it takes
        else:  # answered before its body was read (an error)
            self.expect("idle", self.limits.idle_timeout)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.phase == "running":
            self.expect("idle", self.limits.idle_timeout)

    def _disconnect_watch(self, cycle: RequestResponseCycle) -> Callable[[Callable[[], None] | None], None]:
        """The ``DISCONNECT_WATCH`` of the request ``cycle`` answers."""

        def watch(callback: Callable[[], None] | None) -> None:
            if callback is not None and cycle.disconnected:
                callback()
            else:
                self.on_lost = callback

        return watch

    def expect(self, phase: str, seconds: float | None) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.phase = phase
        self.deadline = self.loop.call_later(seconds, self.expired) if seconds is not None else None

    def expired(self) -> None:
        self.deadline = None
        if self.phase == "idle":
            if not self.serving:  # a pipelined request may run while nothing more is expected
                self.close()
            return
        setting = "header_timeout" if self.phase == "head" else "body_timeout"
        seconds = getattr(self.limits, setting)
        logger.info("closed a connection from %s: its request's %s took over %g s (%s)", _peer(self.client),
                    "headers" if self.phase == "head" else "body", seconds, setting)
        self.refuse(RequestTimeoutError(
            f"The request's {'headers' if self.phase == 'head' else 'body'} did not arrive within {seconds:g} s "
            f"(the server's {setting})."))

    def refuse(self, error: LLMProxyError) -> None:
        """Answer ``error`` unless a response has begun, and close the connection."""
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(_raw_response(error))
        self.close()

    def close(self) -> None:
        self.registry.leave(self)
        self.expect("closed", None)
        self.transport.close()


def _body_writer(cycle: RequestResponseCycle, transport: asyncio.Transport) -> Callable[[bytes], bool]:
    """The ``BODY_WRITER`` of the response ``cycle`` sends."""

    def write(chunk: bytes) -> bool:
        if (cycle.chunked_encoding is not True or cycle.flow.write_paused or cycle.disconnected
                or cycle.response_complete):
            return False
        transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))  # the chunked framing uvicorn's send writes
        return True

    return write


def _whole_writer(cycle: RequestResponseCycle, transport: asyncio.Transport) -> Callable[[int, list[tuple[bytes, bytes]], bytes], bool]:
    """The ``WHOLE_WRITER`` of the response ``cycle`` sends: its head as uvicorn's send writes it (the
    server's default headers first), then the body; the cycle completed as that send completes it."""

    def write(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        if cycle.response_started or cycle.disconnected or cycle.flow.write_paused or cycle.scope["method"] == "HEAD":
            return False
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        head = [STATUS_LINE[status]]
        for name, value in (*cycle.default_headers, *headers):
            head += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            head.append(b"connection: close\r\n")
        transport.write(b"".join((*head, b"\r\n", body)))
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            transport.close()
        cycle.on_response()
        return True

    return write


def _raw_response(error: LLMProxyError) -> bytes:
    """``error`` as a whole HTTP response, written below the ASGI app."""
    status, body = envelope(error)
    payload = body.model_dump_json().encode()
    retry = f"retry-after: {error.retry_after}\r\n" if isinstance(error, OverloadedError) else ""
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n{retry}connection: close\r\n\r\n")
    return head.encode() + payload


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"


def uvicorn_options(limits: ConnectionLimits) -> dict[str, Any]:
    """uvicorn's settings for a server held to ``limits``."""
    return {"http": Connections(limits).protocol, "timeout_keep_alive": limits.idle_timeout}


def reserve_descriptors(limits: ConnectionLimits) -> None:
    """Raise the process's open-file limit (up to what the system allows) to fit ``max_connections``,
    with room for backend connections and files: past it, new connections would wait unaccepted."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = limits.max_connections + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if raised < wanted:
            logger.warning("the open-file limit is %d: too few for max_connections=%d", hard, limits.max_connections)
