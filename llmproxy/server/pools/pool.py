"""A pool: one model served by several interchangeable members, checked in the background.

The pool keeps its members' state (health, load reports, requests in flight) and the model's queue
(llmproxy.server.admission: as many running as its members take together; past its queue, 429). A
background task checks every member each ``poll_interval`` seconds, one check per member at a time,
so a request never waits for a check: it reads what the last one found. A member that is out is
checked only once its cool-down is over (llmproxy.server.pools.health).

A member whose server llmproxy starts (llmproxy.server.pools.servers) takes requests only while it runs.
A request that finds no running member with room starts a stopped one (one start at a time) and waits
for it, or for room on another, as it waits for room; the checks stop a member idle for ``ttl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from llmproxy.backends.base import Backend
from llmproxy.errors import LLMProxyError, MembersDownError, OverloadedError
from llmproxy.server.admission import Admission
from llmproxy.server.config import RouteLimits
from llmproxy.server.lanes import lane_for
from llmproxy.server.pools.choice import choose
from llmproxy.server.pools.load import POLL_TIMEOUT
from llmproxy.server.pools.members import Member
from llmproxy.server.pools.servers import RUNNING, STARTING
from llmproxy.server.pools.spec import PoolSpec
from llmproxy.server.pools.sticky import Affinities

logger = logging.getLogger("llmproxy.server")

DEFAULT_FIRST_TOKEN = 120.0  # a member's time to the first token where its backend has no such setting
MIN_FULL_WAIT = 60.0  # seconds a request waits for a member with room at least, before it is refused (429)


class Pool:
    """The members of one model and what is known of them. ``clock`` and ``rng`` can be replaced, so
    tests move time and draw members deterministically."""

    def __init__(self, name: str, spec: PoolSpec, limits: RouteLimits, *,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.name = name
        self.spec = spec
        self.clock = clock
        self.rng = rng or random.Random()
        self.members = [Member(member, lane_for(member.route.backend, f"{name}/{member.name}",
                                                RouteLimits(member.max_running, 0)), lambda: self.clock(),
                               changed=lambda: self._notify())
                        for member in spec.members]
        for member in self.members:  # down at start: out until a check finds it up, so no request waits on it
            if member.name in spec.down_at_start:
                member.health.failed(f"down at start: {spec.down_at_start[member.name]}")
        self.admission = Admission(name, limits.max_running, limits.max_queue)
        self.affinities = Affinities()
        # A request waits for a member with room a minute, or as long as a member may take to its first token
        # (one reading a long prompt for another request holds its slot that long), then it is refused (429).
        first_token = max(_first_token_limit(member.route.backend) for member in spec.members)
        # ... or as long as a member's server may take to start.
        starting = max((member.start_timeout for member in spec.members if member.command), default=0.0)
        self.full_wait = max(MIN_FULL_WAIT, first_token, starting)
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        return any(member.health.up for member in self.members)

    # --- choosing ------------------------------------------------------------------------------

    async def take(self, key: str | None, tried: list[str]) -> Member:
        """A member for a request (counted in flight on it until ``give_back``), not one already ``tried``:
        while the member chosen (or every member that is up) is full, the request waits for room, up to
        ``full_wait``, counted in the load of the member it waits for; while none has room, a stopped
        member's server starts."""
        deadline = self.clock() + self.full_wait
        while True:
            serving = self.candidates(tried)
            member = choose(serving, key, self.affinities, self.spec.imbalance, self.rng) if serving else None
            if member is not None and not member.full:
                member.in_flight += 1
                member.requests += 1
                return member
            if member is None:
                self._start_one(tried)
            await self._wait(deadline, member)

    async def ready(self, tried: list[str]) -> None:
        """Once a member is serving (one started, where none is): a request's tokens are counted on one."""
        deadline = self.clock() + self.full_wait
        while not any(member.serving for member in self.members):
            self.candidates(tried)  # none can be had: say so
            self._start_one(tried)
            await self._wait(deadline, None)

    async def _wait(self, deadline: float, member: Member | None) -> None:
        """Until something changes (room, a member up or out), counted as waiting on ``member``; a 429 past
        ``deadline``."""
        left = deadline - self.clock()
        if left <= 0:
            raise OverloadedError(f"no member of the model {self.name!r} had room for the request within "
                                  f"{self.full_wait:g} s (by their load reports and max_running); retry after the "
                                  "Retry-After seconds", retry_after=1)
        changed = self._changed
        if member is not None:
            member.waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), left)
        finally:
            if member is not None:
                member.waiting -= 1

    def _start_one(self, tried: list[str]) -> None:
        """Start the first stopped member not ``tried``, unless one is starting already."""
        servers = [member.server for member in self.members if member.server is not None and member.name not in tried]
        if any(server.state == STARTING for server in servers):
            return
        for server in servers:
            if server.startable:
                server.start()
                return

    def candidates(self, tried: list[str]) -> list[Member]:
        """The members serving and not yet ``tried`` for a request (none while the only ones left are
        starting, or stopped and may start); MembersDownError when no member can be had."""
        members = [member for member in self.members if member.serving and member.name not in tried]
        if not members and not any(member.server.state == STARTING or member.server.startable
                                   for member in self.members
                                   if member.server is not None and member.name not in tried):
            raise self._down()
        return members

    def give_back(self, member: Member) -> None:
        member.in_flight -= 1
        if member.server is not None and member.in_flight == 0:
            member.server.last_used = self.clock()  # its ttl counts from here
        self._notify()

    def _down(self) -> MembersDownError:
        wait = min(member.health.seconds_out() or 1 for member in self.members)
        reasons = "; ".join(f"{member.name}: {member.health.reason or 'tried already'}" for member in self.members)
        return MembersDownError(f"every member of the model {self.name!r} is out ({reasons}); they are probed again "
                                f"within {wait} s", retry_after=wait)

    def counter(self) -> Member:
        """A member to count tokens with (every member counts alike: checked at start)."""
        return next((member for member in self.members if member.serving), self.members[0])

    def report(self, details: bool) -> dict[str, Any]:
        """What /health says of the pool: each member's state; its address, load and last failure only
        with ``details`` (a server with an API key: without one, every caller is a stranger)."""
        members = []
        for member in self.members:
            server = member.server  # started by llmproxy: stopped, starting or stopping says so
            state = member.health.state if server is None or server.state == RUNNING else server.state
            entry: dict[str, Any] = {"name": member.name, "state": state}
            if details:
                reported = member.reported
                entry.update(backend=member.backend.name, endpoint=getattr(member.backend, "endpoint", None),
                             in_flight=member.in_flight, load=None if reported is None else reported.total,
                             slots=None if reported is None else reported.slots, detail=member.health.reason or None)
            if details and server is not None:
                entry["server"] = server.report()
            members.append(entry)
        return {"up": self.up, "members": members}

    # --- health --------------------------------------------------------------------------------

    def failed(self, member: Member, error: BaseException, during: str = "a request") -> None:
        """``member`` failed: out, for a growing cool-down."""
        member.failures += 1
        member.health.failed(_reason(error))
        logger.warning("member %s of model %s failed %s, out for %d s: %s", member.name, self.name, during,
                       member.health.seconds_out(), member.health.reason)
        self._notify()

    def answered(self, member: Member) -> None:
        if not member.health.up or member.health.failures_in_a_row:
            member.health.succeeded()
            self._notify()

    async def check(self) -> None:
        """One round of background checks: each member that is in, or out and due to be probed."""
        await asyncio.gather(*(self._check(member) for member in self.members if member.health.due()))

    async def _check(self, member: Member) -> None:
        if member.server is not None:  # a server llmproxy starts: asked only while it runs
            if member.server.idle_for(self.spec.ttl, member.in_flight + member.waiting):
                await member.server.stop(f"no request for {self.spec.ttl:g} s")
                return
            if member.server.state != RUNNING:
                return
        was_up = member.health.up
        try:
            if member.reader.kind is None:  # a backend that reports no load: its own probe says whether it is up
                probe = await member.lane.probe(POLL_TIMEOUT)
                if not probe.up:
                    raise _ProbeFailed(probe.detail or "its probe says it is down")
                load = None
            else:
                load = await member.reader.read()
        except (LLMProxyError, _ProbeFailed) as exc:
            self.failed(member, exc, "its check")
            return
        member.report(load)
        if not was_up:
            logger.info("member %s of model %s is back", member.name, self.name)
        member.health.succeeded()
        self._notify()

    def _notify(self) -> None:
        """Wake the requests waiting for a member with room."""
        self._changed.set()
        self._changed = asyncio.Event()

    # --- the background task -------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        if self.spec.preload:
            for member in self.members:
                if member.server is not None:
                    member.server.start()

    async def _run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # noqa: BLE001 - a bug in one round must not end the checks for good
                logger.exception("checking the members of model %s failed", self.name)
            await asyncio.sleep(self.spec.poll_interval)

    async def stop(self) -> None:
        """End the background checks (the members' lanes stay open for requests still in flight)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def starts_servers(self) -> bool:
        """Whether llmproxy starts some of its members' servers."""
        return any(member.server is not None for member in self.members)

    async def retire(self) -> None:
        """Stop the members' servers once the requests still on them have ended (a reloaded config file
        serves the model otherwise)."""
        await self.stop()
        while any(member.in_flight for member in self.members):
            await self._changed.wait()
        for member in self.members:
            if member.server is not None:
                await member.server.aclose()

    async def aclose(self) -> None:
        await self.stop()
        for member in self.members:
            if member.server is not None:
                await member.server.aclose()
            await member.lane.aclose()


class _ProbeFailed(Exception):
    pass


def _reason(error: BaseException) -> str:
    return getattr(error, "message", None) or str(error) or type(error).__name__


def _first_token_limit(backend: Backend) -> float:
    timeouts = getattr(getattr(backend, "ahttp", None), "timeouts", None)
    return timeouts.first_token if timeouts is not None else DEFAULT_FIRST_TOKEN
