"""Which member takes a request: the conversation's own member where it has one, else the less loaded
of two drawn at random (power of two choices), load weighted by each member's capacity.

Two random members rather than the least loaded of all: load reports are up to a poll interval old,
and every request of a burst would otherwise pile onto the one member that looked idle. A member with
no room (llmproxy's limit for it, or its own report) is never chosen while another has room, except by
a conversation that waits for its own member: reading its prompt again elsewhere costs more than
waiting for one answer, so it waits while its member, counting the requests waiting for it and this
one, carries at most ``imbalance`` requests (per unit of weight) above the least loaded.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from llmproxy.server.pools.members import Member
from llmproxy.server.pools.sticky import Affinities


def least_loaded(members: Sequence[Member], rng: random.Random) -> Member:
    """Power of two choices over weighted load; ties go to the larger member."""
    if len(members) <= 2:
        pair = list(members)
    else:
        pair = rng.sample(list(members), 2)
    return min(pair, key=lambda member: (member.weighted_load, -member.weight))


def choose(members: Sequence[Member], key: str | None, affinities: Affinities, imbalance: float,
           rng: random.Random) -> Member | None:
    """The member for a request (``key``: its conversation, if known), among ``members`` that are up and
    not yet tried for it: its conversation's, full or not (the request then waits for it), unless that
    one is much busier than the least loaded; else one with room; None when every one of them is full."""
    roomy = [member for member in members if not member.full]
    if key is not None:
        held = affinities.get(key)
        lightest = min(member.weighted_load for member in roomy or members)
        for member in members:
            # Stays where its prefix is cached, unless that member (with this request waiting for it, when
            # it is full) is much busier than the least loaded.
            waits = 1 / member.weight if member.full else 0.0
            if member.name == held and member.weighted_load + waits - lightest <= imbalance:
                return member
    if not roomy:
        return None
    chosen = least_loaded(roomy, rng)
    if key is not None:
        affinities.put(key, chosen.name)
    return chosen
