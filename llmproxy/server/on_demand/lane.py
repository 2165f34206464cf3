"""One request's way to a model loaded on demand: a ``Lane`` around the model's own lane that first
waits for the scheduler (llmproxy.server.on_demand.scheduler) to have the model loaded.

Entering its admission only asks the scheduler for a ticket (a full wait for the model is a 429 at
once); ``ready`` waits for the ticket, then for a place in the model's own queue. Every step calls
``ready`` first, so any caller works; a stream calls it early with a time limit, so that a face whose
clients give up on a silent connection sends its keep-alive events while the model loads
(llmproxy.server.responses). The ticket is released with the request's place, so the model stays
loaded until its last request has ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmproxy.backends.base import Backend, Completion, Embedded, EmbeddingInput, EmbeddingOptions, ProbeResult, Relayed
from llmproxy.backends.base import StreamDelta
from llmproxy.server.admission import Slot
from llmproxy.server.disconnects import Watch
from llmproxy.server.endpoints import Generation, Planned
from llmproxy.server.lanes import Lane
from llmproxy.server.on_demand.scheduler import LOADED, Scheduler, Ticket
from llmproxy.server.request_log import RequestLog
from llmproxy.tokens import TokenCount


class OnDemandLane(Lane):
    """A request's lane to model ``name``, whose own lane is ``inner``; ``limit``: the requests that may
    wait for the model to load (its max_running + max_queue)."""

    def __init__(self, inner: Lane, scheduler: Scheduler, name: str, limit: int) -> None:  # not Lane's: no backend
        self.inner = inner
        self.scheduler = scheduler
        self.name = name
        self.limit = limit
        self.admission = _Admission(self)
        self.place: _Place | None = None  # once admitted

    @property
    def backend(self) -> Backend:  # type: ignore[override]
        return self.inner.backend

    async def ready(self, seconds: float | None = None) -> bool:
        place = self.place
        if place is None or place.slot is not None:
            return True
        if not await self.scheduler.wait(place.ticket, seconds):
            return False
        place.slot = await self.inner.admission.enter()
        return True

    async def plan(self, generation: Generation, log: RequestLog) -> Planned:
        await self.ready()
        if self.place is not None:
            log.model_wait = self.place.ticket.waited
        return await self.inner.plan(generation, log)

    async def count(self, text: str) -> TokenCount:
        if self.place is not None:
            await self.ready()
            return await self.inner.count(text)
        ticket = self.scheduler.ask(self.name, self.limit)
        try:  # counting outside a request's place (Anthropic's count_tokens): the model loaded meanwhile
            await self.scheduler.wait(ticket)
            return await self.inner.count(text)
        finally:
            self.scheduler.release(ticket)

    async def generate(self, planned: Planned, watch: Watch, log: RequestLog) -> Completion:
        await self.ready()
        return await self.inner.generate(planned, watch, log)

    async def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, watch: Watch,
                    log: RequestLog) -> Embedded:
        await self.ready()
        return await self.inner.embed(inputs, options, watch, log)

    async def open(self, planned: Planned, watch: Watch, idle_after: float | None = None) -> Any:
        await self.ready()
        return await self.inner.open(planned, watch, idle_after)

    async def next(self, deltas: Any) -> StreamDelta | None:
        return await self.inner.next(deltas)

    async def relay(self, deltas: Any, each: Relayed) -> None:
        await self.inner.relay(deltas, each)

    async def offer(self, deltas: Any, each: Relayed) -> StreamDelta | None:
        return await self.inner.offer(deltas, each)

    async def close(self, deltas: Any) -> None:
        await self.inner.close(deltas)

    async def probe(self, seconds: float) -> ProbeResult:
        """The backend's own answer while the model is loaded; an unloaded model is not down."""
        resident = self.scheduler.resident(self.name)
        if resident.state == LOADED:
            return await self.inner.probe(seconds)
        detail = f"{resident.state}: loads on its next request" + (f" (last failure: {resident.error})"
                                                                      if resident.error else "")
        return ProbeResult(backend=self.backend.name, url=getattr(self.backend, "endpoint", None), up=True,
                           detail=detail)

    def retry_elsewhere(self, error: BaseException) -> bool:
        return self.inner.retry_elsewhere(error)


class _Admission:
    """The model's queue as the scheduler keeps it: a ticket asked at once, its place taken in ``ready``."""

    def __init__(self, lane: OnDemandLane) -> None:
        self.lane = lane

    async def enter(self) -> _Place:
        lane = self.lane
        ticket = lane.scheduler.ask(lane.name, lane.limit)
        lane.place = _Place(lane, ticket)
        return lane.place


class _Place:
    """A request's ticket for its model and, once ready, its place in the model's own queue."""

    def __init__(self, lane: OnDemandLane, ticket: Ticket) -> None:
        self.lane = lane
        self.ticket = ticket
        self.slot: Slot | Any = None

    def release(self) -> None:
        if self.slot is not None:
            self.slot.release()
            self.slot = None
        self.lane.scheduler.release(self.ticket)
        self.lane.place = None
