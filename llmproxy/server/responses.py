"""The two ways to answer a generation request: the whole response at once, or a server-sent event stream.

Both take the request through its lane's admission (llmproxy.server.admission), plan it
(llmproxy.server.endpoints' stages), generate while the client is watched
(llmproxy.server.disconnects), and finish it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from llmproxy.errors import LLMProxyError, OutputParseError
from llmproxy.server.admission import Slot
from llmproxy.server.disconnects import watching
from llmproxy.server.endpoints import Generation
from llmproxy.server.lanes import Collector, Lane
from llmproxy.server.request_log import RequestLog, logger

KEEPALIVE_SECONDS = 5.0  # Codex and Claude Code reset their idle timers on events; they wait minutes


async def answer(request: Request, lane: Lane, generation: Generation, log: RequestLog) -> BaseModel:
    """The whole response at once."""
    async with watching(request) as watch:
        slot = await watch.enter(lane.admission)
        try:
            while True:
                planned = await lane.plan(generation, log)
                completion = await lane.generate(planned, watch, log)
                try:
                    return await lane.finish(generation, completion, log)  # may count with the backend: admitted
                except OutputParseError as exc:
                    if not generation.retry(exc):
                        raise
                    log.retried(exc)
        finally:
            slot.release()


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


async def stream(request: Request, lane: Lane, generation: Generation, log: RequestLog) -> EventStream:
    """A server-sent event stream of the response.

    The request is planned and the backend's first delta awaited before the stream starts, so a
    request the backend refuses (down, overflow, bad grammar) still gets a proper HTTP error status,
    and a model with fallbacks can hand it on. A face whose clients give up on a silent connection
    (``keepalive``: Codex, Claude Code) waits only ``KEEPALIVE_SECONDS`` for it: the stream then
    starts and sends a keep-alive event that often while the backend still reads the prompt (a
    coding agent's first prompt takes minutes on a CPU). A failure after the stream started ends it
    with the face's error event.
    """
    deltas: Any = None  # the lane's stream, once open
    slot: Slot | None = None  # the request's place in its lane, once admitted
    waiting: asyncio.Future | None = None  # the first delta, while the stream keeps the client waiting

    async def release() -> None:
        if waiting is not None and not waiting.done():
            waiting.cancel()
            with contextlib.suppress(BaseException):
                await waiting  # the lane's stream must be idle before it is closed
        if deltas is not None:
            await lane.close(deltas)
        if slot is not None:
            slot.release()

    try:
        async with watching(request) as watch:
            slot = await watch.enter(lane.admission)
            planned = await lane.plan(generation, log)
            events = generation.chunks()
            async with watch.interruptible():  # a client that leaves before the first token stops the wait
                deltas = await lane.open(planned, watch)
                waiting = asyncio.ensure_future(lane.next(deltas))
                patience = KEEPALIVE_SECONDS if events.keeps_alive else None
                await asyncio.wait({waiting}, timeout=patience)
                first = None
                if waiting.done():
                    first, waiting = waiting.result(), None
                    log.first_token()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await release()
        raise
    finished = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal finished, deltas, waiting
        for event in events.opening():
            yield event
        try:
            delta = first if waiting is None else None
            while waiting is not None:  # the backend still reads the prompt
                await asyncio.wait({waiting}, timeout=KEEPALIVE_SECONDS)
                if waiting.done():
                    delta, waiting = waiting.result(), None
                    log.first_token()
                else:
                    yield events.keepalive()
            again = False  # the answer starts afresh: a second chance, or another member of a pool
            while True:
                collector = Collector()
                try:
                    if again:
                        deltas = await lane.open(await lane.plan(generation, log), watch)
                        delta = await lane.next(deltas)
                    while delta is not None:
                        collector.add(delta)
                        sent = events.feed(delta.text)
                        if sent:
                            yield b"".join(sent)  # one write to the client for all of a delta's events
                        delta = await lane.next(deltas)
                    response = await lane.finish(generation, collector.completion(), log)
                    break
                # Only while nothing of the answer has been sent: what was sent stays.
                except OutputParseError as exc:
                    if events.sent_text or not generation.retry(exc):
                        raise
                    log.retried(exc)
                except LLMProxyError as exc:  # a pool's member failed (llmproxy.server.pools.lane)
                    if events.sent_text or not lane.retry_elsewhere(exc):
                        raise
                    log.moved(exc)
                await lane.close(deltas)
                again = True
            log.answered(response)
            for event in events.closing(response):
                yield event
            generation.sent()
        except Exception as exc:  # noqa: BLE001 - every failure becomes the stream's error event
            if not isinstance(exc, LLMProxyError):
                logger.exception("unexpected failure while streaming from %s", lane.backend.name)
            log.failed(exc)
            for event in events.failure(exc):
                yield event
        finished = True
        log.emit()  # before the last bytes: a client that has read the whole stream finds its line written
        yield events.end

    async def on_close() -> None:
        await release()
        if not finished:
            log.disconnected()
        log.emit()

    return EventStream(body(), on_close)
