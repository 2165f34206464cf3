"""Reloading the config file on SIGHUP, without dropping a request.

The new file is read and every model built (backends discovered, pools checked) in a worker thread,
while the server goes on answering; only once all of it is good does the service take the new
models, fallbacks, pools and aliases in place (``Service.adopt``). A request under way keeps the lane
it holds, and finishes on the backend it started on. A file that fails (bad TOML, a model that does
not build) is refused: the reason goes to the log, and the old configuration stays. ``[server]``
settings (address, limits on connections, the API key) take effect at the next start.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable

import anyio
from fastapi import FastAPI

from llmproxy.errors import LLMProxyError
from llmproxy.server.config import Serving
from llmproxy.server.models import Models

logger = logging.getLogger("llmproxy.server")


class Reloader:
    """Builds the service anew from ``load`` (the config file, read again) and has the app's adopt it."""

    def __init__(self, app: FastAPI, load: Callable[[], Serving]) -> None:
        self.app = app
        self.load = load
        self._lock = asyncio.Lock()  # two signals in a row: one reload after the other

    async def reload(self) -> bool:
        """True once the new configuration is served; False (old kept, reason logged) when it fails."""
        from llmproxy.server.app import Service  # the app imports this module

        async with self._lock:
            service = self.app.state.service
            try:
                served = await anyio.to_thread.run_sync(self.load)
                fresh = Service(Models(served.routes, served.server.default_model, served.aliases), service.intake,
                                served.limits, served.fallbacks, service.responses, served.pools, served.escalations)
            except LLMProxyError as exc:
                logger.error("the config file was not reloaded, the running configuration stays: %s", exc.message)
                return False
            await service.adopt(fresh)
            logger.info("config file reloaded: models %s", ", ".join(served.routes))
            return True


def reload_on_sighup(app: FastAPI, load: Callable[[], Serving]) -> Reloader:
    """Reload the config file (``load`` reads it) each time the process gets SIGHUP, as ``llmproxy serve``
    does. The handler is installed at start-up, on the server's event loop, where it runs in the main
    thread (signals are delivered only there)."""
    reloader = Reloader(app, load)

    def install() -> None:
        if hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread():
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(reloader.reload()))

    app.router.add_event_handler("startup", install)
    return reloader
