"""A pool member's server that llmproxy starts from its command (llmproxy.server.on_demand.process does
the starting, health check and stopping): stopped, starting, running, stopping.

The pool starts it when a request finds no member running with room (llmproxy.server.pools.pool), and
it takes requests once it answered its health check; the pool's checks stop it after ``ttl`` seconds
with no request. A server that ends by itself is started again at once, out of the rotation until it
answers; one that fails to start is out for the pool's growing cool-down (llmproxy.server.pools.health)
before a request may start it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from llmproxy.backends.base import Backend
from llmproxy.server.on_demand.process import ProcessControl
from llmproxy.server.pools.health import Health
from llmproxy.server.pools.spec import MemberSpec

logger = logging.getLogger("llmproxy.server")

STOPPED, STARTING, RUNNING, STOPPING = "stopped", "starting", "running", "stopping"


class MemberServer:
    """The server of member ``spec`` (whose ``health`` it sets); ``changed`` is called whenever it comes up,
    fails or stops, so that requests waiting for a member look again."""

    def __init__(self, spec: MemberSpec, backend: Backend, health: Health, changed: Callable[[], None],
                 clock: Callable[[], float]) -> None:
        assert spec.command is not None
        self.name = spec.name
        self.process = ProcessControl(spec.command, backend, spec.start_timeout, on_exit=self._exited)
        self.health = health
        self.changed = changed
        self.clock = clock
        self.state = STOPPED
        self.last_used = 0.0  # when its last request ended (or it came up)
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one start or stop at a time: a stop's process is gone before a start

    @property
    def startable(self) -> bool:
        """Stopped, and not cooling down after a failed start."""
        return self.state == STOPPED and self.health.due()

    def start(self) -> None:
        """Start it in the background, unless it is starting or running already."""
        if self.state in (STARTING, RUNNING):
            return
        self.state = STARTING
        self._task = asyncio.ensure_future(self._start())

    async def _start(self) -> None:
        async with self._lock:
            try:
                await self.process.load()
            except Exception as exc:  # noqa: BLE001 - the member is out, and says why
                self.state = STOPPED
                self.health.failed(f"its server did not start: {getattr(exc, 'message', None) or exc}")
                logger.error("member %s: %s", self.name, self.health.reason)
            else:
                self.state = RUNNING
                self.last_used = self.clock()
                self.health.succeeded()
                logger.info("member %s: its server is up (pid %s)", self.name, self.process.process.pid
                            if self.process.process else None)
        self.changed()

    async def stop(self, reason: str) -> None:
        """Stop it (no request is on it)."""
        if self.state != RUNNING:
            return
        self.state = STOPPING
        async with self._lock:
            await self.process.unload()
            self.state = STOPPED
        logger.info("member %s: its server stopped (%s)", self.name, reason)
        self.changed()

    def idle_for(self, seconds: float, in_flight: int) -> bool:
        """Whether it has run with no request for ``seconds`` (0: never counts as idle)."""
        return self.state == RUNNING and seconds > 0 and in_flight == 0 and self.clock() - self.last_used >= seconds

    def _exited(self) -> None:
        """The process ended by itself: out of the rotation, and started again."""
        if self.state != RUNNING:
            return  # while starting, the start itself fails and says why
        self.state = STOPPED
        self.health.failed(f"its server exited by itself (status {self.process.exit_code})")
        logger.warning("member %s: its server exited by itself (status %s); starting it again", self.name,
                       self.process.exit_code)
        self.start()
        self.changed()

    async def aclose(self) -> None:
        """Stop it for good (the server is shutting down)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        async with self._lock:
            await self.process.unload()
            self.state = STOPPED

    def report(self) -> dict[str, object]:
        """For /health: its state, pid, starts, how it last ended by itself and its last lines."""
        process = self.process.process
        return {"state": self.state, "pid": process.pid if process else None, "starts": self.process.starts,
                "exit_code": self.process.exit_code, "log": list(self.process.log)}
