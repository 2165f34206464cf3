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
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request

from llmproxy.server.admission import Admission, Slot
from llmproxy.server.connections import DISCONNECT_WATCH


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

    This server's own connections say when they are lost (``DISCONNECT_WATCH``); under another ASGI server
    a plain asyncio task listens for the disconnect (an anyio task group would cost more than the rest of
    the request).
    """
    watch = Watch()
    watch_connection = request.scope.get("extensions", {}).get(DISCONNECT_WATCH)
    if watch_connection is not None:
        watch_connection(watch.disconnected)
        stop: Callable[[], object] = lambda: watch_connection(None)  # noqa: E731
    else:
        async def listen() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            watch.disconnected()

        stop = asyncio.ensure_future(listen()).cancel
    try:
        yield watch
    except asyncio.CancelledError:
        if not watch.cancelled.is_set():
            raise
        asyncio.current_task().uncancel()  # our own cancellation, turned into Cancelled
        raise Cancelled() from None
    finally:
        stop()
    if watch.cancelled.is_set():
        raise Cancelled()
