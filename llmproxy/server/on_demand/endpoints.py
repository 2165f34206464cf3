"""The endpoints that load and unload a model on command, as llama.cpp's router names them:

    POST /models/load    {"model": NAME}   loaded (or loading still, past ``wait`` seconds); its facts
    POST /models/unload  {"model": NAME}   unloaded; 409 while requests use it (an answer is never cut)

Both change what every client of the server gets, so both are guarded: by the API key where the server
has one, else only for a client on this machine (loopback); and never for another site's web page.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

from fastapi import FastAPI, Request

from llmproxy.errors import AuthenticationError, InvalidRequestError
from llmproxy.server.inspector.access import check_origin
from llmproxy.server.intake import Intake
from llmproxy.server.on_demand.service import OnDemand

LOAD_WAIT = 600.0  # seconds a load command waits for its model at most (it goes on loading past them)


def install(app: FastAPI, intake: Intake, on_demand: OnDemand) -> None:
    """Add the two endpoints to ``app``."""

    async def model_named(request: Request) -> str:
        guard(request, intake)
        body = await intake.json_body(request)
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise InvalidRequestError('the body names the model: {"model": "NAME"}', param="model")
        on_demand.scheduler.resident(name)  # 404 for a model not loaded on demand
        return name

    @app.post("/models/load", tags=["Service"])
    async def load(request: Request) -> dict[str, Any]:
        """Load a model now (as its first request would), and say its state."""
        name = await model_named(request)
        loading = asyncio.ensure_future(on_demand.scheduler.load(name))
        done, _ = await asyncio.wait({loading}, timeout=LOAD_WAIT)
        if done:
            loading.result()  # a failed load: its error
        return {"model": name, **(on_demand.facts(name) or {})}

    @app.post("/models/unload", tags=["Service"])
    async def unload(request: Request) -> dict[str, Any]:
        """Unload a model now, unless requests use it."""
        name = await model_named(request)
        await on_demand.scheduler.unload(name)
        return {"model": name, **(on_demand.facts(name) or {})}


def guard(request: Request, intake: Intake) -> None:
    """The key where the server has one, else a client on this machine; never another site's page."""
    check_origin(request)
    if intake.api_key is not None:
        intake.authorize(request)
        return
    client = request.client.host if request.client else ""
    try:
        local = ipaddress.ip_address(client).is_loopback
    except ValueError:
        local = client in ("localhost", "testclient")
    if not local:
        raise AuthenticationError("Loading and unloading models needs the server's API key (serve --api-key); "
                                  "without one, only a client on the server's own machine may.")
