"""Running backend work for the server without blocking its event loop.

Backends are synchronous (httpx sync clients, llama-cpp-python), so every generation runs in a
worker thread, and so does counting tokens with a backend's own tokenizer. Rendering a request and
reading its answer only compute, so they run on the event loop: in a worker thread they would fight
the loop for the GIL, which halves the server's throughput. Each backend gets a ``Lane`` that says
how it is called. Backends that serve one generation at a time (``capabilities.concurrent`` false:
the embedded model) get a gate, so queued requests wait on the event loop instead of holding
threads, and leave the queue when their client goes away. Generations always go through
``Backend.stream`` so they can be stopped between tokens: a client that disconnects closes the
backend's stream (which closes its HTTP response, telling the server to stop) instead of leaving it
to run for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from llmproxy.backends.base import Backend, Completion, GenerationParams, StreamDelta
from llmproxy.errors import LLMProxyError
from llmproxy.server_errors import envelope
from llmproxy.server_log import RequestLog, logger
from llmproxy.streaming import DONE, error_event, sse
from llmproxy.tokens import TokenCount, answer_tokens, count_tokens

T = TypeVar("T")


class Cancelled(Exception):
    """The client went away; the work for it was stopped."""


class Lane:
    """How the server calls one backend, decided once from its capabilities."""

    def __init__(self, backend: Backend) -> None:
        capabilities = backend.capabilities
        self.backend = backend
        self.gate = None if capabilities.concurrent else asyncio.Semaphore(1)
        # Counting tokens with the backend's tokenizer is a call to it (HTTP, or the loaded model),
        # which may wait: it runs in a worker thread instead of on the event loop.
        self.counts_in_thread = capabilities.tokenizer

    async def prepare(self, prepare: Callable[[], Pending], log: RequestLog) -> Job:
        """Plan a request: render it here, count its prompt's tokens where the backend allows, finish."""
        pending = prepare()
        job = pending.job(await self._count(count_tokens, pending.prompt))
        log.prompt(job.prompt, job.grammar)
        return job

    async def respond(self, job: Job, completion: Completion, log: RequestLog) -> BaseModel:
        """The response to ``completion``, its answer's tokens counted where the backend allows."""
        log.raw_output(completion.text)
        if completion.completion_tokens is not None:  # reported by the backend: nothing to count
            return job.finish(completion, answer_tokens(completion))
        return job.finish(completion, await self._count(answer_tokens, completion))

    async def _count(self, counter: Callable[[T, Backend], TokenCount], counted: T) -> TokenCount:
        if self.counts_in_thread:
            return await in_thread(counter, counted, self.backend)
        return counter(counted, self.backend)

    def release(self) -> None:
        if self.gate is not None:
            self.gate.release()


class Collector:
    """Backend deltas gathered into the Completion they add up to."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.finish_reason = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None

    def add(self, delta: StreamDelta) -> None:
        self.parts.append(delta.text)
        self.finish_reason = delta.finish_reason or self.finish_reason
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if delta.completion_tokens is not None:
            self.completion_tokens = delta.completion_tokens

    def completion(self) -> Completion:
        return Completion("".join(self.parts), self.finish_reason or "stop", self.prompt_tokens, self.completion_tokens)


def close_stream(deltas: Iterator[StreamDelta]) -> None:
    """Close a backend stream (runs its cleanup: releases locks, closes the HTTP response)."""
    close = getattr(deltas, "close", None)
    if close is not None:
        close()


class Chunks(Protocol):
    """Builds the chunks of a streamed response (llmproxy.streaming.ChatChunks, completions.TextChunks)."""

    def opening(self) -> list[BaseModel]: ...
    def feed(self, text: str) -> list[BaseModel]: ...
    def closing(self, response: Any) -> list[BaseModel]: ...


@dataclass(frozen=True)
class Job:
    """One request's generation: what the backend is sent, how its text becomes the response, and
    (for a stream) the chunk builder. ``grammar`` labels the grammar used, for the log."""

    prompt: str
    params: GenerationParams
    finish: Callable[[Completion, TokenCount], BaseModel]
    chunks: Chunks | None = None
    grammar: str | None = None


@dataclass(frozen=True)
class Pending:
    """A request prepared up to its prompt, whose tokens are still to be counted; ``job`` completes
    the plan with the count."""

    prompt: str
    job: Callable[[TokenCount], Job]


def _open(backend: Backend, job: Job, cancelled: threading.Event) -> Iterator[StreamDelta]:
    if cancelled.is_set():  # the client left while the request was being planned
        raise Cancelled()
    return iter(backend.stream(job.prompt, job.params))


def generate(backend: Backend, job: Job, cancelled: threading.Event) -> Completion:
    """A whole generation, stopped between deltas once ``cancelled`` is set. Runs in a worker thread."""
    collector = Collector()
    deltas = _open(backend, job, cancelled)
    try:
        for delta in deltas:
            if cancelled.is_set():
                raise Cancelled()
            collector.add(delta)
    finally:
        close_stream(deltas)
    return collector.completion()


async def in_thread(function: Callable[..., T], *args) -> T:
    return await anyio.to_thread.run_sync(function, *args)


class Watch:
    """A request's connection, watched while its work runs (see ``watching``).

    A disconnect sets ``cancelled``, which worker threads check between backend deltas. Only a wait
    at a gate is interrupted outright: a thread cannot be, and everything else is quick.
    """

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._task = asyncio.current_task()
        self._at_gate = False

    def disconnected(self) -> None:
        self.cancelled.set()
        if self._at_gate and self._task is not None:
            self._task.cancel()

    async def enter(self, gate: asyncio.Semaphore | None) -> None:
        """Wait for ``gate`` (the caller releases it); a client that leaves meanwhile ends the wait."""
        if gate is None:
            return
        self._at_gate = True
        try:
            await gate.acquire()
        finally:
            self._at_gate = False


@contextlib.asynccontextmanager
async def watching(request: Request) -> AsyncIterator[Watch]:
    """Watch for the client to disconnect while the body runs; raises Cancelled if it did.

    A plain asyncio task: an anyio task group here would cost more than the rest of the request.
    """
    watch = Watch()

    async def listen() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        watch.disconnected()

    listener = asyncio.ensure_future(listen())
    try:
        yield watch
    except asyncio.CancelledError:
        if not watch.cancelled.is_set():
            raise
        asyncio.current_task().uncancel()  # our own cancellation, turned into Cancelled
        raise Cancelled() from None
    finally:
        listener.cancel()
    if watch.cancelled.is_set():
        raise Cancelled()


class EventStream(StreamingResponse):
    """A server-sent event stream whose ``on_close`` always runs, however the stream ends.

    Starlette cancels the body iterator when the client disconnects, possibly before it ever
    started (then its ``finally`` would never run); this runs the cleanup either way.
    """

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(body, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                await self._on_close()


# --- the two ways to answer ------------------------------------------------------------------


async def answer(request: Request, lane: Lane, prepare: Callable[[], Pending], log: RequestLog) -> BaseModel:
    """The whole response at once. ``prepare`` plans the request once the lane's gate lets it in."""
    async with watching(request) as watch:
        await watch.enter(lane.gate)
        try:
            job = await lane.prepare(prepare, log)
            completion = await in_thread(generate, lane.backend, job, watch.cancelled)
        finally:
            lane.release()
    return await lane.respond(job, completion, log)


async def stream(request: Request, lane: Lane, prepare: Callable[[], Pending], log: RequestLog) -> EventStream:
    """A server-sent event stream of the response.

    The request is planned and the backend's first delta awaited before the stream starts, so a
    request the backend refuses (down, overflow, bad grammar) still gets a proper HTTP error status.
    A failure after that ends the stream with an error event and ``[DONE]``.
    """
    backend = lane.backend
    deltas: Iterator[StreamDelta] | None = None
    admitted = False  # past the lane's gate, which must then be released

    async def release() -> None:
        if deltas is not None:
            await in_thread(close_stream, deltas)
        if admitted:
            lane.release()

    try:
        async with watching(request) as watch:
            await watch.enter(lane.gate)
            admitted = True
            job = await lane.prepare(prepare, log)
            deltas = await in_thread(_open, backend, job, watch.cancelled)
            first = await in_thread(next, deltas, None)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await release()
        raise
    assert job.chunks is not None
    chunks, source = job.chunks, deltas
    finished = False

    async def events() -> AsyncIterator[bytes]:
        nonlocal finished
        for chunk in chunks.opening():
            yield sse(chunk)
        collector = Collector()
        try:
            delta = first
            while delta is not None:
                collector.add(delta)
                for chunk in chunks.feed(delta.text):
                    yield sse(chunk)
                delta = await in_thread(next, source, None)
            response = await lane.respond(job, collector.completion(), log)
            log.answered(response)
            for chunk in chunks.closing(response):
                yield sse(chunk)
        except Exception as exc:  # noqa: BLE001 - every failure becomes the stream's error event
            if not isinstance(exc, LLMProxyError):
                logger.exception("unexpected failure while streaming from %s", backend.name)
            log.failed(exc)
            yield error_event(envelope(exc)[1])
        finished = True
        yield DONE

    async def on_close() -> None:
        await release()
        if not finished:
            log.disconnected()
        log.emit()

    return EventStream(events(), on_close)
