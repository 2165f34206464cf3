"""The OpenAI-compatible HTTP server: any OpenAI client, any local backend.

``create_app(routes)`` builds the FastAPI app; each route is a model name clients can ask for.
Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, and the
interactive docs at /docs. The work itself is llmproxy.proxy's pipeline, run off the event loop by
llmproxy.serving; errors become OpenAI error envelopes in llmproxy.server_errors.

llmproxy extension: a chat request may carry ``"first_message": true`` (MemGPT's first step of a new
agent: the answer is primed to call ``send_message``).
"""

from __future__ import annotations

import gc
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send

from llmproxy import __version__
from llmproxy.backends.base import ProbeResult
from llmproxy.completions import CompletionRequest, TextChunks, finish_completion, plan_completion
from llmproxy.errors import ConfigurationError, InvalidRequestError, LLMProxyError, invalid_request
from llmproxy.formats import with_response_format
from llmproxy.proxy import draft, finish, parse_request, plan_draft
from llmproxy.route import Route
from llmproxy.server_errors import (
    AuthenticationError,
    ModelNotFoundError,
    PayloadTooLargeError,
    envelope,
)
from llmproxy.server_log import RequestLog, logger
from llmproxy.serving import Cancelled, Job, Lane, Pending, answer, in_thread, stream
from llmproxy.streaming import ChatChunks
from llmproxy.tokens import TokenCount
from llmproxy.types import ChatRequest

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024  # a long MemGPT conversation is well under 1 MiB


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


class Service:
    """The app's state: routes by name (the first is the default), how each backend is called, the API
    key, the body limit."""

    def __init__(self, routes: dict[str, Route], api_key: str | None, max_body_bytes: int) -> None:
        if not routes:
            raise ConfigurationError("the server needs at least one model to serve")
        self.routes = routes
        self.default = next(iter(routes.values()))
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.lanes = {id(route.backend): Lane(route.backend) for route in routes.values()}
        self.started = int(time.time())

    def route(self, model: str | None) -> Route:
        if not model:
            return self.default
        route = self.routes.get(model)
        if route is None:
            raise ModelNotFoundError(
                f"The model {model!r} is not served here; known models: {', '.join(self.routes)}", param="model"
            )
        return route

    def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        # Constant-time comparison: the time taken must not tell how much of a guess was right.
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key):
            raise AuthenticationError("Missing or wrong API key; send it as 'Authorization: Bearer <key>'.")

    async def json_body(self, request: Request) -> dict[str, Any]:
        limit = self.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise PayloadTooLargeError(f"The request body is {declared} bytes; this server takes at most {limit}.")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise PayloadTooLargeError(f"The request body is over this server's limit of {limit} bytes.")
        try:
            fields = json.loads(body)
        except ValueError as exc:
            raise InvalidRequestError(f"The request body is not valid JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise InvalidRequestError("The request body must be a JSON object.")
        return fields


# --- jobs: what each endpoint asks of the backend ----------------------------------------------


def _chat_job(route: Route, request: ChatRequest, first_message: bool) -> Pending:
    drafted = draft(request, route, first_message=first_message)

    def job(prompt_tokens: TokenCount) -> Job:
        prepared = with_response_format(plan_draft(drafted, prompt_tokens))
        chunks = None
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            chunks = ChatChunks(prepared.rendered, request.model or route.name, include_usage=include_usage)
        return Job(prepared.rendered.prompt, prepared.params, partial(finish, prepared), chunks, prepared.grammar)

    return Pending(drafted.rendered.prompt, job)


def _text_job(route: Route, request: CompletionRequest) -> Pending:
    def job(prompt_tokens: TokenCount) -> Job:
        prepared = plan_completion(request, route, prompt_tokens)
        chunks = TextChunks(prepared) if request.stream else None
        return Job(prepared.request.prompt, prepared.params, partial(finish_completion, prepared), chunks,
                   prepared.grammar)

    return Pending(request.prompt, job)


def _first_message(fields: dict[str, Any]) -> bool:
    value = fields.pop("first_message", False)
    if not isinstance(value, bool):
        raise InvalidRequestError("invalid request: first_message: must be true or false", param="first_message")
    return value


def _read_chat(service: Service, fields: dict[str, Any]) -> tuple[Route, Callable[[], Pending], bool]:
    first_message = _first_message(fields)
    chat = parse_request(fields)
    route = service.route(chat.model)
    return route, partial(_chat_job, route, chat, first_message), chat.stream


def _read_completion(service: Service, fields: dict[str, Any]) -> tuple[Route, Callable[[], Pending], bool]:
    try:
        text = CompletionRequest.model_validate(fields)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None
    route = service.route(text.model)
    return route, partial(_text_job, route, text), text.stream


# --- the app -----------------------------------------------------------------------------------


class _Server(FastAPI):
    """FastAPI, except that POSTs to the generation endpoints go straight to their handlers.

    FastAPI's middleware, routing and dependency machinery cost about as much as rendering a
    MemGPT-sized prompt; these handlers read their own bodies and answer every failure themselves,
    so they need none of it. The endpoints stay declared on FastAPI too, for /docs, and serve every
    request once middleware has been added to the app (CORS, say), so that it applies to them too.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.direct: dict[str, Callable[[Request], Awaitable[Response]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct = scope["type"] == "http" and scope["method"] == "POST" and not self.user_middleware
        handler = self.direct.get(_route_path(scope)) if direct else None
        if handler is None:
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The request's path below the app's mount point (``root_path``), as routing sees it."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def create_app(routes: dict[str, Route], *, api_key: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> FastAPI:
    """The server for ``routes`` (model name -> route; the first one answers requests naming none)."""
    service = Service(routes, api_key, max_body_bytes)
    app = _Server(title="llmproxy", version=__version__,
                  description="OpenAI function calling for local models. Point any OpenAI client here.")
    app.state.service = service
    _install_error_handlers(app)

    async def respond(request: Request, endpoint: str, read: Callable) -> Response:
        """Read the request, run its job, answer; log one line however it ends."""
        log = RequestLog(endpoint)
        try:
            service.authorize(request)
            route, job, streamed = read(service, await service.json_body(request))
            log.serving(route, streamed)
            lane = service.lanes[id(route.backend)]
            if streamed:
                return await stream(request, lane, job, log)  # the stream writes the log line
            response = await answer(request, lane, job, log)
        except Cancelled:
            log.disconnected()
            log.emit()
            return Response(status_code=499)  # nobody is listening; nothing worth sending
        except Exception as exc:  # noqa: BLE001 - every failure is answered with an envelope
            log.failed(exc)
            log.emit()
            return _error_response(exc, request)
        log.answered(response)
        log.emit()
        return _json(response)

    @app.post("/v1/chat/completions", tags=["OpenAI"], openapi_extra=_body_doc(ChatRequest))
    async def chat_completions(request: Request) -> Response:
        """Chat completion with function calling (``tools`` or legacy ``functions``), streamed or not."""
        return await respond(request, "chat.completions", _read_chat)

    @app.post("/v1/completions", tags=["OpenAI"], openapi_extra=_body_doc(CompletionRequest))
    async def completions(request: Request) -> Response:
        """Raw text completion: the prompt goes to the backend as it is, optionally under a grammar."""
        return await respond(request, "completions", _read_completion)

    app.direct = {"/v1/chat/completions": chat_completions, "/v1/completions": completions}

    @app.get("/v1/models", tags=["OpenAI"])
    async def models(request: Request) -> dict[str, Any]:
        """The model names this server answers to, with the backend and wrapper behind each."""
        service.authorize(request)
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": service.started, "owned_by": "llmproxy",
             "llmproxy": {"backend": route.backend.name, "wrapper": route.wrapper.name, "grammar": route.grammar,
                          "context_window": route.context_window}}
            for name, route in service.routes.items()
        ]}

    @app.get("/health", tags=["Service"])
    async def health() -> Response:
        """Whether every model's backend answers (200), or which do not (503)."""
        probes: dict[str, ProbeResult] = {}

        async def probe(name: str, route: Route) -> None:
            probes[name] = await in_thread(route.backend.probe)

        async with anyio.create_task_group() as group:
            for name, route in service.routes.items():
                group.start_soon(probe, name, route)
        up = all(result.up for result in probes.values())
        body = {"status": "ok" if up else "unavailable", "models": {
            name: {"backend": result.backend, "up": result.up, "model": result.model,
                   "context_window": result.context_window, "detail": result.detail or None}
            for name, result in probes.items()
        }}
        return Response(json.dumps(body), status_code=200 if up else 503, media_type="application/json")

    _document_bodies(app, [ChatRequest, CompletionRequest])
    return app


def run(app: FastAPI, host: str, port: int, log_level: str) -> None:
    """Serve ``app`` with uvicorn until interrupted, as ``llmproxy serve`` does."""
    import uvicorn

    # What is loaded by now (libraries, routes, backends) lives as long as the server. Frozen, it is
    # no longer re-scanned by each full garbage collection, which otherwise stalls requests by tens
    # of ms (p99 at 8 clients: 70 ms before, 20 ms after; bench/bench_server.py).
    gc.collect()
    gc.freeze()
    # Our own log line per request replaces uvicorn's access log.
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


def _error_response(exc: BaseException, request: Request) -> Response:
    if not isinstance(exc, (LLMProxyError, HTTPException)):
        logger.error("unexpected failure answering %s %s", request.method, request.url.path, exc_info=exc)
    status, body = envelope(exc)
    return _json(body, status)


def _install_error_handlers(app: FastAPI) -> None:
    """Errors raised outside the endpoints' own handling (framework errors, /v1/models, /health)."""

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
