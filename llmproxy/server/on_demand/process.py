"""A backend server that llmproxy starts on demand from its command, and stops when its model unloads.

Started in a session of its own (so that stopping it stops what it started too), its output kept as its
last lines for /health and the inspector; it is loaded once its backend answers a health check (the
backend's own probe) and then asked what it serves. A server that ends by itself is reported
(``on_exit``): the scheduler marks the model unloaded, and it is started again for its next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence

import anyio

from llmproxy.backends.base import Backend

LOG_LINES = 40
STOP_SECONDS = 10.0  # after SIGTERM, before SIGKILL
POLL_SECONDS = 0.25


class ServerFailed(Exception):
    """The server ended, or never answered, while starting."""


class ProcessControl:
    """The server of ``backend``, started with ``argv``."""

    def __init__(self, argv: Sequence[str], backend: Backend, start_timeout: float,
                 on_exit: Callable[[], None] = lambda: None) -> None:
        self.argv = tuple(argv)
        self.served = backend
        self.backend = backend.name
        self.start_timeout = start_timeout
        self.on_exit = on_exit
        self.log: deque[str] = deque(maxlen=LOG_LINES)
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.exit_code: int | None = None  # how it last ended by itself
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False

    async def load(self) -> int | None:
        await self.unload()  # what is left of one that died
        self._stopping = False
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise ServerFailed(f"its command could not start: {exc}") from None
        self.process = process
        self.starts += 1
        self.log.append(f"[llmproxy] started: {' '.join(self.argv)} (pid {process.pid})")
        self._reader = asyncio.ensure_future(self._read(process))
        deadline = time.monotonic() + self.start_timeout
        while True:
            if process.returncode is not None:
                raise ServerFailed(f"its command exited with status {process.returncode} before it answered; "
                                   f"its last lines: {self.tail(5)}")
            probe = await anyio.to_thread.run_sync(self.served.probe)
            if probe.up:
                break
            if time.monotonic() > deadline:
                await self.unload()
                raise ServerFailed(f"its server was not up within {self.start_timeout:g} s (start_timeout): "
                                   f"{probe.detail}; its last lines: {self.tail(5)}")
            await asyncio.sleep(POLL_SECONDS)
        await anyio.to_thread.run_sync(self.served.discover)  # its context window and template, now it is up
        return _resident_bytes(process.pid)

    async def unload(self) -> None:
        process, self.process = self.process, None
        self._stopping = True
        if process is not None and process.returncode is None:
            _signal(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_SECONDS)
            except TimeoutError:
                _signal(process.pid, signal.SIGKILL)
                await process.wait()
        if self._reader is not None:
            await self._reader
            self._reader = None

    def tail(self, lines: int = LOG_LINES) -> str:
        return " | ".join(list(self.log)[-lines:])

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            self.log.append(line.decode("utf-8", errors="replace").rstrip())
        code = await process.wait()
        if not self._stopping:
            self.exit_code = code
            self.log.append(f"[llmproxy] exited by itself with status {code}")
            self.on_exit()


def _signal(pid: int, which: signal.Signals) -> None:
    """Signal the server and everything it started (its own session's process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, which)


def _resident_bytes(pid: int) -> int | None:
    """The server's resident memory, from /proc (Linux)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
