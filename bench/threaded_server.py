"""An asyncio server on 127.0.0.1 in a thread of its own, for the benches' stand-ins (not part of the
test run): ``ThreadedServer(serve)`` starts it, where ``serve(loop)`` creates the server on ``loop``;
``port`` is where it listens and ``stop()`` ends it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable


class ThreadedServer:
    def __init__(self, serve: Callable[[asyncio.AbstractEventLoop], Awaitable[asyncio.Server]], what: str) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        async def start() -> None:
            self.server = await serve(self.loop)
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        if not started.wait(10):
            raise RuntimeError(f"{what} did not start")

    def stop(self) -> None:
        def close() -> None:
            self.server.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(close)
        self.thread.join(5)
