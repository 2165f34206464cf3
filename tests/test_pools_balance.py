"""How the choice of a member spreads requests, in a simulation: members of different sizes and speeds,
clients that post again as soon as their answer ends, and time that is counted rather than waited for,
so the shares depend on the rule alone and not on the machine that runs the test."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

import pytest
from pool_helpers import member

from llmproxy.server.pools.choice import choose
from llmproxy.server.pools.load import Load
from llmproxy.server.pools.sticky import Affinities

ANSWER_TOKENS = 42  # bench/bench_pools.py's MemGPT call
# name: (slots, tokens/s of each stream); weight = slots and max_running = slots, as bench/bench_pools.py sets
MEMBERS = {"fast": (8, 200.0), "slow": (4, 100.0), "other": (4, 100.0)}


@dataclass
class Run:
    answers: dict[str, int]  # requests each member answered

    def shares(self) -> dict[str, float]:
        total = sum(self.answers.values())
        return {name: count / total for name, count in self.answers.items()}


def capacity_shares() -> dict[str, float]:
    capacity = {name: slots * rate for name, (slots, rate) in MEMBERS.items()}
    return {name: value / sum(capacity.values()) for name, value in capacity.items()}


def simulate(clients: int, seconds: float, *, outside: float = 0.0, sticky: bool = True, seed: int = 0) -> Run:
    """``clients`` agents, each its own conversation, posting again ``outside`` seconds after their answer
    ended; a request runs on its member for ANSWER_TOKENS at the member's rate; a request whose member
    (or every member) is full waits, and chooses again whenever a request ends, as the pool's do; each
    member reports its busy slots once a second, as llama.cpp's /slots would."""
    rng = random.Random(seed)
    members = {name: member(name, weight=slots, max_running=slots) for name, (slots, _) in MEMBERS.items()}
    affinities = Affinities()
    answers = dict.fromkeys(MEMBERS, 0)
    waiting: list[int] = []  # clients whose request waits, first come first
    events: list[tuple[float, int, str, object]] = [(0.0, client, "post", client) for client in range(clients)]
    events += [(float(second), -1, "report", None) for second in range(int(seconds) + 1)]
    heapq.heapify(events)
    order = clients

    waits_for: dict[int, object] = {}  # a waiting client -> the member it waits for (counted in its load)

    def start(now: float, client: int) -> bool:
        nonlocal order
        chosen = choose(list(members.values()), f"user:agent-{client}" if sticky else None, affinities, 2.0, rng)
        if chosen is None or chosen.full:
            if chosen is not None:
                chosen.waiting += 1
                waits_for[client] = chosen
            return False
        chosen.in_flight += 1
        order += 1
        heapq.heappush(events, (now + ANSWER_TOKENS / MEMBERS[chosen.name][1], order, "end", (client, chosen)))
        return True

    def choose_again(now: float) -> None:
        for client in list(waiting):
            held = waits_for.pop(client, None)
            if held is not None:
                held.waiting -= 1
            if start(now, client):
                waiting.remove(client)

    while events:
        now, _, kind, what = heapq.heappop(events)
        if now > seconds:
            break
        if kind == "report":
            for name, each in members.items():
                each.report(Load(busy=each.in_flight, slots=MEMBERS[name][0]))
            choose_again(now)
        elif kind == "post":
            if not start(now, what):
                waiting.append(what)
        else:
            client, ended = what
            ended.in_flight -= 1
            answers[ended.name] += 1
            order += 1
            heapq.heappush(events, (now + outside, order, "post", client))
            choose_again(now)
    return Run(answers)


def within(shares: dict[str, float], wanted: dict[str, float], margin: float) -> bool:
    return all(abs(shares[name] / wanted[name] - 1) <= margin for name in wanted)


@pytest.mark.parametrize("sticky", [True, False])
@pytest.mark.parametrize("outside", [0.0, 1.0])
def test_with_more_clients_than_slots_each_member_answers_its_share_of_the_capacity(sticky, outside):
    # bench/bench_pools.py's load: 64 clients for 16 slots, each client its own conversation; requests
    # spend no time outside the members, or a second each (in the client and the proxy). The issue's
    # target: each member answers its share of the capacity (slots x speed) within 15 %.
    for seed in range(3):
        run = simulate(64, 120, outside=outside, sticky=sticky, seed=seed)
        assert within(run.shares(), capacity_shares(), 0.15), run.shares()


@pytest.mark.parametrize("seed", range(3))
def test_below_the_slots_requests_follow_weight_and_speed(seed):
    # 14 clients for 16 slots, no conversation keys: no member fills, so it is the weights that keep the
    # fast member's share (a rule blind to them sends it as many as each slow one: a fifth too few).
    run = simulate(14, 120, sticky=False, seed=seed)
    assert within(run.shares(), capacity_shares(), 0.15), run.shares()
