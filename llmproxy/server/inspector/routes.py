"""The inspector's endpoints: the page at GET /inspect, its two files, and the data it reads.

    GET  /inspect                          the page (``?key=KEY``: sign in, llmproxy.server.inspector.access)
    GET  /inspect/static/{inspect.js,inspect.css}
    GET  /inspect/api/overview             each model: backend, wrapper, health, load, /metrics counts
    GET  /inspect/api/requests             the last requests, newest last
    GET  /inspect/api/requests/{seq}       one request, with its steps where they were captured
    GET  /inspect/api/events               the requests as they end (server-sent events)
    POST /inspect/api/requests/{seq}/rerun run a captured request again with other choices

Each one checks its caller first (access.check); the page's files are read once, from the package.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import Response

from llmproxy.common.json_bytes import json_bytes
from llmproxy.errors import NotFoundError
from llmproxy.grammar import grammar_names
from llmproxy.prompts import wrapper_specs
from llmproxy.server.inspector import access, views
from llmproxy.server.inspector.recent import Entry, Recent
from llmproxy.server.inspector.rerun import read_changes, rerun
from llmproxy.server.responses import EventStream
from llmproxy.syntaxes import SYNTAX_NAMES

STATIC = Path(__file__).parent / "static"
FILES = {"inspect.js": "text/javascript; charset=utf-8", "inspect.css": "text/css; charset=utf-8"}
# The page loads nothing but its own files, and no other site may frame it.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
                "X-Frame-Options": "DENY", "Cache-Control": "no-cache", "Referrer-Policy": "no-referrer"}
PROBE_SECONDS = 2.0  # how long the overview waits for a backend before it shows it as down
KEEPALIVE_SECONDS = 5.0
# Then the browser reconnects, resuming after its last event. A server that is told to stop waits for
# its open streams to end (uvicorn tells them nothing), so they must end by themselves, and soon.
STREAM_SECONDS = 10.0
GATHER_SECONDS = 0.1  # the page is updated ten times a second at most


def install(app: FastAPI, service: Any, recent: Recent) -> None:
    """Add the inspector to ``app``, showing ``service`` (llmproxy.server.app.Service) and ``recent``."""
    page = (STATIC / "inspect.html").read_bytes()
    files = {name: (STATIC / name).read_bytes() for name in FILES}
    recent.encode = views.event

    def checked(request: Request) -> None:
        access.check(request, service.intake)

    @app.get(access.PAGE, include_in_schema=False)
    async def inspect(request: Request, key: str | None = None) -> Response:
        if key is not None:
            return access.login(request, service.intake, key)
        checked(request)
        return Response(page, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    @app.get(access.PAGE + "/static/{name}", include_in_schema=False)
    async def static(name: str, request: Request) -> Response:
        checked(request)
        if name not in files:
            raise NotFoundError(f"The inspector has no file {name[:100]!r}.")
        return Response(files[name], media_type=FILES[name], headers={"Cache-Control": "no-cache"})

    @app.get(access.PAGE + "/api/overview", include_in_schema=False)
    async def overview(request: Request) -> Response:
        checked(request)
        routes = service.models.routes
        probes = {}

        async def probe(name: str) -> None:
            probes[name] = await service.lane(routes[name]).probe(PROBE_SECONDS)

        async with anyio.create_task_group() as group:
            for name in routes:
                group.start_soon(probe, name)
            if service.on_demand is not None:
                group.start_soon(service.on_demand.refresh)  # LM Studio's models: their state as it says
        counts = views.counts_by_model(service.metrics)
        models = []
        for name, route in routes.items():
            pool = service.pools.get(name)  # a model served by several backends (llmproxy.server.pools)
            lane = service.lane(route)
            admission = pool.admission if pool is not None else getattr(lane, "inner", lane).admission  # on demand: its own
            members = pool.report(details=True)["members"] if pool is not None else None
            on_demand = service.on_demand
            loading = None if on_demand is None else on_demand.facts(name)
            if loading is not None:
                loading = {**loading, "log": (on_demand.log_lines(name) or [])[-10:]}
            models.append(views.route_view(route, admission, service.fallbacks.get(name, ()), counts.get(name, {}),
                                           probes[name], members, loading))
        return _json({"models": models, "capture": recent.capture, "kept": len(recent.entries),
                      "max_kept": recent.max_entries, "kept_bytes": recent.bytes, "max_bytes": recent.max_bytes,
                      "choices": {"wrappers": [spec.name for spec in wrapper_specs()], "syntaxes": list(SYNTAX_NAMES),
                                  "grammars": ["auto", "none", *grammar_names()]}})

    @app.get(access.PAGE + "/api/requests", include_in_schema=False)
    async def requests(request: Request) -> Response:
        checked(request)
        return _json([views.summary(entry) for entry in recent.entries])

    @app.get(access.PAGE + "/api/requests/{seq}", include_in_schema=False)
    async def one(seq: int, request: Request) -> Response:
        checked(request)
        return _json(views.detail(_entry(recent, seq)))

    @app.post(access.PAGE + "/api/requests/{seq}/rerun", include_in_schema=False)
    async def run_again(seq: int, request: Request) -> Response:
        checked(request)
        changes = read_changes(await service.intake.json_body(request))
        entry = await rerun(_entry(recent, seq), changes, service, service.lane, recent, request)
        return _json(views.detail(entry))

    @app.get(access.PAGE + "/api/events", include_in_schema=False)
    async def events(request: Request) -> Response:
        checked(request)
        last = request.headers.get("last-event-id", "")
        after = int(last) if last.isdigit() else 0
        queue = recent.listen()  # before the backlog is read, so no request falls between the two
        if recent.entries and after > recent.entries[-1].seq:  # seen before this server (re)started
            after = 0
        backlog = [views.event(entry) for entry in recent.since(after)]

        async def body():  # noqa: ANN202 - an async generator of the stream's bytes
            yield b"retry: 1000\n\n" + b"".join(backlog)
            deadline = asyncio.get_running_loop().time() + STREAM_SECONDS
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                try:
                    event = await asyncio.wait_for(queue.get(), min(KEEPALIVE_SECONDS, left))
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                # A busy server's events are gathered for a moment and sent in one write: a write
                # per request cost it 16 % more CPU a request (bench/bench_inspector.py).
                await asyncio.sleep(GATHER_SECONDS)
                batch = [event]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                if None in batch:  # fell behind: cut off; the browser reconnects and catches up
                    return
                yield b"".join(batch)

        async def leave() -> None:
            recent.leave(queue)

        return EventStream(body(), leave)


def _json(value: Any) -> Response:
    """The page's data as JSON: by json_bytes, which writes the lone surrogate a client's text may hold."""
    return Response(json_bytes(value), media_type="application/json")


def _entry(recent: Recent, seq: int) -> Entry:
    entry = recent.get(seq)
    if entry is None:
        raise NotFoundError(f"Request {seq} is no longer kept (the inspector keeps the last {recent.max_entries}).")
    return entry

