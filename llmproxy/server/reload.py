"""Reloading the config file on SIGHUP, without dropping a request.

The new file is read and every model built (backends discovered, pools checked) in a worker thread,
while the server goes on answering; only once all of it is good does the service take the new
models, fallbacks, pools and aliases in place (``Service.adopt``). A request under way keeps the lane
it holds, and finishes on the backend it started on. A file that fails (bad TOML, a model that does
not build) is refused: the reason goes to the log, and the old configuration stays. ``[server]``
settings (address, limits on connections, the API key) take effect at the next start.

So do the settings of models loaded on demand (llmproxy.server.on_demand): the scheduler holds their
memory, loaded models and started servers, so each one still in the file keeps running as it is, and
so does a pool whose members llmproxy starts (its servers' ports stay); the log says which. A file
that adds a model loaded on demand is refused (it needs a restart); a pool of started members that
the file drops or changes stops its servers once their last requests end.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable

import anyio
from fastapi import FastAPI

from llmproxy.errors import ConfigurationError, LLMProxyError
from llmproxy.server.app import Service
from llmproxy.server.config import Serving
from llmproxy.server.models import Models
from llmproxy.server.on_demand.service import scheduled
from llmproxy.server.pools.pool import Pool

logger = logging.getLogger("llmproxy.server")


class Reloader:
    """Builds the service anew from ``load`` (the config file, read again) and has the app's adopt it."""

    def __init__(self, app: FastAPI, load: Callable[[], Serving]) -> None:
        self.app = app
        self.load = load
        self._lock = asyncio.Lock()  # two signals in a row: one reload after the other
        self._retiring: set[asyncio.Task[None]] = set()

    async def reload(self) -> bool:
        """True once the new configuration is served; False (old kept, reason logged) when it fails."""
        async with self._lock:
            service = self.app.state.service
            try:
                served = await anyio.to_thread.run_sync(self.load)
                kept, retired = _keep_running(service, served)
                fresh = Service(Models(served.routes, served.server.default_model, served.aliases), service.intake,
                                served.limits, served.fallbacks, service.responses, served.pools, served.escalations)
            except LLMProxyError as exc:
                logger.error("the config file was not reloaded, the running configuration stays: %s", exc.message)
                return False
            fresh.pools.update({name: service.pools[name] for name in kept if name in service.pools})
            await service.adopt(fresh)
            for pool in retired:
                task = asyncio.ensure_future(pool.retire())
                self._retiring.add(task)
                task.add_done_callback(self._retiring.discard)
            logger.info("config file reloaded: models %s", ", ".join(served.routes))
            if kept:
                logger.warning("models loaded on demand keep running as they are, their settings change at the next "
                               "start: %s", ", ".join(kept))
            return True


def _keep_running(service: Service, served: Serving) -> tuple[list[str], list[Pool]]:
    """Give the new configuration the running routes of the models loaded on demand that it still serves,
    and of the pools of started members it still has (their pools taken over once it is built): those
    names. And the pools of started members it drops or changes, to be retired. A model newly loaded on
    demand is a ConfigurationError (the running scheduler does not have it)."""
    running = set(service.on_demand.scheduler.residents) if service.on_demand is not None else set()
    plans = served.on_demand.models if served.on_demand is not None else {}
    added = [name for name, plan in plans.items() if name not in running and scheduled(served.routes[name], plan)]
    if added:
        raise ConfigurationError(f"models loaded on demand cannot be added while the server runs: "
                                 f"{', '.join(added)}; restart llmproxy to serve them")
    kept = [name for name in running if name in served.routes and name not in served.pools]
    retired = []
    for name, pool in service.pools.items():
        if not pool.starts_servers:
            continue
        spec = served.pools.get(name)
        if spec is not None and any(member.command for member in spec.members):
            kept.append(name)
            del served.pools[name]
        else:
            retired.append(pool)
    for name in kept:
        served.routes[name] = service.models.routes[name]
    return kept, retired


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
