"""A pool as configured: plain values, read by llmproxy.server.config without the server's machinery."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from llmproxy.route import Route
from llmproxy.server.on_demand.spec import DEFAULT_START_TIMEOUT

DEFAULT_POLL_INTERVAL = 1.0  # seconds between two checks of a member: a load report is at most this old
DEFAULT_IMBALANCE = 2.0  # requests (per unit of weight) a sticky member may carry above the least loaded


@dataclass(frozen=True)
class MemberSpec:
    """A member: its name (in /health, /metrics and the log), its own route (its backend, checked at
    start to render requests exactly as the first member does: llmproxy.server.pools.build), its weight
    (capacity relative to the others) and how many requests llmproxy sends it at once; where llmproxy
    starts its server, the command (``{port}`` filled in) and the seconds it has to answer its health
    check (llmproxy.server.pools.servers)."""

    name: str
    route: Route
    weight: float = 1.0
    max_running: int = 32
    command: tuple[str, ...] | None = None
    start_timeout: float = DEFAULT_START_TIMEOUT


@dataclass(frozen=True)
class PoolSpec:
    """A pool: its members, how far a conversation's member may be busier than the least loaded before
    the conversation moves, how often members are checked, whether conversations stay on their
    member at all (``sticky``), and the members that were down at start (name: what their server said),
    which start out of the rotation; for members whose server llmproxy starts, the idle seconds before it
    is stopped (``ttl``, 0: never) and whether they start with llmproxy (``preload``)."""

    members: tuple[MemberSpec, ...]
    imbalance: float = DEFAULT_IMBALANCE
    poll_interval: float = DEFAULT_POLL_INTERVAL
    sticky: bool = True
    down_at_start: Mapping[str, str] = field(default_factory=dict)
    ttl: float = 0.0
    preload: bool = False

    @property
    def max_running(self) -> int:
        return sum(member.max_running for member in self.members)
