"""The two ways to answer a generation request: the whole response at once, or a server-sent event stream.

Both take the request through its lane's admission (llmproxy.server.admission), plan it
(llmproxy.server.endpoints' stages), generate while the client is watched
(llmproxy.server.disconnects), and finish it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from llmproxy.backends.base import IDLE, StreamDelta
from llmproxy.errors import LLMProxyError, OutputParseError
from llmproxy.server.admission import Slot
from llmproxy.faces.chat.chunks import Events
from llmproxy.server.connections import BODY_WRITER
from llmproxy.server.disconnects import Watch, watching
from llmproxy.server.endpoints import Generation
from llmproxy.server.lanes import Collector, Lane, estimate
from llmproxy.server.request_log import RequestLog, logger

# The model that gets an answer left unusable: its lane and generation, once per request (None: none).
Escalate = Callable[[BaseException], tuple[Lane, Generation] | None]

T = TypeVar("T")
KEEPALIVE_SECONDS = 5.0  # Codex and Claude Code reset their idle timers on events; they wait minutes


def goes_again(exc: Exception, lane: Lane, generation: Generation, log: RequestLog) -> bool:
    """Whether a request whose attempt failed with ``exc``, while none of its answer has reached the
    client, is tried again on its lane: the one retry rule of both ways to answer. An answer that could
    not be used gets the route's second chances (``generation.retry``: llmproxy.proxy.Attempts, the rule
    of every face); a pool member that failed hands the request to another (``lane.retry_elsewhere``)."""
    if isinstance(exc, OutputParseError):
        if not generation.retry(exc):
            return False
        log.retried(exc)
    elif isinstance(exc, LLMProxyError) and lane.retry_elsewhere(exc):
        log.moved(exc)
    else:
        return False
    return True


async def admitted(request: Request, lane: Lane, generation: Generation, log: RequestLog,
                   attempt: Callable[[Watch], Awaitable[T]]) -> T:
    """``attempt``'s result, once the lane lets the request in (its place given back however it ends), tried
    again as ``goes_again`` says; the client is watched throughout."""
    async with watching(request) as watch:
        slot = await watch.enter(lane.admission)
        try:
            async with watch.interruptible():
                await lane.ready()  # its model loaded, where it loads on demand
            while True:
                try:
                    return await attempt(watch)
                except LLMProxyError as exc:
                    if not goes_again(exc, lane, generation, log):
                        raise
        finally:
            slot.release()


async def answer(request: Request, lane: Lane, generation: Generation, log: RequestLog) -> BaseModel:
    """The whole response at once."""

    async def attempt(watch: Watch) -> BaseModel:
        planned = await lane.plan(generation, log)
        completion = await lane.generate(planned, watch, log)
        return await lane.finish(generation, completion, log)  # may count with the backend: admitted

    return await admitted(request, lane, generation, log, attempt)


class EventStream(StreamingResponse):
    """A server-sent event stream: the body's chunks sent as they come, and ``on_close`` run however the
    stream ends, even one the client left before it started.

    Sent by the task that answers the request, the client's disconnect cancelling it (a cancel scope,
    so a step that must finish first, such as a worker thread's, does): Starlette's own way starts a
    task group of two for every stream, which costs the first event a turn of the event loop, and more
    under load. The body may also be written from outside its iteration, as a relay does (``write``).
    """

    media_type = "text/event-stream"
    _write_now: Callable[[bytes], bool] | None = None  # the server's own body writer, once sending

    def __init__(self, body: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(body, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    def write(self, chunk: bytes) -> Awaitable[None] | None:
        """``chunk`` sent now, from outside the body's own iteration (a relay's callback, as a token arrives);
        what is left to await when the client is slow to read: nothing else may be written before it is done."""
        if self._write_now is not None and self._write_now(chunk):
            return None
        sending = self._send({"type": "http.response.body", "body": chunk, "more_body": True}).__await__()
        try:
            waiting = sending.send(None)  # run now, as far as it goes without waiting
        except StopIteration:
            return None
        return _rest(sending, waiting)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._send = send
        self._write_now = scope.get("extensions", {}).get(BODY_WRITER)  # this server's own connections
        try:
            with anyio.CancelScope() as sending:
                listener = asyncio.ensure_future(self._stop_when_the_client_leaves(receive, sending))
                try:
                    await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                    async for chunk in self.body_iterator:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                finally:
                    listener.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                await self._on_close()

    async def _stop_when_the_client_leaves(self, receive: Receive, sending: anyio.CancelScope) -> None:
        await self.listen_for_disconnect(receive)
        sending.cancel()


async def _rest(steps: Any, waiting: Any) -> None:
    """What is left of an awaitable run as far as it went (``steps``, stopped at ``waiting``): each future
    it waits on awaited here, then it goes on."""
    while True:
        try:
            if waiting is None:  # a bare yield: the step gives the loop a turn
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False  # taken over, as a task takes what its coroutine awaits
                await waiting
        except BaseException as exc:  # noqa: BLE001 - the step's own wait failed: the step is told
            try:
                waiting = steps.throw(exc)
            except StopIteration:
                return
            continue
        try:
            waiting = steps.send(None)
        except StopIteration:
            return


async def _opening_while_loading(lane: Lane, generation: Generation) -> Events:
    """The events of a stream whose model is still loading: planned on the prompt's estimated tokens (the
    model's tokenizer is not loaded yet), for the opening events that go before its keep-alives; it is
    planned again, exactly, once the model is loaded."""
    prompt = await anyio.to_thread.run_sync(generation.draft) if generation.heavy else generation.draft()
    generation.plan(await estimate(prompt))
    return generation.chunks()


def idle_after(events: Events) -> float | None:
    """How long a stream of ``events`` waits for its first delta before it sends a keep-alive event."""
    return KEEPALIVE_SECONDS if events.keeps_alive else None


async def stream(request: Request, lane: Lane, generation: Generation, log: RequestLog,
                 escalate: Escalate | None = None) -> EventStream:
    """A server-sent event stream of the response.

    The request is planned and the backend's first delta awaited before the stream starts, so a
    request the backend refuses (down, overflow, bad grammar) still gets a proper HTTP error status,
    and a model with fallbacks can hand it on. A face whose clients give up on a silent connection
    (``keepalive``: Codex, Claude Code) waits only ``KEEPALIVE_SECONDS`` for it: the stream then
    starts and sends a keep-alive event that often while the backend still reads the prompt (a
    coding agent's first prompt takes minutes on a CPU). An attempt that fails while none of its answer
    was sent goes again by ``goes_again``'s rule, before or after the stream started; a failure after
    that ends the stream with the face's error event. The opening events go out with the first event
    after them, so that an answer still unusable after its second chances, while nothing at all has
    been sent, may be asked afresh of the model ``escalate`` names (its lane and generation), in the
    same stream. From its first delta on, an answer is relayed (``Lane.relay``): an HTTP backend's
    connection hands each later delta to ``each`` as its bytes arrive, which writes its events to the
    client at once (``EventStream.write``), with no turn of the event loop a token.
    """
    deltas: Any = None  # the lane's stream, once open
    slot: Slot | None = None  # the request's place in its lane, once admitted

    async def release_stream() -> None:
        """Close the lane's stream, if one is open."""
        nonlocal deltas
        if deltas is not None:
            await lane.close(deltas)
            deltas = None

    async def release() -> None:
        try:
            await release_stream()
        finally:  # a stream that failed to close still gives its place back
            if slot is not None:
                slot.release()

    try:
        async with watching(request) as watch:
            slot = await watch.enter(lane.admission)
            async with watch.interruptible():
                loading = not await lane.ready(0)
                if loading:  # its model loads on demand: the stream may start, and keep the client waiting
                    events = await _opening_while_loading(lane, generation)
                    loading = not await lane.ready(idle_after(events))
            late = loading  # planned once the model is loaded, in the stream
            while not loading:
                try:
                    planned = await lane.plan(generation, log)
                    events = generation.chunks()
                    async with watch.interruptible():  # a client that leaves before the first token stops the wait
                        deltas = await lane.open(planned, watch, idle_after(events))
                        first = await lane.next(deltas)  # IDLE: the stream starts, to keep the client waiting
                    if first is not IDLE:
                        log.first_token()
                    break
                except LLMProxyError as exc:
                    if not goes_again(exc, lane, generation, log):
                        raise
                    await release_stream()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await release()
        raise
    finished = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal finished, deltas, lane, generation, events, slot, loading
        held = events.opening()  # sent with the first event after it

        def out(sent: list[bytes]) -> bytes:
            nonlocal held
            if held:
                sent, held = held + sent, []
            return sent[0] if len(sent) == 1 else b"".join(sent)  # most tokens: one event, as it is

        def each(delta: StreamDelta) -> Awaitable[None] | None:
            """A delta relayed: written to the client as it comes (one write for all of its events)."""
            collector.add(delta)
            sent = events.feed(delta.text)
            return sending.write(out(sent)) if sent else None

        try:
            while loading:  # the model loads (llmproxy.server.on_demand): the face's keep-alive meanwhile
                yield out([events.keepalive()])
                loading = not await lane.ready(KEEPALIVE_SECONDS)
            again = late  # the answer starts afresh: a second chance, another member of a pool, another model
            escalated = False
            while True:
                collector = Collector()
                try:
                    if again:
                        planned = await lane.plan(generation, log)
                        if escalated:  # another model's answer: its own events, nothing of the first one's sent
                            events, escalated = generation.chunks(), False
                            held = events.opening()
                        deltas = await lane.open(planned, watch, idle_after(events))
                        delta = await lane.next(deltas)
                    else:
                        delta = first
                    while delta is IDLE:  # the backend still reads the prompt
                        yield out([events.keepalive()])
                        delta = await lane.next(deltas)
                    log.first_token()
                    if delta is not None:
                        blocked = each(delta)
                        if blocked is not None:
                            await blocked
                        await lane.relay(deltas, each)
                    response = await lane.finish(generation, collector.completion(), log)
                    break
                except LLMProxyError as exc:
                    if events.sent_text:  # what was sent stays: only an answer not begun goes again
                        raise
                    if not goes_again(exc, lane, generation, log):
                        after = escalate(exc) if escalate is not None and held else None
                        if after is None:
                            raise
                        await release_stream()
                        slot.release()
                        slot = None
                        lane, generation = after
                        slot = await lane.admission.enter()
                        again = escalated = True
                        continue
                await release_stream()
                again = True
            log.answered(response)
            yield out(events.closing(response))
            generation.sent()
        except Exception as exc:  # noqa: BLE001 - every failure becomes the stream's error event
            if not isinstance(exc, LLMProxyError):
                logger.exception("unexpected failure while streaming from %s", lane.backend.name)
            log.failed(exc)
            yield out(events.failure(exc))
        finished = True
        log.emit()  # before the last bytes: a client that has read the whole stream finds its line written
        yield events.end

    async def on_close() -> None:
        await release()
        if not finished:
            log.disconnected()
        log.emit()

    sending = EventStream(body(), on_close)
    return sending
