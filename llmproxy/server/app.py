"""The OpenAI-compatible HTTP app: any OpenAI client, any local backend.

``create_app(routes)`` builds the FastAPI app; each route is a model name clients can ask for.
Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses (and GET/DELETE
/v1/responses/{id}), POST /v1/messages and /v1/messages/count_tokens, POST /v1/embeddings, GET /v1/models,
GET /v1/models/{id}, GET /health, GET /metrics (Prometheus), the interactive docs at /docs, and the
inspector page at /inspect (llmproxy.server.inspector).
``run`` serves it as ``llmproxy serve`` does.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send

from llmproxy import __version__
from llmproxy.backends.base import ProbeResult
from llmproxy.errors import LLMProxyError, OutputParseError, invalid_request
from llmproxy.grammar import prepare_validation
from llmproxy.route import Route
from llmproxy.server.config import (DEFAULT_MAX_BODY_BYTES, ConnectionLimits, RouteLimits, check_escalations,
                                    check_fallbacks, route_limits)
from llmproxy.server.connections import BODY_WRITER, WHOLE_WRITER, reserve_descriptors, uvicorn_options
from llmproxy.server.disconnects import Cancelled
from llmproxy.server.embeddings_face import EMBEDDINGS_BODY, EMBEDDINGS_PATH, EmbeddingsJob, answer_embeddings
from llmproxy.server.endpoints import ChatGeneration, Generation, TextGeneration, openai_error_body
from llmproxy.faces.messages import models_list as anthropic_models
from llmproxy.server.messages_face import (MESSAGES_BODY, MESSAGES_PATH, MessagesGeneration, anthropic_error_body,
                                           read_messages)
from llmproxy.server.response_store import ResponseStore
from llmproxy.server.responses_face import RESPONSES_BODY, ResponsesGeneration, stored
from llmproxy.server.fallbacks import HEADER as FALLBACKS_HEADER
from llmproxy.server.fallbacks import fallback_note, header_value, worth_falling_back
from llmproxy.server.hosts import HostCheck
from llmproxy.server.inspector.recent import Recent
from llmproxy.server.inspector.routes import install as install_inspector
from llmproxy.server.intake import Intake
from llmproxy.server.lanes import Lane, lane_for
from llmproxy.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from llmproxy.server.metrics import Metrics
from llmproxy.server.models import Models
from llmproxy.server.on_demand import OnDemandSpec
from llmproxy.server.on_demand.endpoints import install as install_on_demand
from llmproxy.server.on_demand.metrics import OnDemandMetrics
from llmproxy.server.on_demand.service import OnDemand
from llmproxy.server.pools.lane import PoolLane
from llmproxy.server.pools.pool import Pool
from llmproxy.server.pools.spec import PoolSpec
from llmproxy.server.pools.sticky import client_key
from llmproxy.server.request_ids import request_id, request_id_header, with_request_id
from llmproxy.server.request_log import RequestLog, logger
from llmproxy.server.responses import answer, stream
from llmproxy.faces.completions.request import CompletionRequest
from llmproxy.types import ChatRequest, Fallback

HEALTH_TIMEOUT = 5.0  # seconds /health waits for a backend before it reports it down


class Service:
    """The app's state: the models it answers to, how a request is let in, a lane per backend, a pool
    per model served by several (llmproxy.server.pools).

    Models that share a backend share its lane, with the first one's limits. ``adopt`` takes another
    service's models in place (a reloaded config file): requests under way keep the lanes they hold."""

    def __init__(self, models: Models, intake: Intake, limits: Mapping[str, RouteLimits],
                 fallbacks: Mapping[str, Sequence[str]], responses: ResponseStore,
                 pools: Mapping[str, PoolSpec] | None = None, escalations: Mapping[str, str] | None = None,
                 on_demand: OnDemandSpec | None = None) -> None:
        check_fallbacks(fallbacks, list(models.routes))
        check_escalations(escalations or {}, list(models.routes))
        self.models = models
        self.intake = intake
        self.fallbacks = fallbacks
        self.escalations = dict(escalations or {})  # model -> the model asked again after an unusable answer
        self.responses = responses  # stored Responses API turns (previous_response_id)
        self.pools = {name: Pool(name, spec, limits.get(name) or RouteLimits(spec.max_running))
                      for name, spec in (pools or {}).items()}
        self.lanes: dict[int, Lane] = {}
        for name, route in models.routes.items():
            if name not in self.pools and id(route.backend) not in self.lanes:
                self.lanes[id(route.backend)] = lane_for(route.backend, name, limits.get(name) or route_limits(route))
        self.metrics = Metrics(self.lanes.values(), responses, self.pools.values())
        # Models loaded on demand (llmproxy.server.on_demand): a request goes through their scheduler.
        self.on_demand = OnDemand(on_demand, models.routes) if on_demand is not None else None
        self.limits = limits
        if self.on_demand is not None:
            self.metrics.registry.register(OnDemandMetrics(self.on_demand.scheduler))
            models.facts = self.on_demand.facts

    def lane(self, route: Route, key: str | None = None) -> Lane:
        """The lane for a request to ``route``; a pool's gets the conversation ``key`` its client sent."""
        pool = self.pools.get(route.name)
        lane = PoolLane(pool, key) if pool is not None else self.lanes[id(route.backend)]
        if self.on_demand is not None:
            limits = self.limits.get(route.name) or route_limits(route)
            return self.on_demand.lane(route.name, lane, limits.max_running + limits.max_queue)
        return lane

    def fallback(self, asked: Route, tried: int) -> Route | None:
        """The model to try after ``tried`` models failed for a request to ``asked``, if any is left."""
        names = self.fallbacks.get(asked.name, ())
        return self.models.routes[names[tried - 1]] if tried <= len(names) else None

    def escalation(self, route: Route, error: BaseException) -> Route | None:
        """The model that gets a request whose answer from ``route`` stayed unusable, if it names one."""
        name = self.escalations.get(route.name)
        return self.models.routes[name] if name is not None and isinstance(error, OutputParseError) else None

    def start(self) -> None:
        for pool in self.pools.values():
            pool.start()
        if self.on_demand is not None:
            self.on_demand.start()

    async def adopt(self, other: Service) -> None:
        """Serve ``other``'s models from now on (its lanes and pools replace these; the metrics go on).
        Requests under way keep the lanes they hold, so none is dropped."""
        old_pools = list(self.pools.values())
        self.models, self.fallbacks, self.escalations = other.models, other.fallbacks, other.escalations
        self.lanes.clear()
        self.lanes.update(other.lanes)
        self.pools.clear()
        self.pools.update(other.pools)
        if self.on_demand is not None:  # the scheduler and its loaded models stay: /v1/models goes on showing them
            self.models.facts = self.on_demand.facts
        for pool in old_pools:
            await pool.stop()  # its members' connections stay open for the requests still on them
        self.start()

    async def aclose(self) -> None:
        if self.on_demand is not None:
            await self.on_demand.stop()
        for lane in self.lanes.values():
            await lane.aclose()
        for pool in self.pools.values():
            await pool.aclose()


def with_fallbacks(response: Response, tried: Sequence[Fallback]) -> Response:
    if tried:
        response.headers[FALLBACKS_HEADER] = header_value(tried)
    return response


class _Server(FastAPI):
    """FastAPI, except that every request is first given its id and has its Host checked
    (llmproxy.server.request_ids, llmproxy.server.hosts), and POSTs to the generation endpoints go
    straight to their handlers.

    FastAPI's middleware, routing and dependency machinery cost about as much as rendering a
    MemGPT-sized prompt; these handlers read their own bodies and answer every failure themselves,
    so they need none of it. The endpoints stay declared on FastAPI too, for /docs, and serve every
    request once middleware has been added to the app (CORS, say), so that it applies to them too.
    """

    def __init__(self, hosts: HostCheck, **options: Any) -> None:
        super().__init__(**options)
        self.hosts = hosts
        self.direct: dict[str, Callable[[Request], Awaitable[Response]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            send = with_request_id(scope, send)
            try:
                self.hosts.check(_header(scope, b"host"))
            except LLMProxyError as refused:
                logger.warning("refused a request to %s: %s", scope["path"], refused.message)
                await _error_response(refused, Request(scope))(scope, receive, send)
                return
        if self.user_middleware:  # a middleware may rewrite bodies: every piece goes through the ASGI send
            for extension in (BODY_WRITER, WHOLE_WRITER):
                scope.get("extensions", {}).pop(extension, None)
        direct = scope["type"] == "http" and scope["method"] == "POST" and not self.user_middleware
        handler = self.direct.get(_route_path(scope)) if direct else None
        if handler is None:
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        response = await handler(Request(scope, receive, send))
        whole = scope.get("extensions", {}).get(WHOLE_WRITER) if type(response) is Response else None
        if whole is None or not whole(response.status_code, [*response.raw_headers, request_id_header(scope)],
                                      response.body):
            await response(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def _route_path(scope: Scope) -> str:
    """The request's path below the app's mount point (``root_path``), as routing sees it."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def create_app(routes: dict[str, Route], *, default_model: str | None = None, api_key: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, allowed_hosts: Iterable[str] = (),
               cors_origins: Iterable[str] = (), limits: Mapping[str, RouteLimits] | None = None,
               fallbacks: Mapping[str, Sequence[str]] | None = None, aliases: Mapping[str, str] | None = None,
               responses: ResponseStore | None = None, capture: bool = False,
               pools: Mapping[str, PoolSpec] | None = None, escalations: Mapping[str, str] | None = None,
               on_demand: OnDemandSpec | None = None) -> FastAPI:
    """The server for ``routes`` (model name -> route).

    ``default_model`` answers requests that name no model or one not in ``routes``; without it the
    first route answers those naming none, and an unknown name is a 404 (llmproxy.server.models).
    ``allowed_hosts``: the names it answers to besides localhost and IP addresses (llmproxy.server.hosts).
    ``cors_origins``: the web origins whose pages may call it; none by default.
    ``limits``: how many requests each model runs and queues; by default its backend's (llmproxy.server.config).
    ``fallbacks``: for a model, the others to try in order when it cannot take a request now
    (llmproxy.server.fallbacks).
    ``aliases``: glob patterns of the names clients send (``claude-*``) -> the model that answers them.
    ``responses``: where Responses API turns are stored (llmproxy.server.response_store).
    ``capture``: keep the bodies of each request's steps for the inspector at /inspect (they hold user
    data); without it, the inspector shows the requests' metadata (llmproxy.server.inspector).
    ``pools``: for a model served by several backends, its members (its route renders for them all;
    llmproxy.server.pools). ``escalations``: for a model, the one that gets an answer it left unusable.
    ``on_demand``: the models loaded on demand, and their memory budget (llmproxy.server.on_demand).
    """
    service = Service(Models(routes, default_model, aliases), Intake(api_key, max_body_bytes), limits or {},
                      fallbacks or {}, responses or ResponseStore(), pools, escalations, on_demand)
    app = _Server(HostCheck(allowed_hosts), title="llmproxy", version=__version__,
                  description="OpenAI function calling for local models. Point any OpenAI client here.")
    app.state.service = service
    app.router.add_event_handler("startup", prepare_validation)
    app.router.add_event_handler("startup", service.start)  # the pools' background checks
    app.router.add_event_handler("shutdown", service.aclose)
    _install_error_handlers(app)
    origins = list(cors_origins)
    if origins:
        # Any header: OpenAI's JavaScript SDK sends its own x-stainless-* headers.
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST"],
                           allow_headers=["*"], expose_headers=["x-request-id", "retry-after", FALLBACKS_HEADER])

    recent = Recent(capture=capture)  # the inspector's last requests

    def ended(log: RequestLog) -> None:
        service.metrics.record(log)
        recent.record(log)

    async def generate(request: Request, kind: type[Generation], respond: Callable[..., Awaitable[BaseModel]] = answer
                       ) -> Response:
        """Read the request, take it through its stages, answer (``respond``: how a request is answered on
        its lane once read; embeddings have their own); log one line however it ends."""
        log = RequestLog(kind.endpoint, request_id(request.scope), ended, steps=recent.steps())
        tried: list[Fallback] = []
        escalated: Fallback | None = None  # the model whose answer stayed unusable, once its escalate_to took over
        generation: Generation | None = None
        try:
            service.intake.authorize(request)
            fields = await service.intake.json_body(request)
            log.received(kind, fields)
            # A conversation's own key, for a pool's stickiness (read before the body is validated).
            key = client_key(fields, request.headers) if service.pools else None
            generation = kind.read(fields, service)
            asked = generation.route
            lane = service.lane(asked, key)

            def escalate(exc: BaseException) -> tuple[Lane, Generation] | None:
                """The lane and generation of the model that gets an answer left unusable, once per request."""
                nonlocal escalated
                after = service.escalation(generation.route, exc) if escalated is None else None
                if after is None:
                    return None
                escalated = fallback_note(generation.route.name, exc)
                log.escalating(after.name, exc)
                log.serving(after, generation.stream)
                return service.lane(after, key), generation.on_route(after)

            while True:
                log.serving(generation.route, generation.stream)
                try:
                    if generation.stream:  # the stream writes the log line
                        return with_fallbacks(await stream(request, lane, generation, log, escalate), tried)
                    response = await respond(request, lane, generation, log)
                    break
                except Exception as exc:  # tried again on its own lane as far as it could be (responses.goes_again)
                    escalation = escalate(exc)
                    if escalation is not None:
                        lane, generation = escalation
                        continue
                    after = service.fallback(asked, len(tried) + 1) if worth_falling_back(exc) else None
                    if after is None:
                        raise
                    tried.append(fallback_note(generation.route.name, exc))
                    log.fell_back(tried[-1])
                    generation = generation.on_route(after)
                    lane = service.lane(after, key)
        except Cancelled:
            log.disconnected()
            log.emit()
            return Response(status_code=499)  # nobody is listening; nothing worth sending
        except Exception as exc:  # noqa: BLE001 - every failure is answered with an envelope
            log.failed(exc)
            log.emit()
            events = generation.failed_stream(exc) if generation is not None and generation.stream else None
            if events is not None:
                return with_fallbacks(Response(b"".join(events), media_type="text/event-stream"), tried)
            return with_fallbacks(_error_response(exc, request, kind.error_body), tried)
        info = getattr(response, "llmproxy", None)
        if info is not None:
            info.fallbacks = tried
            info.escalated_from = escalated
        log.answered(response)
        log.emit()
        body = generation.body(response)
        log.sent(body)
        generation.sent()
        return with_fallbacks(Response(body, media_type="application/json"), tried)

    @app.post("/v1/chat/completions", tags=["OpenAI"], openapi_extra=_body_doc(ChatRequest))
    async def chat_completions(request: Request) -> Response:
        """Chat completion with function calling (``tools`` or legacy ``functions``), streamed or not.

        llmproxy extension: ``"first_message": true`` primes MemGPT's first step to call ``send_message``.
        """
        return await generate(request, ChatGeneration)

    @app.post("/v1/completions", tags=["OpenAI"], openapi_extra=_body_doc(CompletionRequest))
    async def completions(request: Request) -> Response:
        """Raw text completion: the prompt goes to the backend as it is, optionally under a grammar."""
        return await generate(request, TextGeneration)

    @app.post("/v1/responses", tags=["OpenAI"], openapi_extra=_inline_body_doc(RESPONSES_BODY))
    async def responses(request: Request) -> Response:
        """OpenAI's Responses API (Codex CLI, openai-agents): input items, function, namespace and custom
        tools, ``tool_choice``, ``text.format``, reasoning, streamed or not; ``store`` with
        ``previous_response_id`` in a bounded in-memory store."""
        return await generate(request, ResponsesGeneration)

    @app.get("/v1/responses/{response_id}", tags=["OpenAI"])
    async def stored_response(response_id: str, request: Request) -> Response:
        """A stored response (404 once it has expired or was never stored)."""
        service.intake.authorize(request)
        return Response(json.dumps(stored(service.responses, response_id).response),
                        media_type="application/json")

    @app.delete("/v1/responses/{response_id}", tags=["OpenAI"])
    async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
        """Forget a stored response."""
        service.intake.authorize(request)
        stored(service.responses, response_id)
        service.responses.delete(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    @app.post(MESSAGES_PATH, tags=["Anthropic"], openapi_extra=_inline_body_doc(MESSAGES_BODY))
    async def messages(request: Request) -> Response:
        """Anthropic's Messages API (Claude Code, the anthropic SDK): content blocks, tools, ``tool_choice``,
        thinking, streamed or not; errors in Anthropic's envelope (a prompt too long is a 413)."""
        return await generate(request, MessagesGeneration)

    @app.post(MESSAGES_PATH + "/count_tokens", tags=["Anthropic"],
              openapi_extra=_inline_body_doc({**MESSAGES_BODY, "required": ["model", "messages"]}))
    async def count_tokens(request: Request) -> dict[str, int]:
        """The prompt's tokens as the model's route renders and counts them: ``{"input_tokens": N}``."""
        service.intake.authorize(request)
        face = read_messages(await service.intake.json_body(request), counting=True)
        chat = ChatGeneration(face.chat, service.models.route(face.chat.model))
        prompt = await anyio.to_thread.run_sync(chat.draft) if chat.heavy else chat.draft()
        return {"input_tokens": (await service.lane(chat.route).count(prompt)).tokens}

    @app.post(EMBEDDINGS_PATH, tags=["OpenAI"], openapi_extra=_inline_body_doc(EMBEDDINGS_BODY))
    async def embeddings(request: Request) -> Response:
        """Embeddings of ``input`` (a string, strings, token ids or lists of them) by the model's backend, as
        floats or base64; ``dimensions`` where the model gives that many."""
        return await generate(request, EmbeddingsJob, answer_embeddings)  # type: ignore[arg-type]

    app.direct = {"/v1/chat/completions": chat_completions, "/v1/completions": completions,
                  "/v1/responses": responses, MESSAGES_PATH: messages, EMBEDDINGS_PATH: embeddings}

    @app.head("/", include_in_schema=False)
    @app.head("/api/hello", include_in_schema=False)
    @app.get("/", include_in_schema=False)
    async def root() -> dict[str, str]:
        """Clients probe the base address (Claude Code sends HEAD /, and HEAD /api/hello unless its
        non-essential traffic is off); it says what answers here."""
        return {"name": "llmproxy", "version": __version__, "docs": "/docs", "inspect": "/inspect"}

    @app.get("/v1/models", tags=["OpenAI"])
    async def models(request: Request) -> dict[str, Any]:
        """The model names this server answers to, each with its context length (``context_length``,
        ``max_model_len``), the backend and wrapper behind it and what it takes (tools, grammars,
        embeddings); in Anthropic's list shape when the request carries ``anthropic-version`` (Claude
        Code's discovery), with ``max_input_tokens``."""
        service.intake.authorize(request)
        if "anthropic-version" in request.headers:
            return anthropic_models(service.models.windows(), service.models.created)
        if service.on_demand is not None:
            await service.on_demand.refresh()  # the state of models that LM Studio loads, as it says
        return {"object": "list", "data": service.models.cards()}

    @app.get("/v1/models/{model:path}", tags=["OpenAI"])
    async def retrieve_model(model: str, request: Request) -> dict[str, Any]:
        """One served model (404 for a name that is not listed by /v1/models)."""
        service.intake.authorize(request)
        if service.on_demand is not None:
            await service.on_demand.refresh()
        return service.models.card(model)

    @app.get("/health", tags=["Service"])
    async def health(request: Request) -> Response:
        """Whether every model's backend answers (200), or which do not (503); for a pool, each member's
        state from its last background check (a pool is up while any member is).

        Behind the API key when the server has one; only then does it show each backend's details
        (which may hold its address): without a key, every caller is a stranger."""
        service.intake.authorize(request)
        probes: dict[str, ProbeResult] = {}

        async def probe(name: str, route: Route) -> None:
            probes[name] = await service.lane(route).probe(HEALTH_TIMEOUT)

        async with anyio.create_task_group() as group:
            for name, route in service.models.routes.items():
                if name not in service.pools:  # a pool's members are checked in the background: read, not asked
                    group.start_soon(probe, name, route)
        details = service.intake.api_key is not None
        up = all(result.up for result in probes.values()) and all(pool.up for pool in service.pools.values())
        if not details:
            models = {name: {"up": result.up} for name, result in probes.items()}
        else:
            models = {name: {"backend": result.backend, "up": result.up, "model": result.model,
                             "context_window": result.context_window, "detail": result.detail or None}
                      for name, result in probes.items()}
        models.update({name: pool.report(details) for name, pool in service.pools.items()})
        if details and service.on_demand is not None:  # a started server's last lines
            for name in models:
                lines = service.on_demand.log_lines(name)
                if lines is not None:
                    models[name]["log"] = lines
        body = {"status": "ok" if up else "unavailable", "models": models}
        return Response(json.dumps(body), status_code=200 if up else 503, media_type="application/json")

    @app.get("/metrics", tags=["Service"])
    async def metrics(request: Request) -> Response:
        """Prometheus metrics: requests, errors and their time by endpoint and model; queues."""
        service.intake.authorize(request)
        return Response(service.metrics.exposition(), media_type=METRICS_CONTENT_TYPE)

    install_inspector(app, service, recent)
    if service.on_demand is not None:
        install_on_demand(app, service.intake, service.on_demand)
    _document_bodies(app, [ChatRequest, CompletionRequest])
    return app


def run(app: FastAPI, host: str, port: int, log_level: str, limits: ConnectionLimits = ConnectionLimits()) -> None:
    """Serve ``app`` with uvicorn until interrupted, as ``llmproxy serve`` does, its connections held
    to ``limits`` (llmproxy.server.connections)."""
    import uvicorn

    reserve_descriptors(limits)
    # What is loaded by now (libraries, routes, backends) lives as long as the server. Frozen, it is
    # no longer re-scanned by each full garbage collection, which otherwise stalls requests by tens
    # of ms (p99 at 8 clients: 70 ms before, 20 ms after; bench/bench_server.py).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    # Our own log line per request replaces uvicorn's access log.
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False, **uvicorn_options(limits))


def _error_response(exc: BaseException, request: Request,
                    error_body: Callable[[BaseException], tuple[int, bytes]] | None = None) -> Response:
    """``exc`` answered in the envelope of the endpoint asked (``error_body``; by default the one its
    path belongs to: Anthropic's below /v1/messages, else OpenAI's)."""
    if not isinstance(exc, (LLMProxyError, HTTPException)):
        logger.error("unexpected failure answering %s %s", request.method, request.url.path, exc_info=exc)
    if error_body is None:
        error_body = anthropic_error_body if _route_path(request.scope).startswith(MESSAGES_PATH) else openai_error_body
    status, body = error_body(exc)
    response = Response(body, status_code=status, media_type="application/json")
    retry_after = getattr(exc, "retry_after", None)  # a full queue (429), a pool with every member out (503)
    if retry_after is not None:
        response.headers["retry-after"] = str(retry_after)
    return response


def _install_error_handlers(app: FastAPI) -> None:
    """Errors raised outside the generation endpoints' own handling (framework errors, /v1/models, /health)."""

    async def failed(request: Request, exc: Exception) -> Response:
        return _error_response(exc, request)

    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        return _error_response(invalid_request(list(exc.errors())), request)

    app.add_exception_handler(RequestValidationError, invalid)
    for kind in (LLMProxyError, HTTPException, Exception):
        app.add_exception_handler(kind, failed)


# --- interactive docs --------------------------------------------------------------------------


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """An OpenAPI request body for an endpoint that reads and validates its body itself."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _inline_body_doc(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI request body given as a JSON schema (the faces read their bodies leniently: the
    schema names the main fields, and any other field is accepted)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _document_bodies(app: FastAPI, models: list[type[BaseModel]]) -> None:
    """Add the request models' schemas to the OpenAPI document that /docs shows."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(schema.pop("$defs", {}))
                schemas[model.__name__] = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
