"""A member's health: in, or out for a cool-down that grows with each failure in a row.

A member that fails (refused, a 5xx, silent past its first-token timeout, cut off mid-answer) is taken
out at once, so the next requests go elsewhere instead of finding out again; when its cool-down ends,
the pool's next background check probes it, and a good answer brings it back. The cool-down doubles
with each failure in a row (1 s, 2 s, 4 s ... at most a minute), so a member that keeps failing costs
few probes and one that recovers is back within a second or two.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llmproxy.errors import (
    BackendConnectionError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    MembersDownError,
)

FIRST_COOLDOWN = 1.0  # seconds
MAX_COOLDOWN = 60.0


def member_failure(error: BaseException) -> bool:
    """Whether ``error`` says the member itself failed (another member may well answer), rather than
    the request being at fault (a bad grammar, a prompt too long: every member would refuse it)."""
    if isinstance(error, MembersDownError):
        return False
    if isinstance(error, BackendHTTPError):
        return error.status >= 500 or error.status == 429
    return isinstance(error, (BackendConnectionError, BackendTimeoutError, BackendProtocolError))


class Health:
    """In or out; ``clock`` is injectable so tests move time instead of sleeping."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.failures_in_a_row = 0
        self.out_until: float | None = None  # None: in
        self.reason = ""  # the last failure, for /health

    @property
    def up(self) -> bool:
        return self.out_until is None

    @property
    def state(self) -> str:
        return "up" if self.up else "cooling_down"

    def failed(self, reason: str) -> None:
        """Out, for a cool-down twice the last one."""
        self.failures_in_a_row += 1
        cooldown = min(MAX_COOLDOWN, FIRST_COOLDOWN * 2 ** (self.failures_in_a_row - 1))
        self.out_until = self.clock() + cooldown
        self.reason = reason

    def succeeded(self) -> None:
        self.failures_in_a_row = 0
        self.out_until = None
        self.reason = ""

    def due(self) -> bool:
        """Whether a background check should ask it now: always while in, after its cool-down while out."""
        return self.out_until is None or self.clock() >= self.out_until

    def seconds_out(self) -> int:
        """Whole seconds left of the cool-down (at least 1): a Retry-After."""
        if self.out_until is None:
            return 0
        return max(1, math.ceil(self.out_until - self.clock()))
