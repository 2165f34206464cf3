"""A pool's member: one backend endpoint, its weight, and what the pool knows of it right now.

A member knows nothing of the others; the pool (llmproxy.server.pools.pool) compares them.
"""

from __future__ import annotations

from collections.abc import Callable

from llmproxy.server.lanes import Lane
from llmproxy.server.pools.health import Health
from llmproxy.server.pools.load import Load, LoadReader
from llmproxy.server.pools.servers import RUNNING, MemberServer
from llmproxy.server.pools.spec import MemberSpec


class Member:
    """A member at run time: its lane, health, last load report and own counts; where llmproxy starts its
    server, that server (``changed``: called when it comes up, fails or stops)."""

    def __init__(self, spec: MemberSpec, lane: Lane, clock: Callable[[], float],
                 changed: Callable[[], None] = lambda: None) -> None:
        self.name = spec.name
        self.backend = spec.route.backend
        self.weight = spec.weight
        self.max_running = spec.max_running
        self.lane = lane
        self.health = Health(clock)
        self.reader = LoadReader(self.backend)
        self.reported: Load | None = None  # the backend's last report; None where it gives none
        self.in_flight = 0  # requests llmproxy has on it now
        self.waiting = 0  # requests waiting in llmproxy for it to have room (their conversation's member)
        self._in_flight_at_report = 0
        self.requests = 0  # chosen for, in all
        self.failures = 0
        self.server = MemberServer(spec, self.backend, self.health, changed, clock) if spec.command else None

    @property
    def serving(self) -> bool:
        """Up, and running where llmproxy starts its server: it may take a request now."""
        return self.health.up and (self.server is None or self.server.state == RUNNING)

    def report(self, load: Load | None) -> None:
        self.reported = load
        self._in_flight_at_report = self.in_flight

    @property
    def load(self) -> float:
        """Requests on the backend now (its last report, plus those llmproxy sent since: a report is up to
        a poll interval old; never less than llmproxy's own), and those waiting in llmproxy for it."""
        if self.reported is None:
            return self.in_flight + self.waiting
        return max(self.in_flight, self.reported.total + self.in_flight - self._in_flight_at_report) + self.waiting

    @property
    def weighted_load(self) -> float:
        return self.load / self.weight

    @property
    def full(self) -> bool:
        """No room for another request now: llmproxy's own limit for it, or the backend's last report, with
        the requests llmproxy sent it since (or that ended since: each frees a slot, or takes one waiting in)."""
        if self.in_flight >= self.max_running:
            return True
        report = self.reported
        if report is None:
            return False
        sent_since = self.in_flight - self._in_flight_at_report
        if report.slots is not None and report.busy + sent_since >= report.slots:
            return True  # every slot busy
        return report.queued > 0 and report.queued + sent_since > 0  # requests wait inside the backend
