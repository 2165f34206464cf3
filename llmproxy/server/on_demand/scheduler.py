"""Which model is loaded when: the scheduler of models loaded on demand, within a memory budget.

A request asks for its model (``ask``) and gets a ``Ticket``; once the ticket is granted the model is
loaded and stays loaded until every granted ticket is released, so a model serving (or about to serve)
is never unloaded under an answer. The rules, applied after every change (``_schedule``):

- a request for a loaded model is granted at once: the model in memory goes first;
- the requests waiting for a model that is not loaded are granted together once it is (a burst for
  A, B, A, B, A loads each once), so a load serves every request that waited for it;
- the oldest waiting model loads as soon as it fits: in free memory, else by unloading the least
  recently used idle models; while only busy models hold the memory it needs, it waits, and the busy
  models keep taking their own requests, until its oldest request has waited ``max_wait`` seconds:
  then they take no new ones (they "drain") and unload once their last request ends, so none starves;
- an idle model unloads after its ``ttl`` (0: never); the default model (``keep``) never does, and
  loads again whenever memory is free and nobody waits (the model clients return to);
- the number of requests waiting for one model is limited like a queue: past it, 429.

Everything runs on the event loop; loads and unloads are tasks, so one slow load holds nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Protocol

from llmproxy.errors import ConfigurationError, ModelBusyError, ModelLoadError, NotFoundError, OverloadedError

logger = logging.getLogger("llmproxy.server")

UNLOADED, LOADING, LOADED, UNLOADING, FAILED = "unloaded", "loading", "loaded", "unloading", "failed"
MiB = 1024 * 1024


class Control(Protocol):
    """How one model is loaded and unloaded: in-process, a process started, or a server's own controls."""

    backend: str  # the backend's name, for errors

    async def load(self) -> int | None:
        """Load the model; the bytes it was measured to take, where known."""

    async def unload(self) -> None:
        """Free the model (no request is using it)."""


class Resident:
    """One model's place in the scheduler: its state, who uses and waits for it, and its counts."""

    def __init__(self, name: str, control: Control, *, memory: int, ttl: float = 0.0, keep: bool = False,
                 measure: bool = True) -> None:
        self.name = name
        self.control = control
        self.estimate = memory  # bytes, as configured or guessed before it ever loaded
        self.measure = measure  # False: ``memory`` was configured, and is what counts
        self.measured: int | None = None  # bytes it took when it last loaded, where known
        self.ttl = ttl
        self.keep = keep  # the default model: loaded at start, never unloaded for idleness, reloaded when room
        self.state = UNLOADED
        self.users = 0  # granted tickets not yet released: requests that may use the model now
        self.waiting: deque[Ticket] = deque()
        self.draining = False  # takes no new requests: it unloads, once idle, for a model that waited too long
        self.last_used = 0.0
        self.loads = 0
        self.unloads: Counter[str] = Counter()  # by reason: ttl, evicted, requested, stopped, died
        self.load_seconds = 0.0  # in all
        self.last_load_seconds: float | None = None
        self.error: str | None = None  # why its last load failed
        self.swap_pending = False  # another model is being unloaded to make room for it
        self._expiry: asyncio.TimerHandle | None = None

    @property
    def memory(self) -> int:
        """The bytes it counts for in the budget: as configured, else the larger of the guess and what it was
        measured to take (a process reuses memory another model freed, so a reload can measure less)."""
        if self.measure and self.measured is not None:
            return max(self.estimate, self.measured)
        return self.estimate

    @property
    def holds_memory(self) -> bool:
        return self.state in (LOADING, LOADED, UNLOADING)


class Ticket:
    """One request's claim on its model: granted once the model is loaded; ``waited``: seconds until then."""

    def __init__(self, resident: Resident, since: float) -> None:
        self.resident = resident
        self.since = since
        self.granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.holding = False  # counted in the model's users
        self.waited = 0.0


class Scheduler:
    """The models loaded on demand (``residents``), within ``budget`` bytes (None: no limit)."""

    def __init__(self, residents: Iterable[Resident], budget: int | None, max_wait: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.residents = {resident.name: resident for resident in residents}
        self.budget = budget
        self.max_wait = max_wait
        self.clock = clock
        self.swaps = 0  # loads that had to wait for another model to unload first
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.TimerHandle | None = None
        self._stopped = False
        for resident in self.residents.values():
            if not self._fits(resident):
                raise ConfigurationError(f"the model {resident.name!r} {self._too_big(resident)}")

    # --- requests ------------------------------------------------------------------------------

    def ask(self, name: str, limit: int) -> Ticket:
        """A ticket for model ``name``: granted now if it is loaded and taking requests, else waiting
        with at most ``limit`` others (OverloadedError past them)."""
        resident = self.resident(name)
        if not self._fits(resident):  # measured at its last load, bigger than the budget
            raise ModelLoadError(f"The model {name!r} {self._too_big(resident)}", backend=resident.control.backend)
        ticket = Ticket(resident, self.clock())
        if resident.state == LOADED and not resident.draining:
            self._grant(ticket)
            return ticket
        if len(resident.waiting) >= limit:
            raise OverloadedError(
                f"The model {name!r} is {resident.state} and {len(resident.waiting)} requests already wait for it "
                f"to load, as many as it takes (max_running + max_queue). Retry after the Retry-After seconds, "
                f"or raise max_queue.", retry_after=self._retry_after(resident))
        resident.waiting.append(ticket)
        self._schedule()
        return ticket

    async def wait(self, ticket: Ticket, seconds: float | None = None) -> bool:
        """Whether ``ticket`` is granted, waiting at most ``seconds`` (None: until it is). A model that
        fails to load fails the wait (ModelLoadError); a wait cancelled (its client left) gives the ticket up."""
        if not ticket.granted.done():
            try:
                await asyncio.wait_for(asyncio.shield(ticket.granted), seconds)
            except TimeoutError:
                return False
            except BaseException:
                self.release(ticket)
                raise
        ticket.granted.result()  # a failed load raises here
        return True

    def release(self, ticket: Ticket) -> None:
        """The request is done with its model (or gave up waiting); again does nothing."""
        resident = ticket.resident
        if ticket.holding:
            ticket.holding = False
            resident.users -= 1
            resident.last_used = self.clock()
            if resident.users == 0:
                self._arm_expiry(resident)
        elif ticket in resident.waiting:
            resident.waiting.remove(ticket)
            ticket.waited = self.clock() - ticket.since
        if not ticket.granted.done():
            ticket.granted.cancel()
        self._schedule()

    # --- commands (preload, the load/unload endpoints) -----------------------------------------

    async def load(self, name: str) -> None:
        """Load ``name`` now (it may then unload as any model does)."""
        ticket = self.ask(name, limit=math.inf)  # type: ignore[arg-type]
        try:
            await self.wait(ticket)
        finally:
            self.release(ticket)

    async def unload(self, name: str) -> None:
        """Unload ``name`` now; ModelBusyError while requests use it (an answer is never cut off)."""
        resident = self.resident(name)
        if resident.users:
            raise ModelBusyError(f"The model {name!r} is serving {resident.users} requests; it unloads once they "
                                 f"end and its ttl passes, or ask again then.", param="model")
        if resident.state == LOADED:
            await self._start_unload(resident, "requested")

    def start(self, preload: Iterable[str]) -> None:
        """Load the ``preload`` models, and the kept one, in the background."""
        for name in preload:
            self._spawn(self._preload(name))
        self._schedule()

    async def stop(self) -> None:
        """Unload every model (started processes end with the server)."""
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
        for resident in self.residents.values():
            if resident._expiry is not None:
                resident._expiry.cancel()
            for ticket in resident.waiting:
                ticket.granted.cancel()
            resident.waiting.clear()
            if resident.state in (LOADED, LOADING, UNLOADING):
                try:
                    await resident.control.unload()
                except Exception:  # noqa: BLE001 - the others still stop
                    logger.exception("model %s did not unload cleanly", resident.name)
                resident.state = UNLOADED
                resident.unloads["stopped"] += 1

    def resident(self, name: str) -> Resident:
        resident = self.residents.get(name)
        if resident is None:
            raise NotFoundError(f"The model {name!r} is not loaded on demand here; those that are: "
                                f"{', '.join(self.residents)}", param="model")
        return resident

    def free(self) -> float:
        """Bytes of the budget that no model holds or is loading into."""
        if self.budget is None:
            return math.inf
        return self.budget - sum(resident.memory for resident in self.residents.values() if resident.holds_memory)

    def died(self, name: str) -> None:
        """The model's process ended by itself: it is unloaded, and loads again for whoever wants it."""
        resident = self.residents[name]
        if resident.state == LOADED:
            logger.warning("model %s stopped by itself; it starts again on its next request", name)
            resident.state = UNLOADED
            resident.unloads["died"] += 1
            self._schedule()

    # --- the rules -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._stopped:
            return
        now = self.clock()
        for resident in self.residents.values():
            resident.draining = False
        wanting = sorted((r for r in self.residents.values() if r.waiting and r.state != LOADED),
                         key=lambda r: r.waiting[0].since)
        for order, resident in enumerate(wanting):
            if resident.state in (UNLOADED, FAILED):
                self._make_room(resident, now, first=order == 0)
        if not wanting:
            self._return_to_kept()
        for resident in self.residents.values():
            if resident.state == LOADED and not resident.draining:
                while resident.waiting:
                    self._grant(resident.waiting.popleft())

    def _make_room(self, resident: Resident, now: float, first: bool) -> None:
        """Load ``resident`` if it fits; the oldest waiting model may unload others to fit."""
        if self.free() >= resident.memory:
            self._start_load(resident)
            return
        if not first or any(r.state in (UNLOADING, LOADING) for r in self.residents.values()):
            return  # memory is being freed or taken: decide once that is done
        need = resident.memory - self.free()
        loaded = sorted((r for r in self.residents.values() if r.state == LOADED), key=lambda r: r.last_used)
        idle = [r for r in loaded if r.users == 0 and not r.waiting]
        victims = _enough(idle, need)
        if victims is None:
            waited = now - resident.waiting[0].since
            if waited < self.max_wait:
                self._wake_at(resident.waiting[0].since + self.max_wait)
                return
            victims = _enough(idle + [r for r in loaded if r not in idle], need)
            if victims is None:
                return  # cannot fit even with every model unloaded (the budget check says so at ask)
        resident.swap_pending = True
        for victim in victims:
            if victim.users == 0:
                self._start_unload(victim, "evicted")
            else:
                victim.draining = True  # unloads once its last request ends

    def _return_to_kept(self) -> None:
        for resident in self.residents.values():
            if resident.keep and resident.state == UNLOADED and self.free() >= resident.memory:
                self._start_load(resident)

    def _grant(self, ticket: Ticket) -> None:
        if ticket.granted.done():  # its client left meanwhile
            return
        ticket.holding = True
        ticket.waited = self.clock() - ticket.since
        ticket.resident.users += 1
        ticket.granted.set_result(None)

    def _start_load(self, resident: Resident) -> None:
        if resident.swap_pending:
            self.swaps += 1
            resident.swap_pending = False
        resident.state = LOADING
        self._spawn(self._load(resident))

    async def _load(self, resident: Resident) -> None:
        started = self.clock()
        try:
            measured = await resident.control.load()
        except Exception as exc:  # noqa: BLE001 - told to every request that waited for it
            resident.state = FAILED
            resident.error = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            logger.error("model %s failed to load: %s", resident.name, resident.error)
            error = ModelLoadError(f"The model {resident.name!r} could not be loaded: {resident.error}",
                                   backend=resident.control.backend)
            while resident.waiting:
                ticket = resident.waiting.popleft()
                if not ticket.granted.done():
                    ticket.granted.set_exception(error)
        else:
            seconds = self.clock() - started
            resident.state = LOADED
            resident.error = None
            resident.loads += 1
            resident.load_seconds += seconds
            resident.last_load_seconds = seconds
            resident.last_used = self.clock()
            if measured:
                resident.measured = max(measured, resident.measured or 0)
            logger.info("model %s loaded in %.2f s (%.0f MiB)", resident.name, seconds, resident.memory / MiB)
            self._arm_expiry(resident)
        self._schedule()

    def _start_unload(self, resident: Resident, reason: str) -> asyncio.Task[None]:
        """Unload ``resident``: from now on it takes no request (its state says so at once)."""
        resident.state = UNLOADING
        if resident._expiry is not None:
            resident._expiry.cancel()
            resident._expiry = None
        return self._spawn(self._unload(resident, reason))

    async def _unload(self, resident: Resident, reason: str) -> None:
        try:
            await resident.control.unload()
        except Exception:  # noqa: BLE001 - what it held is taken as freed; its next load starts afresh
            logger.exception("model %s did not unload cleanly", resident.name)
        resident.state = UNLOADED
        resident.unloads[reason] += 1
        logger.info("model %s unloaded (%s)", resident.name, reason)
        self._schedule()

    def _arm_expiry(self, resident: Resident) -> None:
        if resident._expiry is not None:
            resident._expiry.cancel()
            resident._expiry = None
        if resident.ttl > 0 and not resident.keep and resident.users == 0:
            resident._expiry = asyncio.get_running_loop().call_later(resident.ttl, self._expire, resident)

    def _expire(self, resident: Resident) -> None:
        resident._expiry = None
        if resident.state != LOADED or resident.users or resident.waiting:
            return
        left = resident.last_used + resident.ttl - self.clock()
        if left > 0.001:
            resident._expiry = asyncio.get_running_loop().call_later(left, self._expire, resident)
            return
        self._start_unload(resident, "ttl")

    def _wake_at(self, when: float) -> None:
        """Schedule again at ``when`` (a waiting model's max_wait ends then)."""
        if self._wake is not None:
            self._wake.cancel()
        self._wake = asyncio.get_running_loop().call_later(max(0.0, when - self.clock()) + 0.001, self._schedule)

    def _spawn(self, step) -> asyncio.Task[None]:  # noqa: ANN001 - a coroutine
        task = asyncio.ensure_future(step)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _preload(self, name: str) -> None:
        try:
            await self.load(name)
        except Exception as exc:  # noqa: BLE001 - logged; requests for it try again
            logger.error("model %s was not preloaded: %s", name, getattr(exc, "message", exc))

    def _fits(self, resident: Resident) -> bool:
        return self.budget is None or resident.memory <= self.budget

    def _too_big(self, resident: Resident) -> str:
        return (f"needs about {resident.memory / MiB:.0f} MiB, more than the whole memory_budget "
                f"({(self.budget or 0) / MiB:.0f} MiB): raise the budget, or set the model's memory")

    def _retry_after(self, resident: Resident) -> int:
        seconds = resident.last_load_seconds or 1.0
        return min(60, max(1, math.ceil(seconds)))


def _enough(candidates: list[Resident], need: float) -> list[Resident] | None:
    """The first of ``candidates`` that together free ``need`` bytes; None if all of them do not."""
    chosen: list[Resident] = []
    for candidate in candidates:
        if need <= 0:
            break
        chosen.append(candidate)
        need -= candidate.memory
    return chosen if need <= 0 else None
