"""Stopping the work for a client that went away.

While a request's work runs, its connection is watched; a disconnect sets a flag that worker
threads check between backend deltas (a thread cannot be interrupted), and interrupts outright a
wait that may be long on the event loop: for a place in a backend's queue, or for a backend's answer
(everything else on the loop is quick). The work then ends with ``Cancelled``, which the app answers
with nothing (status 499 in the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

from starlette.requests import Request

from llmproxy.server.admission import Admission, Slot


class Cancelled(Exception):
    """The client went away; the work for it was stopped."""


class Watch:
    """A request's connection, watched while its work runs (see ``watching``)."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._task = asyncio.current_task()
        self._interruptible = False

    def disconnected(self) -> None:
        self.cancelled.set()
        if self._interruptible and self._task is not None:
            self._task.cancel()

    @contextlib.asynccontextmanager
    async def interruptible(self) -> AsyncIterator[None]:
        """A wait that a client leaving cancels at once."""
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False

    async def enter(self, admission: Admission) -> Slot:
        """A place to run in (the caller releases it); a client that leaves meanwhile ends the wait."""
        async with self.interruptible():
            return await admission.enter()


@contextlib.asynccontextmanager
async def watching(request: Request) -> AsyncIterator[Watch]:
    """Watch for the client to disconnect while the body runs; raises Cancelled if it did.

    A plain asyncio task: an anyio task group here would cost more than the rest of the request.
    """
    watch = Watch()

    async def listen() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        watch.disconnected()

    listener = asyncio.ensure_future(listen())
    try:
        yield watch
    except asyncio.CancelledError:
        if not watch.cancelled.is_set():
            raise
        asyncio.current_task().uncancel()  # our own cancellation, turned into Cancelled
        raise Cancelled() from None
    finally:
        listener.cancel()
    if watch.cancelled.is_set():
        raise Cancelled()
