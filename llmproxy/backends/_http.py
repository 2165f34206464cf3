"""Shared HTTP plumbing for backends that run as a separate server.

Endpoint normalisation and auth headers; a reader for the two streaming framings local servers use
(SSE and NDJSON); ``Exchange``/``StreamExchange``: what a backend asks, kept apart from how it is sent;
and two clients that send them, with explicit timeouts and one translation point from every transport
failure or error reply to an llmproxy error naming the backend, the URL and what to check:
``HTTPClient`` (sync, the library's) and ``AsyncHTTPClient`` (the server's, on its event loop).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import aiohttp
import anyio
import httptools
import httpx

from llmproxy.common.json_bytes import json_bytes, json_value
from llmproxy.backends._replies import context_overflow, error_message, reports_error, status_hint
from llmproxy.backends._stream_reply import ConnectionEnded, IdleConnections, StreamReply
from llmproxy.backends.base import IDLE, FinishReason, Relayed, StreamDelta
from llmproxy.errors import (
    BackendConnectionError,
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    ConfigurationError,
    LLMProxyError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
V = TypeVar("V")
PROBE_TIMEOUT = 10.0  # a health check must not hang for the generation read timeout


# --- configuration ---------------------------------------------------------------------------


def normalize_endpoint(endpoint: str, backend: str, default: str, strip_suffixes: tuple[str, ...] = ("/v1",)) -> str:
    """``endpoint`` as a base URL with no trailing slash and none of the API prefixes the backend adds
    itself (a trailing ``/v1`` is the most common mistake: it would produce ``/v1/v1/completions``).
    ``default`` is the backend's usual endpoint, shown as an example when ``endpoint`` is wrong."""
    url = endpoint.strip()
    if "://" not in url:
        raise ConfigurationError(
            f"{backend} endpoint {endpoint!r} has no scheme; type it as http://{url or 'localhost'}"
            f" (default for {backend}: {default})"
        )
    try:
        parts = httpx.URL(url)
    except httpx.InvalidURL:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.host:
        raise ConfigurationError(
            f"{backend} endpoint {endpoint!r} is not an http(s) URL; type something like {default}"
        )
    url = url.rstrip("/")
    stripped = True
    while stripped:
        stripped = False
        for suffix in strip_suffixes:
            if url.endswith(suffix):
                url, stripped = url[: -len(suffix)].rstrip("/"), True
    return url


def auth_headers(auth_type: str | None, auth_key: str | None) -> dict[str, str]:
    """Headers for MemGPT's two auth styles: ``bearer_token`` and Azure-style ``api_key``."""
    if auth_type is None:
        return {}
    if not auth_key:
        raise ConfigurationError(f"auth_type {auth_type!r} needs an auth_key")
    if not (auth_key.isascii() and auth_key.isprintable()):  # a line break would end the header early
        raise ConfigurationError("auth_key must be one line of printable ASCII characters; check for a pasted"
                                 " line break or quote")
    if auth_type == "bearer_token":
        return {"Authorization": f"Bearer {auth_key}"}
    if auth_type == "api_key":
        return {"api-key": auth_key}
    raise ConfigurationError(f"unknown auth_type {auth_type!r}; use 'bearer_token' or 'api_key'")


# --- streaming framings ----------------------------------------------------------------------


class EventReader:
    """The payloads of a streamed answer, fed its bytes as they arrive: the data of each server-sent
    event (``framing="sse"``) or each non-blank line (``"ndjson"``, Ollama).

    Lines split on LF with an optional CR before it, not like ``str.splitlines``, which would also
    break a JSON event at a U+2028 or U+0085 a model may generate inside a token. SSE comment lines
    (keep-alive pings) are skipped; an old llama.cpp ``error: {...}`` line becomes
    ``{"error": ...}``; an event cut off by the end of the stream still counts (koboldcpp <= 1.82 ends
    with ``data: [DONE]`` and no blank line).
    """

    def __init__(self, framing: str = "sse") -> None:
        self.sse = framing == "sse"
        self._pending = b""
        self._event = ""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[str]:
        if self.sse and not (self._pending or self._data or self._event):
            payloads = _plain_payloads(chunk)
            if payloads is not None:  # most reads: what the line-by-line reading below would give
                return payloads
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        return self._payloads(lines)

    def end(self) -> list[str]:
        """What the stream's last, unterminated line and event hold."""
        lines, self._pending = ([self._pending] if self._pending else []), b""
        payloads = self._payloads(lines)
        if self.sse:
            payloads += self._flush()
        return payloads

    def _payloads(self, lines: list[bytes]) -> list[str]:
        payloads = []
        for raw in lines:
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            if not self.sse:
                if raw.strip():
                    payloads.append(raw.decode("utf-8", errors="replace"))
            elif not raw:
                payloads += self._flush()
            elif raw.startswith(b"data:"):  # the common line first: a stream is mostly these
                self._data.append(raw[6:] if raw.startswith(b"data: ") else raw[5:])
            elif not raw.startswith(b":"):  # a ``:`` line is a comment (keep-alive ping)
                name, _, value = raw.partition(b":")
                value = value.removeprefix(b" ")
                if name == b"event":
                    self._event = value.decode("utf-8", errors="replace")
                elif name == b"error":
                    self._event, self._data = "error", [value]
        return payloads

    def _flush(self) -> list[str]:
        event, data = self._event, self._data
        self._event, self._data = "", []
        if not data:
            return []
        text = b"\n".join(data).decode("utf-8", errors="replace")
        return [text if event != "error" else json.dumps({"error": _json_or_text(text)})]


def _plain_payloads(chunk: bytes) -> list[str] | None:
    """The payloads of ``chunk`` where it is whole ``data: ...`` events of one line each, ended by LF
    alone (a read of most streams), else None."""
    # ``find``, not ``in``: a bytes ``in`` first tries its operand as an integer and formats the error.
    if chunk.find(b"\r") != -1 or not chunk.endswith(b"\n\n"):
        return None
    if chunk.find(b"\n") == len(chunk) - 2:  # one event: most reads of a stream that is not flooding
        return [chunk[6:-2].decode("utf-8", errors="replace")] if chunk.startswith(b"data: ") else None
    events = chunk[:-2].split(b"\n\n")
    for event in events:
        if not event.startswith(b"data: ") or event.find(b"\n") != -1:
            return None
    return [event[6:].decode("utf-8", errors="replace") for event in events]


def _json_or_text(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data


# --- what is asked -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange(Generic[T]):
    """One POST with a JSON body and how to read its JSON reply: what a backend asks, apart from how
    it is sent (a sync client for the library, an async one for the server)."""

    path: str
    body: Any
    read: Callable[[Any], T]
    # A quicker reading of a successful reply's text, tried first (None: it reads it as JSON).
    read_text: Callable[[str], T | None] | None = None


@dataclass(frozen=True)
class StreamExchange:
    """One streamed POST: each payload read into a delta (None: nothing in it), in the given framing;
    ``abandoned`` is posted, best effort, when the reader leaves before the end (koboldcpp's abort)."""

    path: str
    body: Any
    read_event: Callable[[Any], StreamDelta | None]
    framing: str = "sse"
    abandoned: Exchange[Any] | None = None


class Relay:
    """One stream's payloads turned into deltas, with what its end must say.

    The deltas carry the text; ``end`` is one empty delta with the finish reason, the token counts (which
    some servers send after the finish reason: OpenAI usage chunks) and the stop string that ended the
    answer. A stream that ends before its protocol says the answer is finished raises: a silently short
    answer would look like a model that stopped on its own.
    """

    def __init__(self, client: _Client, url: str, exchange: StreamExchange) -> None:
        self.client = client
        self.url = url
        self.exchange = exchange
        self.done = False  # an SSE ``[DONE]`` came
        self.events = 0
        self.finish: FinishReason | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.stop_word: str | None = None

    def take(self, data: str) -> StreamDelta | None:
        """The text delta in one payload, if any (an error payload raises)."""
        if not data.startswith("{") and data.strip() == "[DONE]":  # an event is mostly a JSON object
            self.done = True
            return None
        try:
            payload = json_value(data)  # by orjson: a third of json.loads's time a stream event
        except ValueError as exc:
            raise BackendProtocolError(
                f"{self.client.backend} at {self.url} sent a stream event that is not JSON ({data[:200]!r});"
                f" is the endpoint really a {self.client.backend} server?",
                backend=self.client.backend, url=self.url,
            ) from exc
        if reports_error(payload):
            raise self.client.reported_error(self.url, payload, mid_stream=True)
        self.events += 1
        try:  # expect_shape's handling, inline: this runs for every token
            delta = self.exchange.read_event(payload)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            with self.client.expect_shape(self.url):
                raise
        if delta is None:
            return None
        if (delta.finish_reason is None and delta.prompt_tokens is None and delta.completion_tokens is None
                and delta.stop_word is None):
            return delta if delta.text else None  # a plain text delta, most of a stream
        self.finish = delta.finish_reason or self.finish
        if delta.stop_word is not None:
            self.stop_word = delta.stop_word
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if delta.completion_tokens is not None:
            self.completion_tokens = delta.completion_tokens
        return StreamDelta(delta.text) if delta.text else None

    def delta(self, payloads: list[str]) -> StreamDelta | None:
        """The text of the payloads that arrived together: one delta for them all, not one each (a
        fast server's tokens come several to a network read; each delta costs every reader a step)."""
        if len(payloads) == 1:  # most reads: the payload's own delta
            return self.take(payloads[0])
        pieces = [delta.text for delta in map(self.take, payloads) if delta is not None]
        return StreamDelta("".join(pieces)) if pieces else None

    def end(self) -> StreamDelta:
        if self.finish is None and not self.done:
            raise BackendProtocolError(
                f"the stream from {self.client.backend} at {self.url} ended after {self.events} events without"
                " a final one; the answer is incomplete (did the server crash or get stopped? check its log)",
                backend=self.client.backend, url=self.url,
            )
        return StreamDelta("", self.finish or "stop", self.prompt_tokens, self.completion_tokens, self.stop_word)


def relayed(relay: Relay, reply: StreamReply, each: Relayed) -> Callable[[list[str]], Awaitable[None] | None]:
    """What ``reply.relay`` hands the payloads that arrive together to: their delta, to ``each``."""

    def push(payloads: list[str]) -> Awaitable[None] | None:
        delta = relay.delta(payloads)
        if relay.done:
            reply.stop()
        return None if delta is None else each(delta)

    return push


# --- the clients -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timeouts:
    """How long a backend may take, in seconds: to accept the connection, to send the first token of
    an answer (the prompt is read first, which takes long for long prompts on slow machines), and
    between two pieces of an answer. A generation that keeps sending is never cut."""

    connect: float = 5.0
    first_token: float = 120.0
    read: float = 30.0

    def httpx(self) -> httpx.Timeout:
        # httpx knows one read limit, so it gets the larger: the async client, which the server uses,
        # holds the first token and each later piece to their own limits itself.
        return httpx.Timeout(max(self.first_token, self.read), connect=self.connect)


class _Client:
    """What the sync and async clients share: URLs, and the one place that words every transport
    failure and error reply as an llmproxy error naming the backend, the URL and what to check."""

    def __init__(self, backend: str, base_url: str, *, default_url: str, timeouts: Timeouts) -> None:
        self.backend = backend
        self.base_url = base_url
        self.default_url = default_url  # named in the message for a refused connection
        self.timeouts = timeouts

    def url(self, path: str) -> str:
        return self.base_url + path

    def _json_reply(self, url: str, status: int, text: str, reason: str) -> Any:
        self._check_status(url, status, text, reason)
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise BackendProtocolError(
                f"{self.backend} at {url} answered with something that is not JSON"
                f" ({text[:200]!r}); is the endpoint really a {self.backend} server?",
                backend=self.backend, url=url,
            ) from exc
        if reports_error(payload):
            raise self.reported_error(url, payload)
        return payload

    def _reply(self, url: str, exchange: Exchange[T], status: int, text: str, reason: str) -> T:
        """The reply to ``exchange``, read."""
        if exchange.read_text is not None and 200 <= status < 300:
            value = exchange.read_text(text)
            if value is not None:
                return value
        payload = self._json_reply(url, status, text, reason)
        with self.expect_shape(url):
            return exchange.read(payload)

    @contextmanager
    def expect_shape(self, url: str) -> Iterator[None]:
        """Turn a missing or mistyped field met while parsing a reply into a protocol error."""
        try:
            yield
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise BackendProtocolError(
                f"{self.backend} at {url} answered in a shape its protocol does not have ({exc!r});"
                f" is the endpoint a {self.backend} server of a supported version?",
                backend=self.backend, url=url,
            ) from exc

    def reported_error(self, url: str, payload: Any, *, mid_stream: bool = False) -> LLMProxyError:
        """The error for a reply that says it failed although the HTTP status said it worked."""
        message = error_message(payload) or json.dumps(payload)[:300]
        overflow = context_overflow(message, payload, f"{self.backend} at {url}")
        if overflow is not None:
            return overflow
        when = "in the middle of the stream" if mid_stream else "in its answer"
        return BackendError(
            f"{self.backend} at {url} reported an error {when}: {message}; check the server's log",
            backend=self.backend, url=url,
        )

    def _check_status(self, url: str, status: int, text: str, reason: str) -> None:
        if 200 <= status < 300:
            return
        try:
            payload = json.loads(text)
        except ValueError:
            payload = None
        message = error_message(payload) or text.strip()[:300] or reason
        overflow = context_overflow(message, payload, f"{self.backend} at {url}")
        if overflow is not None:
            raise overflow
        raise BackendHTTPError(
            f"{self.backend} at {url} answered HTTP {status}: {message} ({status_hint(status, self.backend)})",
            backend=self.backend, url=url, status=status, body=text,
        )

    # --- the words for each failure ---

    def timed_out(self, url: str, seconds: float, setting: str, what: str) -> BackendTimeoutError:
        if setting == "probe":
            advice = "it may be busy or stuck: check the server's log"
        else:
            advice = (f"the model may be too slow or stuck: raise {setting} (serve --{setting.replace('_', '-')},"
                      f" {setting} in the model's config table, or backend_options={{'{setting}': ...}} in the"
                      " library) or check the server's log")
        return BackendTimeoutError(f"{self.backend} at {url} {what} for {seconds:g} s ({setting}); {advice}",
                                   backend=self.backend, url=url, setting=setting)

    def read_timed_out(self, url: str, timeout: float | None) -> BackendTimeoutError:
        """A read that outlasted the one read limit a client library knows (or a probe's own)."""
        if timeout is not None:
            return self.timed_out(url, timeout, "probe", "sent nothing")
        limits = self.timeouts
        setting = "first_token_timeout" if limits.first_token >= limits.read else "read_timeout"
        return self.timed_out(url, max(limits.first_token, limits.read), setting, "sent nothing")

    def connect_timed_out(self, url: str) -> BackendTimeoutError:
        return BackendTimeoutError(
            f"{self.backend} at {url} did not accept a connection within {self.timeouts.connect:g} s"
            " (connect_timeout); check the host and port, and that no firewall drops the packets",
            backend=self.backend, url=url, setting="connect_timeout",
        )

    def refused(self, url: str, exc: Exception) -> BackendConnectionError:
        return BackendConnectionError(
            f"could not connect to {self.backend} at {url} ({exc}); is the server running and listening there?"
            f" (the default {self.backend} endpoint is {self.default_url})",
            backend=self.backend, url=url,
        )

    def broke_off(self, url: str, exc: Exception) -> BackendProtocolError:
        return BackendProtocolError(
            f"{self.backend} at {url} broke off its answer ({exc or type(exc).__name__}); it may have crashed, run"
            " out of context or rejected a grammar: check the server's log",
            backend=self.backend, url=url,
        )

    def failed(self, url: str, exc: Exception) -> BackendConnectionError:
        return BackendConnectionError(
            f"talking to {self.backend} at {url} failed ({exc!r}); check the endpoint and the network",
            backend=self.backend, url=url,
        )


class HTTPClient(_Client):
    """The library's client: httpx, synchronous."""

    def __init__(self, backend: str, base_url: str, *, default_url: str, headers: dict[str, str],
                 timeouts: Timeouts, transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(backend, base_url, default_url=default_url, timeouts=timeouts)
        # The read timeout bounds the wait for each chunk, not the whole answer, so long streams are fine.
        self._client = httpx.Client(headers=headers, timeout=timeouts.httpx(), transport=transport)

    def get_json(self, path: str, *, timeout: float | None = None) -> Any:
        return self._request_json("GET", path, None, timeout)

    def post_json(self, path: str, body: Any, *, timeout: float | None = None) -> Any:
        return self._request_json("POST", path, body, timeout)

    def _request_json(self, method: str, path: str, body: Any, timeout: float | None) -> Any:
        url = self.url(path)
        response = self._request(method, url, body, timeout)
        return self._json_reply(url, response.status_code, response.text, response.reason_phrase)

    def post(self, exchange: Exchange[T]) -> T:
        url = self.url(exchange.path)
        response = self._request("POST", url, exchange.body, None)
        return self._reply(url, exchange, response.status_code, response.text, response.reason_phrase)

    def _request(self, method: str, url: str, body: Any, timeout: float | None) -> httpx.Response:
        # A shorter ``timeout`` (a probe's) bounds the read; connecting keeps the configured limit.
        limit = httpx.USE_CLIENT_DEFAULT if timeout is None else httpx.Timeout(timeout, connect=self.timeouts.connect)
        with self._translated(url, timeout):
            return self._client.request(method, url, json=body, timeout=limit)

    def stream(self, exchange: StreamExchange) -> Iterator[StreamDelta]:
        """The answer's text deltas, then the closing delta (``Relay``).

        Closing this generator early closes the HTTP response, which tells the server to stop, and
        posts ``exchange.abandoned``.
        """
        url = self.url(exchange.path)
        relay, reader = Relay(self, url, exchange), EventReader(exchange.framing)
        try:
            with self._translated(url), self._client.stream("POST", url, json=exchange.body) as response:
                if not response.is_success:
                    response.read()
                    self._check_status(url, response.status_code, response.text, response.reason_phrase)
                for chunk in response.iter_bytes():
                    delta = relay.delta(reader.feed(chunk))
                    if delta is not None:
                        yield delta
                    if relay.done:
                        break
                delta = relay.delta(reader.end())
                if delta is not None:
                    yield delta
        except GeneratorExit:
            if exchange.abandoned is not None:
                self._abandon(exchange.abandoned)
            raise
        yield relay.end()

    def _abandon(self, exchange: Exchange[Any]) -> None:
        try:
            self.post_json(exchange.path, exchange.body, timeout=self.timeouts.connect)
        except LLMProxyError as exc:  # best effort: the caller is already gone
            log.warning("could not stop the abandoned %s generation: %s", self.backend, exc)

    @contextmanager
    def _translated(self, url: str, timeout: float | None = None) -> Iterator[None]:
        try:
            yield
        except httpx.ConnectTimeout as exc:
            raise self.connect_timed_out(url) from exc
        except httpx.TimeoutException as exc:
            raise self.read_timed_out(url, timeout) from exc
        except httpx.ConnectError as exc:
            raise self.refused(url, exc) from exc
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise self.broke_off(url, exc) from exc
        except httpx.HTTPError as exc:
            raise self.failed(url, exc) from exc

    def close(self) -> None:
        self._client.close()


def _on_this_loop(made: dict[asyncio.AbstractEventLoop, V], make: Callable[[], V]) -> V:
    """What ``made`` holds for the running event loop, made on first use (and what closed loops held,
    forgotten)."""
    loop = asyncio.get_running_loop()
    value = made.get(loop)
    if value is None:
        for old in [old for old in made if old.is_closed()]:
            del made[old]
        value = made[loop] = make()
    return value


class AsyncHTTPClient(_Client):
    """The server's client, on the event loop, so a slow or hung backend holds no thread.

    Whole replies through aiohttp: a quarter of httpx's async client's CPU per request (0.20 against
    0.79 ms, bench/bench_vs_litellm.py's path). Streams, where the server spends most of its time per
    token, read by a ``StreamReply`` of their own (llmproxy.backends._stream_reply) on connections
    kept between them. A stream's first token is held to ``first_token`` seconds and every later
    piece to ``read`` seconds. Sessions and kept connections belong to one event loop each, made on
    first use there.
    """

    def __init__(self, backend: str, base_url: str, *, default_url: str, headers: dict[str, str],
                 timeouts: Timeouts) -> None:
        super().__init__(backend, base_url, default_url=default_url, timeouts=timeouts)
        self._headers = headers
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._idle: dict[asyncio.AbstractEventLoop, IdleConnections] = {}
        # A stream's request, written by hand: where to, and the head's fields that never change.
        parts = urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port or (443 if self._https else 80)
        self._tls: ssl.SSLContext | None = None  # made on the first https connection
        self._target = parts.path  # the base URL's own path, before each request's
        fields = {"Host": parts.netloc, "Content-Type": "application/json", "Accept-Encoding": "identity", **headers}
        self._head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())

    def _session(self) -> aiohttp.ClientSession:
        def make() -> aiohttp.ClientSession:
            limits = self.timeouts
            timeout = aiohttp.ClientTimeout(connect=limits.connect, sock_read=max(limits.first_token, limits.read))
            # No cap on connections: the lane's admission bounds how many requests reach the backend.
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
            return aiohttp.ClientSession(headers=self._headers, timeout=timeout, connector=connector,
                                         auto_decompress=True)

        return _on_this_loop(self._sessions, make)

    async def post(self, exchange: Exchange[T], *, timeout: float | None = None) -> T:
        url = self.url(exchange.path)
        # A shorter ``timeout`` (an abort's) bounds the read; connecting keeps the configured limit.
        options = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(connect=self.timeouts.connect,
                                                                                 sock_read=timeout)}
        with self._translated(url, timeout):
            async with self._session().post(url, json=exchange.body, **options) as response:
                text = await response.text(errors="replace")
        return self._reply(url, exchange, response.status, text, response.reason or "")

    async def get_text(self, path: str, *, timeout: float) -> str:
        """A GET's reply text (a pool's load and health checks: /slots, /metrics), in ``timeout`` seconds."""
        url = self.url(path)
        with self._translated(url, timeout):
            async with self._session().get(url, timeout=aiohttp.ClientTimeout(
                    total=timeout, connect=min(timeout, self.timeouts.connect))) as response:
                text = await response.text(errors="replace")
        self._check_status(url, response.status, text, response.reason or "")
        return text

    async def answer(self, exchange: Exchange[T]) -> T:
        """A whole answer, not streamed: its first token is all of it, held to ``first_token``."""
        url = self.url(exchange.path)
        return await self._within(self.timeouts.first_token, self.post(exchange), url, "first_token_timeout",
                                  "sent no answer")

    async def stream(self, exchange: StreamExchange, *, idle_after: float | None = None) -> AsyncIterator[StreamDelta]:
        """The answer's text deltas, then the closing delta (``Relay``); leaving early closes the
        connection (the server stops) and posts ``exchange.abandoned``. Every payload that came since the
        last read makes one delta. With ``idle_after``, ``IDLE`` after every ``idle_after`` seconds that
        pass before the first token (llmproxy.backends.base)."""
        url = self.url(exchange.path)
        relay = Relay(self, url, exchange)
        limits = self.timeouts
        loop = asyncio.get_running_loop()
        try:
            with self._translated(url):
                deadline = loop.time() + limits.first_token
                request, kept = self._request(exchange), self._kept().take()
                reply = await self._send(request, url, kept, exchange.framing)
                try:
                    while True:  # until the first token; every wait on a reply may be left and taken up again
                        try:
                            async with asyncio.timeout_at(deadline if idle_after is None
                                                          else min(deadline, loop.time() + idle_after)):
                                payloads = await self._first_payloads(reply, url)
                            break
                        except TimeoutError:
                            if loop.time() >= deadline:
                                raise self.timed_out(url, limits.first_token, "first_token_timeout",
                                                     "sent no first token" if reply.received else "sent no answer")
                            yield IDLE
                        except ConnectionEnded:  # a kept connection its server closed as the request went out
                            if kept is None or reply.received:
                                raise
                            kept = None
                            reply = await self._send(request, url, None, exchange.framing)
                    reply.limit_waits(limits.read, lambda: self.timed_out(url, limits.read, "read_timeout",
                                                                          "sent nothing more"))
                    while payloads is not None:
                        delta = relay.delta(payloads)
                        if delta is not None:
                            each = yield delta
                            if each is not None:  # the reader takes the rest as it comes (``relayed``)
                                await reply.relay(relayed(relay, reply, each))
                                break
                        if relay.done:
                            break
                        payloads = await reply.read()
                finally:
                    if reply.reusable():
                        self._kept().keep(reply.transport)  # read to its end: kept for the next stream
                    else:
                        reply.close()  # cut: the backend sees the connection close and stops
        except (GeneratorExit, asyncio.CancelledError):
            if exchange.abandoned is not None:
                with anyio.CancelScope(shield=True):
                    await self._abandon(exchange.abandoned)
            raise
        yield relay.end()

    def _request(self, exchange: StreamExchange) -> bytes:
        """The HTTP request that sends ``exchange``."""
        body = json_bytes(exchange.body)  # the prompt and grammar: tens of KB, on every streamed request's path
        return (f"POST {self._target}{exchange.path} HTTP/1.1\r\n{self._head}Content-Length: {len(body)}\r\n\r\n"
                .encode("latin-1") + body)

    async def _send(self, request: bytes, url: str, kept: asyncio.Transport | None, framing: str) -> StreamReply:
        """``request`` written on the ``kept`` connection, or else on a new one: its reply, to be read."""
        reply = StreamReply(EventReader(framing))
        if kept is None:
            await self._connect(reply, url)
        else:
            kept.set_protocol(reply)
            reply.connection_made(kept)  # asyncio calls it for a new connection only
        reply.transport.write(request)  # type: ignore[union-attr] - connected
        return reply

    async def _first_payloads(self, reply: StreamReply, url: str) -> list[str] | None:
        """The reply's first payloads, once a success's head is in (any other status raises)."""
        status = await reply.status()
        if not 200 <= status < 300:
            self._check_status(url, status, await reply.text(), reply.reason)
        return await reply.read()

    async def _connect(self, reply: StreamReply, url: str) -> None:
        loop = asyncio.get_running_loop()
        if self._https and self._tls is None:
            self._tls = ssl.create_default_context()  # loads the system's certificates: once, and only for https
        try:
            async with asyncio.timeout(self.timeouts.connect):
                await loop.create_connection(lambda: reply, self._host, self._port, ssl=self._tls)
        except TimeoutError:
            raise self.connect_timed_out(url) from None
        except ssl.SSLError as exc:  # it listens, but the TLS handshake failed (a certificate not trusted)
            raise self.failed(url, exc) from exc
        except OSError as exc:
            raise self.refused(url, exc) from exc

    def _kept(self) -> IdleConnections:
        return _on_this_loop(self._idle, IdleConnections)

    async def _within(self, seconds: float, step: Awaitable[R], url: str, setting: str, what: str) -> R:
        try:
            async with asyncio.timeout(seconds):  # a third of anyio.fail_after's cost
                return await step
        except TimeoutError:
            raise self.timed_out(url, seconds, setting, what) from None

    async def _abandon(self, exchange: Exchange[Any]) -> None:
        try:
            await self.post(exchange, timeout=self.timeouts.connect)
        except LLMProxyError as exc:  # best effort: the caller is already gone
            log.warning("could not stop the abandoned %s generation: %s", self.backend, exc)

    @contextmanager
    def _translated(self, url: str, timeout: float | None = None) -> Iterator[None]:
        try:
            yield
        except aiohttp.ConnectionTimeoutError as exc:
            raise self.connect_timed_out(url) from exc
        except (aiohttp.ServerTimeoutError, asyncio.TimeoutError) as exc:
            raise self.read_timed_out(url, timeout) from exc
        except aiohttp.ClientConnectorError as exc:
            raise self.refused(url, exc) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as exc:
            raise self.broke_off(url, exc) from exc
        except aiohttp.ClientError as exc:
            raise self.failed(url, exc) from exc
        except (ConnectionEnded, OSError) as exc:  # a stream's own connection (``StreamReply``)
            raise self.broke_off(url, exc) from exc
        except httptools.HttpParserError as exc:
            raise self.failed(url, exc) from exc

    async def aclose(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for session in sessions.values():
            await session.close()
        kept, self._idle = self._idle, {}
        for loop, connections in kept.items():
            if not loop.is_closed():
                connections.close()
