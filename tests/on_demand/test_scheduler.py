"""The scheduler of models loaded on demand, with controls that only count and take the time they are told:
collation, the memory budget, no eviction while serving, max_wait, ttl, the queue's limit, failures."""

from __future__ import annotations

import asyncio

import pytest

from llmproxy.errors import ConfigurationError, ModelBusyError, ModelLoadError, OverloadedError
from llmproxy.server.on_demand.scheduler import LOADED, UNLOADED, Resident, Scheduler

MB = 1_000_000


class Timed:
    """A control whose load takes ``seconds``; records every load and unload in ``events``."""

    backend = "fake"

    def __init__(self, name: str, events: list[str], seconds: float = 0.02, fail: str | None = None) -> None:
        self.name, self.events, self.seconds, self.fail = name, events, seconds, fail

    async def load(self) -> int | None:
        await asyncio.sleep(self.seconds)
        if self.fail:
            raise RuntimeError(self.fail)
        self.events.append(f"load {self.name}")
        return None

    async def unload(self) -> None:
        self.events.append(f"unload {self.name}")


def two_models(events: list[str], *, budget: int = 150 * MB, max_wait: float = 30.0, ttl: float = 0.0,
               **resident: object) -> Scheduler:
    """A and B of 100 MB each: one fits in the budget at a time."""
    return Scheduler([Resident(name, Timed(name, events), memory=100 * MB, ttl=ttl, **resident)  # type: ignore[arg-type]
                      for name in "AB"], budget, max_wait)


async def use(scheduler: Scheduler, name: str, seconds: float, served: list[str]) -> None:
    """One request: its model loaded, ``seconds`` of work, done; records the model each time it is served."""
    ticket = scheduler.ask(name, limit=100)
    try:
        await scheduler.wait(ticket)
        assert scheduler.residents[name].state == LOADED
        served.append(name)
        await asyncio.sleep(seconds)
    finally:
        scheduler.release(ticket)


def test_a_burst_for_two_models_loads_each_once():
    async def run() -> tuple[list[str], list[str], int]:
        events: list[str] = []
        served: list[str] = []
        scheduler = two_models(events)
        await asyncio.gather(*(use(scheduler, name, 0.01, served) for name in "ABABA"))
        return events, served, scheduler.swaps

    events, served, swaps = asyncio.run(run())
    assert events == ["load A", "unload A", "load B"]  # not A, B, A, B, A
    assert served == ["A", "A", "A", "B", "B"]
    assert swaps == 1


def test_a_model_serving_is_never_unloaded_for_another():
    async def run() -> list[str]:
        events: list[str] = []
        scheduler = two_models(events)
        timeline: list[str] = []
        ticket = scheduler.ask("A", 10)
        await scheduler.wait(ticket)  # A serves a long answer
        waiting_for_b = asyncio.ensure_future(use(scheduler, "B", 0, timeline))
        await asyncio.sleep(0.1)
        timeline.append(f"A still {scheduler.residents['A'].state}")
        scheduler.release(ticket)
        await waiting_for_b
        return events + timeline

    assert asyncio.run(run()) == ["load A", "unload A", "load B", "A still loaded", "B"]


def test_a_waiting_model_stops_the_busy_one_taking_requests_after_max_wait():
    async def run() -> tuple[list[str], list[str]]:
        events: list[str] = []
        served: list[str] = []
        scheduler = two_models(events, max_wait=0.2)

        async def agent_on_a() -> None:  # back-to-back requests for a second
            loop = asyncio.get_running_loop()
            end = loop.time() + 1.0
            while loop.time() < end:
                await use(scheduler, "A", 0.02, served)

        async def offset_agent_on_a() -> None:  # another, half a request later: A is never idle
            await asyncio.sleep(0.01)
            await agent_on_a()

        busy = asyncio.gather(agent_on_a(), offset_agent_on_a())
        await asyncio.sleep(0.05)
        started = asyncio.get_running_loop().time()
        await use(scheduler, "B", 0, served)
        waited = asyncio.get_running_loop().time() - started
        await busy
        return events, [f"{waited:.1f}"]

    events, waited = asyncio.run(run())
    assert events[:3] == ["load A", "unload A", "load B"]
    assert 0.15 <= float(waited[0]) < 0.6  # about max_wait, not the second A stayed busy


def test_an_idle_model_unloads_after_its_ttl_and_loads_again_when_asked():
    async def run() -> list[str]:
        events: list[str] = []
        scheduler = two_models(events, budget=1000 * MB, ttl=0.15)
        await use(scheduler, "A", 0, [])
        await asyncio.sleep(0.05)
        events.append(scheduler.residents["A"].state)
        await asyncio.sleep(0.2)
        events.append(scheduler.residents["A"].state)
        await use(scheduler, "A", 0, [])
        return events

    assert asyncio.run(run()) == ["load A", "loaded", "unload A", "unloaded", "load A"]


def test_the_default_model_stays_and_comes_back_once_room_frees():
    async def run() -> list[str]:
        events: list[str] = []
        scheduler = Scheduler([Resident("A", Timed("A", events), memory=100 * MB, keep=True),
                               Resident("B", Timed("B", events), memory=100 * MB, ttl=0.1)], 150 * MB, 30.0)
        scheduler.start([])
        await asyncio.sleep(0.1)
        await use(scheduler, "B", 0, [])
        await asyncio.sleep(0.3)  # B's ttl passes: A, the model clients return to, loads again
        return events

    assert asyncio.run(run()) == ["load A", "unload A", "load B", "unload B", "load A"]


def test_past_its_limit_a_request_for_a_loading_model_gets_429():
    async def run() -> str:
        scheduler = two_models([])
        tickets = [scheduler.ask("A", limit=2) for _ in range(2)]
        with pytest.raises(OverloadedError) as refused:
            scheduler.ask("A", limit=2)
        for ticket in tickets:
            await scheduler.wait(ticket)
            scheduler.release(ticket)
        return refused.value.message

    message = asyncio.run(run())
    assert "'A'" in message and "2 requests already wait for it" in message


def test_a_failed_load_fails_its_requests_and_the_next_one_tries_again():
    async def run() -> tuple[str, str, str]:
        events: list[str] = []
        control = Timed("A", events, fail="no such file")
        scheduler = Scheduler([Resident("A", control, memory=MB)], None, 30.0)
        with pytest.raises(ModelLoadError) as failed:
            await use(scheduler, "A", 0, [])
        state = scheduler.residents["A"].state
        control.fail = None
        await use(scheduler, "A", 0, [])
        return failed.value.message, state, scheduler.residents["A"].state

    message, state, after = asyncio.run(run())
    assert "could not be loaded: no such file" in message
    assert (state, after) == ("failed", "loaded")


def test_a_client_that_leaves_while_waiting_takes_its_request_out():
    async def run() -> tuple[int, int]:
        events: list[str] = []
        scheduler = two_models(events)
        holder = scheduler.ask("A", 10)
        await scheduler.wait(holder)
        waiting = asyncio.ensure_future(use(scheduler, "B", 0, []))
        await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        left = len(scheduler.residents["B"].waiting)
        scheduler.release(holder)
        await asyncio.sleep(0.05)
        return left, events.count("load B")

    assert asyncio.run(run()) == (0, 0)  # nobody waits for B any more: it is not loaded for nobody


def test_unloading_a_busy_model_is_refused_and_a_model_bigger_than_the_budget_is_a_config_error():
    async def run() -> str:
        scheduler = two_models([])
        ticket = scheduler.ask("A", 10)
        await scheduler.wait(ticket)
        with pytest.raises(ModelBusyError) as busy:
            await scheduler.unload("A")
        scheduler.release(ticket)
        await scheduler.unload("A")
        assert scheduler.residents["A"].state == UNLOADED
        return busy.value.message

    assert "serving 1 requests" in asyncio.run(run())
    with pytest.raises(ConfigurationError, match="more than the whole memory_budget"):
        Scheduler([Resident("A", Timed("A", []), memory=200 * MB)], 150 * MB, 30.0)
