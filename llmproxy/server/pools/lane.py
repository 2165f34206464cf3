"""One request's way into a pool: a ``Lane`` that picks its member once the request is read, and moves
to another member when its member fails before the answer reached the client.

The server asks the pool for one of these per request (``Pool.lane``); ``answer`` and ``stream``
(llmproxy.server.responses) use it as they use a single backend's lane. Its member is chosen when the
request is planned, once its prompt is rendered and counted (any member counts alike), just before the
backend is called, and kept for its second chances;
a member that fails is taken out (llmproxy.server.pools.health), and ``retry_elsewhere`` tells the app
(or a stream that has sent nothing of the answer yet) whether another member may take the request
afresh: once per member that is up; planned again, it goes to another member. Each failure takes its
member out of the rotation, so a request pays for a silent member at most once a member, and only
while its client waits (one that leaves cancels it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from llmproxy.backends.base import (IDLE, Backend, Completion, Embedded, EmbeddingInput, EmbeddingOptions, ProbeResult,
                                    Relayed, StreamDelta)
from llmproxy.server.admission import Slot
from llmproxy.server.disconnects import Watch
from llmproxy.server.endpoints import Generation, Planned
from llmproxy.server.lanes import Lane
from llmproxy.server.pools.health import member_failure
from llmproxy.server.pools.members import Member
from llmproxy.server.pools.pool import Pool
from llmproxy.server.pools.sticky import PREFIX_CHARACTERS, prefix_key
from llmproxy.server.request_log import RequestLog
from llmproxy.tokens import TokenCount

T = TypeVar("T")


def request_key(generation: Generation) -> str:
    """The conversation key of a request whose client sent none: its stable prefix (system text and
    tools; a raw completion's first characters), which every turn of one agent's conversation shares."""
    request = getattr(generation, "chat", generation).request  # a translated face's chat request
    prompt = getattr(request, "prompt", None)
    if isinstance(prompt, str):
        return prefix_key(prompt[:PREFIX_CHARACTERS], None)
    system = "\n".join(message.model_dump_json() for message in request.messages
                        if message.role in ("system", "developer"))
    return prefix_key(system, [function.model_dump(mode="json") for function in request.function_definitions()])


class PoolLane(Lane):
    """A request's lane into ``pool``; ``key`` is the conversation key its client sent, if any."""

    def __init__(self, pool: Pool, key: str | None) -> None:  # not Lane's: it has no backend of its own
        self.pool = pool
        self.key = key
        self.admission = _Admission(self)
        self.member: Member | None = None  # while the request holds one
        self.tried: list[str] = []  # members that took it, in order

    @property
    def backend(self) -> Backend:  # type: ignore[override]
        return (self.member or self.pool.counter()).backend

    async def plan(self, generation: Generation, log: RequestLog) -> Planned:
        if self.member is not None and not self.member.health.up:  # it failed this request: another takes it
            self.release()
        # Rendered and counted first (any member counts alike): a member's place is taken only for its
        # own work, so the proxy's time per request does not keep a slot of a full member idle.
        if self.member is None:
            self.pool.candidates(self.tried)  # none left: say so before counting with one that is out
        planned = await super().plan(generation, log)
        if self.member is None:
            await self._take((self.key or request_key(generation)) if self.pool.spec.sticky else None, log)
        return planned

    async def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, watch: Watch,
                    log: RequestLog) -> Embedded:
        """On the least loaded member (embeddings keep no conversation's cache: no stickiness)."""
        if self.member is not None and not self.member.health.up:  # it failed this request: another takes it
            self.release()
        if self.member is None:
            await self._take(None, log)
        member = self._held()
        embedded = await self._on(member, member.lane.embed(inputs, options, watch, log))
        self.pool.answered(member)
        return embedded

    async def _take(self, key: str | None, log: RequestLog) -> None:
        """A member for the request, not one that took it already."""
        self.member = await self.pool.take(key, self.tried)
        self.tried.append(self.member.name)
        log.member = self.member.name

    def retry_elsewhere(self, error: BaseException) -> bool:
        """Whether the request, failed by its member (or by the one counting its tokens) before any of its
        answer was sent, may go to another."""
        if not member_failure(error):
            return False
        return any(member.health.up and member.name not in self.tried for member in self.pool.members)

    async def count(self, text: str) -> TokenCount:
        if self.member is None:
            await self.pool.ready(self.tried)  # counted on a member that runs: one starts where none does
        member = self.member or self.pool.counter()
        return await self._on(member, member.lane.count(text))

    async def generate(self, planned: Planned, watch: Watch, log: RequestLog) -> Completion:
        member = self._held()
        completion = await self._on(member, member.lane.generate(planned, watch, log))
        self.pool.answered(member)
        return completion

    async def open(self, planned: Planned, watch: Watch, idle_after: float | None = None) -> Any:
        member = self._held()
        return await self._on(member, member.lane.open(planned, watch, idle_after))

    async def next(self, deltas: Any) -> StreamDelta | None:
        member = self._held()
        delta = await self._on(member, member.lane.next(deltas))
        if delta is not IDLE:  # still reading the prompt is no answer yet
            self.pool.answered(member)
        return delta

    async def relay(self, deltas: Any, each: Relayed) -> None:
        member = self._held()
        await self._on(member, member.lane.relay(deltas, each))  # the member's own way to relay

    async def close(self, deltas: Any) -> None:
        if self.member is not None:  # else it was let go of once it failed, its stream closed already
            await self.member.lane.close(deltas)

    async def probe(self, seconds: float) -> ProbeResult:
        return await self.pool.counter().lane.probe(seconds)

    def _held(self) -> Member:
        assert self.member is not None, "a member is chosen when the request is planned"
        return self.member

    async def _on(self, member: Member, step: Awaitable[T]) -> T:
        """``step`` on ``member``; a failure of the member itself takes it out."""
        try:
            return await step
        except Exception as exc:
            if member_failure(exc) and member.health.up:
                self.pool.failed(member, exc)
            raise

    def release(self) -> None:
        """The request is done with its member (its place in the model's queue goes with it)."""
        if self.member is not None:
            self.pool.give_back(self.member)
            self.member = None


class _Admission:
    """The model's queue, whose places also hand the request's member back when released."""

    def __init__(self, lane: PoolLane) -> None:
        self.lane = lane

    async def enter(self) -> _Place:
        return _Place(await self.lane.pool.admission.enter(), self.lane)


class _Place:
    def __init__(self, slot: Slot, lane: PoolLane) -> None:
        self.slot = slot
        self.lane = lane

    def release(self) -> None:
        self.slot.release()
        self.lane.release()
