"""A streamed reply read as it arrives, with no HTTP client library in between: the server's way to
read a backend's stream (llmproxy.backends._http's ``AsyncHTTPClient.stream``).

Relaying a stream is most of the server's work per token. Through aiohttp each piece of a streamed
answer took some twenty Python calls (its protocol, the parser's callbacks, its stream reader and
iterator) before the server saw its bytes; here a ``StreamReply`` is the connection's asyncio protocol
for the time of one reply: httptools (the C parser uvicorn uses) splits the response as the bytes
come, the body goes at once into the stream's own reader (SSE or NDJSON), and whoever reads the reply
gets every payload that came since its last read in one go. Or, once the answer has begun, its reader
hands over how each payload is relayed (``relay``): then the connection's own callback relays every
token as its bytes arrive, down to the client's socket, with no task woken for it. ``IdleConnections``
keeps a connection whose reply ended for the next stream (HTTP keep-alive), as a client library would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import httptools

KEEP_IDLE_SECONDS = 30.0  # how long an unused connection is kept for the next stream
PAUSE_BYTES = 256 * 1024  # body bytes not yet read above which the connection stops reading (backpressure)


class BodyReader(Protocol):
    """How a reply's body becomes payloads: llmproxy.backends._http's ``EventReader``."""

    def feed(self, chunk: bytes) -> list[str]: ...
    def end(self) -> list[str]: ...


class ConnectionEnded(ConnectionError):
    """The connection closed before its reply was whole."""


class StreamReply(asyncio.Protocol):
    """One HTTP/1.1 reply on its connection: ``status()`` once its head is in, then ``read()`` its body's
    payloads (a 2xx reply's) or ``text()`` its whole body (any other).

    A read waits for anything to arrive; ``limit_waits`` bounds every later wait, as a timeout around
    each would, with one timer a limit instead of one a read. A failure (the connection lost before the
    reply was whole, bytes that are not HTTP, a wait past its limit) is raised by the read under way or
    the next one.
    """

    def __init__(self, body: BodyReader) -> None:
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self._body = body
        self.transport: asyncio.Transport | None = None
        self.received = False  # any byte of the reply came
        self.reason = ""  # the status line's words
        self.complete = False  # all of it came
        self._keep_alive = False  # the connection may carry another request once the reply is whole
        self._status: int | None = None  # once the head is in
        self._sized = False  # chunked, or a Content-Length: else the body ends with the connection
        self._payloads: list[str] = []
        self._unread = 0  # body bytes in ``_payloads``
        self._error_body: list[bytes] = []
        self._failure: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._waiting_since: float | None = None
        self._limit: tuple[float, Callable[[], BaseException]] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._push: Callable[[list[str]], Awaitable[None] | None] | None = None  # while ``relay`` runs
        self._blocked: Awaitable[None] | None = None  # what ``_push`` is still writing: nothing more until done

    # --- what the connection does (asyncio calls these) ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)
        if self._push is None:
            self._wake()  # every arrival ends a wait: a read of nothing new waits again, its limit anew
        elif self._waiting_since is not None:
            self._waiting_since = self._loop.time()  # a relay's one long wait: its limit counts from the last arrival

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.complete and self._failure is None:
            if self._status is not None and not self._sized:  # a body that ends with its connection
                self._ended()
            else:
                self._failure = ConnectionEnded(f"the connection closed before the reply was whole ({exc})"
                                                if exc else "the connection closed before the reply was whole")
        self._stop_timer()
        self._wake()

    # --- what httptools calls ---

    def on_status(self, reason: bytes) -> None:
        self.reason = reason.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._sized = True

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if not 200 <= self._status < 300:  # type: ignore[operator] - the head came first
            self._error_body.append(body)
            return
        payloads = self._body.feed(body)
        if self._push is not None and self._blocked is None and not self._payloads:  # relaying, nothing held
            if payloads:
                self._hand_on(payloads)
            return
        self._payloads += payloads
        self._unread += len(body)
        if self._unread > PAUSE_BYTES and self.transport is not None:
            self.transport.pause_reading()  # resumed by the read that takes them

    def on_message_complete(self) -> None:
        self._keep_alive = self._parser.should_keep_alive()  # known only until the parser moves on
        self._ended()

    # --- what the reader calls ---

    async def status(self) -> int:
        """The reply's status code, once its head is in."""
        while self._status is None:
            await self._wait()
        return self._status

    async def read(self) -> list[str] | None:
        """The payloads that came since the last read (waiting for one); None once the body ended."""
        while not self._payloads:
            if self.complete:
                return None
            await self._wait()
        return self._taken()

    async def relay(self, push: Callable[[list[str]], Awaitable[None] | None]) -> None:
        """Hand every payload from now on to ``push``, in the connection's own callback as the bytes arrive:
        no wake-up of the reader's task between a token's bytes and its relay, which cost more than the
        relay itself. Returns once the body ended or ``stop()`` was called; raises the reply's failure or
        ``push``'s. Where ``push`` gives an awaitable (what it wrote waits for a slow client), the
        connection stops reading until that is done."""
        self._push = push
        try:
            while True:
                if self._blocked is not None:  # what was pushed last is still being written: it holds the rest
                    await self._blocked
                    self._blocked = None
                    if not self.transport.is_closing():  # type: ignore[union-attr] - connected
                        self.transport.resume_reading()  # type: ignore[union-attr]
                elif self._push is None:  # stopped, or failed
                    break
                elif self._payloads:  # they came before the relay began, or while it was blocked
                    self._hand_on(self._taken())
                elif self.complete:
                    break
                else:
                    await self._wait()  # woken by the end, a failure or a blocked push: not by every arrival
            if self._failure is not None:
                raise self._failure
        finally:
            self._push = None

    def stop(self) -> None:
        """End ``relay``: nothing more is handed on (its protocol said the answer is complete)."""
        self._push = None
        self._wake()

    async def text(self) -> str:
        """The whole body of a reply that is not a success."""
        while not self.complete:
            await self._wait()
        return b"".join(self._error_body).decode("utf-8", errors="replace")

    def limit_waits(self, seconds: float, error: Callable[[], BaseException]) -> None:
        """From now on, a wait that lasts ``seconds`` fails with ``error()``; the time the reader spends
        elsewhere does not count."""
        if self.complete:
            return  # no wait left to limit
        self._limit = (seconds, error)
        self._timer = self._loop.call_later(seconds, self._check_wait)

    def reusable(self) -> bool:
        """Whether the connection may carry another request: the reply is whole and asked for no close."""
        return self.complete and self._failure is None and self._keep_alive

    def close(self) -> None:
        """Stop reading: the connection closes (a server that is still generating sees it and stops)."""
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()

    # --- inside ---

    async def _wait(self) -> None:
        if self._failure is not None:
            raise self._failure
        self._waiter = self._loop.create_future()
        self._waiting_since = self._loop.time()
        try:
            await self._waiter
        finally:
            self._waiter = self._waiting_since = None
        if self._failure is not None:
            raise self._failure

    def _hand_on(self, payloads: list[str]) -> None:
        """``payloads`` to the relay's push; a write it gives to wait for holds the rest, reading paused."""
        try:
            self._blocked = self._push(payloads)  # type: ignore[misc] - relaying
        except Exception as exc:  # noqa: BLE001 - raised by ``relay``, in the reader's task
            self._fail(exc)
            return
        if self._blocked is not None:  # its client is slow: no more until that is written
            self.transport.pause_reading()  # type: ignore[union-attr] - connected
            self._wake()

    def _taken(self) -> list[str]:
        """The payloads that came, taken: reading goes on if they had stopped it."""
        payloads, self._payloads = self._payloads, []
        if self._unread > PAUSE_BYTES and self.transport is not None:
            self.transport.resume_reading()
        self._unread = 0
        return payloads

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _ended(self) -> None:
        if 200 <= (self._status or 0) < 300:
            self._payloads += self._body.end()
        self.complete = True
        self._stop_timer()
        self._wake()  # a relay waits for nothing else

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._push = None  # a relay hands on nothing more
        self.close()
        self._wake()

    def _check_wait(self) -> None:
        seconds, error = self._limit  # type: ignore[misc] - set with the timer
        now = self._loop.time()
        since = self._waiting_since
        if since is not None and now - since >= seconds:
            self._fail(error())
            return
        self._timer = self._loop.call_at((now if since is None else since) + seconds, self._check_wait)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Idle(asyncio.Protocol):
    """An idle connection's protocol: the server closing it closes it here too; it sends nothing unasked."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.close()


class IdleConnections:
    """Connections to one server whose last reply ended, kept for the next stream, each closed after
    ``seconds`` unused (one event loop's)."""

    def __init__(self, seconds: float = KEEP_IDLE_SECONDS) -> None:
        self.seconds = seconds
        self._idle: dict[asyncio.Transport, asyncio.TimerHandle] = {}

    def take(self) -> asyncio.Transport | None:
        """The connection last kept that is still open, if any."""
        while self._idle:
            transport, expiry = self._idle.popitem()
            expiry.cancel()
            if not transport.is_closing():
                return transport
        return None

    def keep(self, transport: asyncio.Transport) -> None:
        transport.set_protocol(_Idle(transport))
        transport.resume_reading()  # a reply may end with reading paused (what came after its end, not taken)
        self._idle[transport] = asyncio.get_running_loop().call_later(self.seconds, self._expire, transport)

    def _expire(self, transport: asyncio.Transport) -> None:
        del self._idle[transport]
        transport.close()

    def close(self) -> None:
        while self._idle:
            transport, expiry = self._idle.popitem()
            expiry.cancel()
            transport.close()
