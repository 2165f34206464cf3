"""How the server calls a backend without blocking its event loop: one ``Lane`` per backend.

An HTTP backend (``AsyncBackend``) is called on the event loop itself (``LoopLane``): a request that
waits for it holds nothing but its connection, so a hung backend can only ever hold its own lane's
places, and a request that is cancelled or times out lets go of its upstream connection at once.
The embedded model computes in-process, so its generations run in worker threads (``ThreadLane``),
and so does counting tokens with its tokenizer; its threads come from the lane's own pool of as many
as it runs at once (an anyio CapacityLimiter), not anyio's shared 40.

Drafting, planning and finishing a request only compute, so they run on the event loop: in a worker
thread they would fight the loop for the GIL, which costs a third of the server's throughput. The
exceptions are what could hold the loop for long: drafting a ``heavy`` request (large schemas), and
estimating the tokens of a long prompt with tiktoken (0.18 s for 2 MiB). Each lane runs a
limited number of requests at once and queues a limited number more (llmproxy.server.admission; one
at a time for a backend whose ``capabilities.concurrent`` is false: the embedded model). Generations
always go through the backend's stream so they can be stopped between tokens: closing it closes the
HTTP response, which tells the backend server to stop, instead of leaving it to run for nobody.
Embeddings go the same ways (``embed``): on the event loop, or in the lane's threads, behind its admission.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from contextlib import aclosing
from typing import Any

import anyio
from pydantic import BaseModel

from llmproxy.backends.base import (IDLE, AsyncBackend, Backend, Completion, Embedded, EmbeddingInput, EmbeddingOptions,
                                    ProbeResult, Relayed, StreamDelta)
from llmproxy.server.admission import Admission
from llmproxy.server.config import RouteLimits
from llmproxy.server.disconnects import Cancelled, Watch
from llmproxy.server.endpoints import Generation, Planned
from llmproxy.server.request_log import RequestLog
from llmproxy.tokens import TokenCount, answer_tokens, count_tokens, estimate_tokens


LONG_TEXT = 64 * 1024  # characters whose token estimate (~10 ms) goes to a worker thread


def lane_for(backend: Backend, name: str, limits: RouteLimits) -> Lane:
    """The lane that suits ``backend``: on the event loop where its I/O can run there."""
    return LoopLane(backend, name, limits) if isinstance(backend, AsyncBackend) else ThreadLane(backend, name, limits)


class Lane(abc.ABC):
    """How the server calls one backend. ``open`` gives a stream of deltas to read with ``next`` and
    end with ``close``; ``generate`` reads one whole."""

    def __init__(self, backend: Backend, name: str, limits: RouteLimits) -> None:
        self.backend = backend
        self.admission = Admission(name, limits.max_running, limits.max_queue)

    async def plan(self, generation: Generation, log: RequestLog) -> Planned:
        """Draft the request, count its prompt's tokens, plan it."""
        prompt = await anyio.to_thread.run_sync(generation.draft) if generation.heavy else generation.draft()
        planned = generation.plan(await self.count(prompt))
        log.prompt(planned.prompt, planned.grammar, planned.params)
        return planned

    async def finish(self, generation: Generation, completion: Completion, log: RequestLog) -> BaseModel:
        """The response to ``completion``, its answer's tokens counted where the backend did not report them."""
        log.raw_output(completion.text)
        if completion.completion_tokens is not None:  # reported by the backend: nothing to count
            return generation.finish(completion, answer_tokens(completion))
        return generation.finish(completion, await self.count(completion.text))

    async def ready(self, seconds: float | None = None) -> bool:
        """Whether the request, admitted, may be planned now, waiting at most ``seconds`` (None: as long as it
        takes): always, except while its model is being loaded on demand (llmproxy.server.on_demand)."""
        return True

    @abc.abstractmethod
    async def generate(self, planned: Planned, watch: Watch, log: RequestLog) -> Completion:
        """The whole generation, stopped once the client leaves; ``log`` is told when its first piece is in."""

    async def probe(self, seconds: float) -> ProbeResult:
        """What the backend says about itself, or that it is down if it says nothing within ``seconds``.

        Not from the lane's threads, which hung generations may all hold; a probe left behind ends
        by itself at the backend's own probe timeout."""
        with anyio.move_on_after(seconds):
            return await anyio.to_thread.run_sync(self.backend.probe, abandon_on_cancel=True)
        return ProbeResult(backend=self.backend.name, url=None, up=False, detail=f"no answer within {seconds:g} s")

    @abc.abstractmethod
    async def count(self, text: str) -> TokenCount:
        """Tokens in ``text``, by the backend's tokenizer where it has one."""

    @abc.abstractmethod
    async def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, watch: Watch,
                    log: RequestLog) -> Embedded:
        """The backend's embeddings of ``inputs``, stopped once the client leaves."""

    @abc.abstractmethod
    async def open(self, planned: Planned, watch: Watch, idle_after: float | None = None) -> Any:
        """The backend's stream of deltas for ``planned``. With ``idle_after``, until its first delta, a
        read that waits that many seconds gives ``IDLE`` (llmproxy.backends.base) and the next read
        waits on: a face whose clients give up on a silent stream sends them something then."""

    @abc.abstractmethod
    async def next(self, deltas: Any) -> StreamDelta | None:
        """The stream's next delta (or ``IDLE``); None at its end."""

    async def relay(self, deltas: Any, each: Relayed) -> None:
        """Every delta left in the stream handed to ``each`` until the stream ends; what ``each`` gives
        back (its client is slow) is waited for before the next."""
        delta = await self.offer(deltas, each)
        while delta is not None:
            blocked = each(delta)
            if blocked is not None:
                await blocked
            delta = await self.next(deltas)

    async def offer(self, deltas: Any, each: Relayed) -> StreamDelta | None:
        """``next``, with ``each`` offered to a stream that relays by itself (it calls ``each`` for
        every delta that comes before the one it gives)."""
        return await self.next(deltas)

    @abc.abstractmethod
    async def close(self, deltas: Any) -> None:
        """End the stream (the backend stops generating)."""

    async def aclose(self) -> None:
        """Release what the lane holds on the event loop."""

    def retry_elsewhere(self, error: BaseException) -> bool:
        """Whether the request that failed with ``error`` before its answer began may be sent afresh to
        another backend of the same model: only a pool's lane has any (llmproxy.server.pools.lane)."""
        return False


class LoopLane(Lane):
    """A backend with async I/O, called on the event loop."""

    backend: Any  # a Backend that is also an AsyncBackend

    async def generate(self, planned: Planned, watch: Watch, log: RequestLog) -> Completion:
        collector = Collector()
        async with watch.interruptible():  # a client that leaves cancels the wait for the backend at once
            if planned.params.logprobs is not None:  # reported with whole answers only
                completion = await self.backend.acomplete(planned.prompt, planned.params)
                log.first_token()
                return completion
            async with aclosing(await self.open(planned, watch)) as deltas:
                async for delta in deltas:
                    log.first_token()
                    collector.add(delta)
        return collector.completion()

    async def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, watch: Watch,
                    log: RequestLog) -> Embedded:
        async with watch.interruptible():
            return await self.backend.aembed(inputs, options)

    async def count(self, text: str) -> TokenCount:
        counted = await self.backend.acount_tokens(text)
        return TokenCount(counted, exact=True) if counted is not None else await estimate(text)

    async def open(self, planned: Planned, watch: Watch, idle_after: float | None = None) -> AsyncIterator[StreamDelta]:
        if watch.cancelled.is_set():  # the client left while the request was being planned
            raise Cancelled()
        # The backend's own reader gives IDLE: waiting with a timeout around each read here would take
        # a task per stream, which costs a streamed request three more turns of the event loop.
        return self.backend.astream(planned.prompt, planned.params, idle_after=idle_after)

    async def next(self, deltas: AsyncIterator[StreamDelta]) -> StreamDelta | None:
        return await anext(deltas, None)

    async def offer(self, deltas: AsyncGenerator[StreamDelta, Relayed | None], each: Relayed) -> StreamDelta | None:
        try:  # sent in: an HTTP stream hands ``each`` its deltas as the bytes arrive (AsyncBackend.astream)
            return await deltas.asend(each)
        except StopAsyncIteration:
            return None

    async def close(self, deltas: AsyncIterator[StreamDelta]) -> None:
        await deltas.aclose()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        await self.backend.aclose()


class ThreadLane(Lane):
    """A backend that blocks (the embedded model), called in the lane's own worker threads."""

    def __init__(self, backend: Backend, name: str, limits: RouteLimits) -> None:
        super().__init__(backend, name, limits)
        # A request uses one thread at a time, and only while admitted: as many threads as places.
        self.threads = anyio.CapacityLimiter(limits.max_running)

    async def count(self, text: str) -> TokenCount:
        if self.backend.capabilities.tokenizer:  # the loaded model's tokenizer: computes, off the loop
            return await self._in_thread(count_tokens, text, self.backend)
        return await estimate(text)

    async def generate(self, planned: Planned, watch: Watch, log: RequestLog) -> Completion:
        return await self._in_thread(_generate, self.backend, planned, watch.cancelled, log)  # one thread hop

    async def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, watch: Watch,
                    log: RequestLog) -> Embedded:
        return await self._in_thread(_embed, self.backend, inputs, options, watch.cancelled)

    async def open(self, planned: Planned, watch: Watch, idle_after: float | None = None) -> ThreadStream:
        return ThreadStream(await self._in_thread(_open, self.backend, planned, watch.cancelled), idle_after)

    async def next(self, stream: ThreadStream) -> StreamDelta | None:
        if stream.idle_after is None:
            return await self._in_thread(next, stream.deltas, None)
        if stream.reading is None:
            stream.reading = asyncio.ensure_future(self._in_thread(next, stream.deltas, None))
        if not (await asyncio.wait({stream.reading}, timeout=stream.idle_after))[0]:
            return IDLE
        reading, stream.reading, stream.idle_after = stream.reading, None, None  # the first delta: idle no more
        return reading.result()

    async def close(self, stream: ThreadStream) -> None:
        if stream.reading is not None:  # a read still waiting for the first delta: the stream is busy until it ends
            stream.reading.cancel()
            with contextlib.suppress(BaseException):
                await stream.reading
        await self._in_thread(_close, stream.deltas)

    async def _in_thread(self, function, *args):  # noqa: ANN001, ANN202 - anyio's own signature
        return await anyio.to_thread.run_sync(function, *args, limiter=self.threads)


class ThreadStream:
    """A backend's stream read in worker threads, one delta a read. Until its first delta, with
    ``idle_after``, a read left waiting (``reading``) is taken up by the next."""

    def __init__(self, deltas: Iterator[StreamDelta], idle_after: float | None) -> None:
        self.deltas = deltas
        self.idle_after = idle_after
        self.reading: asyncio.Future[StreamDelta | None] | None = None


async def estimate(text: str) -> TokenCount:
    """``text``'s tokens by tiktoken: in a worker thread when it is long."""
    if len(text) > LONG_TEXT:
        return TokenCount(await anyio.to_thread.run_sync(estimate_tokens, text), exact=False)
    return TokenCount(estimate_tokens(text), exact=False)


class Collector:
    """Backend deltas gathered into the Completion they add up to."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.finish_reason = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.stop_word: str | None = None  # the stop string that ended the answer, where the backend says

    def add(self, delta: StreamDelta) -> None:
        self.parts.append(delta.text)
        self.finish_reason = delta.finish_reason or self.finish_reason
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if delta.completion_tokens is not None:
            self.completion_tokens = delta.completion_tokens
        if delta.stop_word is not None:
            self.stop_word = delta.stop_word

    def completion(self) -> Completion:
        return Completion("".join(self.parts), self.finish_reason or "stop", self.prompt_tokens, self.completion_tokens,
                          stop_word=self.stop_word)


# --- in worker threads -------------------------------------------------------------------------


def _open(backend: Backend, planned: Planned, cancelled: threading.Event) -> Iterator[StreamDelta]:
    if cancelled.is_set():  # the client left while the request was being planned
        raise Cancelled()
    return iter(backend.stream(planned.prompt, planned.params))


def _embed(backend: Backend, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions,
           cancelled: threading.Event) -> Embedded:
    if cancelled.is_set():  # the client left while the request waited for its place
        raise Cancelled()
    return backend.embed(inputs, options)


def _close(deltas: Iterator[StreamDelta]) -> None:
    """Close a backend stream (runs its cleanup: releases locks, closes the HTTP response)."""
    close = getattr(deltas, "close", None)
    if close is not None:
        close()


def _generate(backend: Backend, planned: Planned, cancelled: threading.Event, log: RequestLog) -> Completion:
    if planned.params.logprobs is not None:  # reported with whole answers only
        if cancelled.is_set():
            raise Cancelled()
        completion = backend.complete(planned.prompt, planned.params)
        log.first_token()
        return completion
    collector = Collector()
    deltas = _open(backend, planned, cancelled)
    try:
        for delta in deltas:
            if cancelled.is_set():
                raise Cancelled()
            log.first_token()
            collector.add(delta)
    finally:
        _close(deltas)
    return collector.completion()
