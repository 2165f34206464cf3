"""Helpers for the pool tests: a llama.cpp server that reports its slots (GET /slots) and can be made
busy, hung or killed, and a way to run a pool's background check on the test server's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from pytest_httpserver import HTTPServer
from server_helpers import InstantBackend, answer_for, pieces, route
from werkzeug import Request, Response

from llmproxy.backends.llamacpp import LlamaCppBackend
from llmproxy.prompts import load_wrapper
from llmproxy.route import Route
from llmproxy.server.config import RouteLimits
from llmproxy.server.lanes import LoopLane
from llmproxy.server.pools.load import Load
from llmproxy.server.pools.members import Member
from llmproxy.server.pools.pool import Pool
from llmproxy.server.pools.spec import MemberSpec, PoolSpec


class SlotServer:
    """llama.cpp's ``llama-server`` as llmproxy's pools see it: streamed POST /completion (SSE, the last
    event ``stop: true``, no ``[DONE]``), /tokenize, /health, /props with a chat template, and GET /slots
    listing ``slots`` slots of which ``busy`` are processing (``is_processing``, as current servers say).

    ``mode``: "ok", or "hang" (/completion, /slots, /props and /tokenize say nothing for ``hang_seconds``: a
    server that accepts connections and never answers). ``kill()`` stops
    it as a crash would: the answers it is streaming break off, and new connections are refused."""

    def __init__(self, slots: int = 4, template: str = "{{ messages }}", tokens_per_char: float = 0.25) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.server.start()
        self.url = self.server.url_for("/").rstrip("/")
        self.slots, self.busy = slots, 0
        self.template = template
        self.tokens_per_char = tokens_per_char
        self.mode = "ok"
        self.hang_seconds = 3.0
        self.pace = 0.0  # seconds between events
        self.unusable = 0  # answers that are no call at all, before the good ones
        self.bodies: list[dict[str, Any]] = []
        self.started = threading.Event()  # a generation has begun streaming
        self.streaming = 0  # answers being streamed now
        self._streaming_lock = threading.Lock()
        self.cut = 0  # answers that were being streamed when kill() broke them off
        self._killed = threading.Event()
        self.server.expect_request("/completion", method="POST").respond_with_handler(self._completion)
        self.server.expect_request("/tokenize", method="POST").respond_with_handler(self._tokenize)
        self.server.expect_request("/health").respond_with_json({"status": "ok"})
        self.server.expect_request("/props").respond_with_handler(self._props)
        self.server.expect_request("/slots").respond_with_handler(self._slots)

    def backend(self, first_token_timeout: float = 120.0) -> LlamaCppBackend:
        return LlamaCppBackend(self.url, first_token_timeout=first_token_timeout, context_window=4096)

    def kill(self) -> None:
        self.cut = self.streaming
        self._killed.set()
        self.server.stop()

    def stop(self) -> None:
        if self.server.is_running():
            self.server.clear()
            self.server.stop()

    def _hang_if_hung(self) -> None:
        if self.mode == "hang":
            time.sleep(self.hang_seconds)

    def _props(self, request: Request) -> Response:
        self._hang_if_hung()
        return Response(json.dumps({"model_path": "/models/fake.gguf", "default_generation_settings": {"n_ctx": 4096},
                                    "chat_template": self.template}), content_type="application/json")

    def _slots(self, request: Request) -> Response:
        self._hang_if_hung()
        slots = [{"id": i, "n_ctx": 4096, "is_processing": i < self.busy} for i in range(self.slots)]
        return Response(json.dumps(slots), content_type="application/json")

    def _tokenize(self, request: Request) -> Response:
        self._hang_if_hung()
        content = request.get_json()["content"]
        return Response(json.dumps({"tokens": list(range(int(len(content) * self.tokens_per_char) + 1))}),
                        content_type="application/json")

    def _completion(self, request: Request) -> Response:
        body = request.get_json()
        self.bodies.append(body)
        self._hang_if_hung()
        wrong, self.unusable = self.unusable > 0, max(0, self.unusable - 1)
        text = "I would rather chat." if wrong else answer_for(body["prompt"], "send_message")
        return Response(self._events(text, len(body["prompt"]) // 4), content_type="text/event-stream")

    def _events(self, text: str, prompt_tokens: int) -> Iterator[str]:
        parts = pieces(text)
        with self._streaming_lock:
            self.streaming += 1
        try:
            for part in parts:
                if self._killed.is_set():
                    return  # the stream breaks off without its final event
                yield "data: " + json.dumps({"content": part, "stop": False}) + "\n\n"
                self.started.set()
                time.sleep(self.pace)
            final = {"content": "", "stop": True, "stop_type": "eos", "tokens_evaluated": prompt_tokens,
                     "tokens_predicted": len(parts), "truncated": False}
            yield "data: " + json.dumps(final) + "\n\n"
        finally:
            with self._streaming_lock:
                self.streaming -= 1


class VLLMServer:
    """vLLM's OpenAI-compatible server as llmproxy's pools see it: GET /v1/models, /version, POST /tokenize
    (``count``), streamed POST /v1/completions (SSE chunks, a usage chunk, ``[DONE]``), and GET /metrics
    with ``running`` and ``waiting`` requests, labelled by model as vLLM labels them."""

    def __init__(self, model: str = "Qwen/Qwen3-8B", tokens_per_char: float = 0.25) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.server.start()
        self.url = self.server.url_for("/").rstrip("/")
        self.model = model
        self.tokens_per_char = tokens_per_char
        self.running = self.waiting = 0
        self.bodies: list[dict[str, Any]] = []
        self.server.expect_request("/v1/models").respond_with_json(
            {"object": "list", "data": [{"id": model, "object": "model", "max_model_len": 4096}]})
        self.server.expect_request("/version").respond_with_json({"version": "0.11.0"})
        self.server.expect_request("/tokenize", method="POST").respond_with_handler(self._tokenize)
        self.server.expect_request("/metrics").respond_with_handler(self._metrics)
        self.server.expect_request("/v1/completions", method="POST").respond_with_handler(self._completions)

    def stop(self) -> None:
        self.server.clear()
        self.server.stop()

    def _tokenize(self, request: Request) -> Response:
        count = int(len(request.get_json()["prompt"]) * self.tokens_per_char) + 1
        return Response(json.dumps({"count": count, "max_model_len": 4096, "tokens": list(range(count))}),
                        content_type="application/json")

    def _metrics(self, request: Request) -> Response:
        label = f'{{engine="0",model_name="{self.model}"}}'
        return Response(f"# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                        f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{label} {self.running}.0\n"
                        f"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
                        f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{label} {self.waiting}.0\n",
                        content_type="text/plain; version=0.0.4")

    def _completions(self, request: Request) -> Response:
        body = request.get_json()
        self.bodies.append(body)
        text = answer_for(body["prompt"], "send_message")

        def chunk(piece: str, finish: str | None) -> str:
            return "data: " + json.dumps({"id": "cmpl-1", "object": "text_completion", "model": self.model,
                                          "choices": [{"index": 0, "text": piece, "finish_reason": finish}]}) + "\n\n"

        def events() -> Iterator[str]:
            for piece in pieces(text):
                yield chunk(piece, None)
            yield chunk("", "stop")
            usage = {"prompt_tokens": len(body["prompt"]) // 4, "completion_tokens": len(pieces(text)),
                     "total_tokens": 0}
            yield "data: " + json.dumps({"id": "cmpl-1", "object": "text_completion", "model": self.model,
                                         "choices": [], "usage": usage}) + "\n\ndata: [DONE]\n\n"

        return Response(events(), content_type="text/event-stream")


@contextlib.contextmanager
def slot_servers(count: int, **options: Any) -> Iterator[list[SlotServer]]:
    servers = [SlotServer(**options) for _ in range(count)]
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


def member_route(backend: LlamaCppBackend, name: str = "pool") -> Route:
    return Route(name=name, backend=backend, wrapper=load_wrapper("chatml").wrapper, context_window=4096)


def pool_of(servers: list[SlotServer], name: str = "pool", *, imbalance: float = 2.0, sticky: bool = True,
            first_token_timeout: float = 120.0, max_running: int = 8) -> tuple[dict[str, Route], dict[str, PoolSpec]]:
    """Routes and pools for ``create_app``: one model ``name`` whose members are ``servers`` (named m0, m1 ...);
    checked only when a test asks (``check``), so every report a test relies on is one it set."""
    members = tuple(MemberSpec(f"m{i}", member_route(server.backend(first_token_timeout), name), 1.0, max_running)
                    for i, server in enumerate(servers))
    return {name: members[0].route}, {name: PoolSpec(members, imbalance=imbalance, poll_interval=3600, sticky=sticky)}


def member(name: str, *, weight: float = 1.0, max_running: int = 8, load: Load | None = None,
           in_flight: int = 0) -> Member:
    """A member on an in-process backend, as the pool knows it: ``load`` reported when ``in_flight`` of
    llmproxy's requests were on it."""
    backend = InstantBackend()
    lane = LoopLane(backend, name, RouteLimits(max_running))
    made = Member(MemberSpec(name, route(backend), weight, max_running), lane, lambda: 0.0)
    made.in_flight = in_flight
    made.report(load)
    return made


def on_loop(server: Any, coroutine: Any) -> Any:
    """Run ``coroutine`` on the test server's event loop, and return what it returns."""
    return asyncio.run_coroutine_threadsafe(coroutine, server.loop).result(30)


def pool(server: Any, name: str = "pool") -> Pool:
    return server.app.state.service.pools[name]


def check(server: Any, name: str = "pool", *, settled: bool = True) -> None:
    """One round of the pool's background checks, now. ``settled``: first wait until the pool has given
    back every request the test already had answered (the client has its answer a moment before the pool
    counts it out; a report read in that moment is taken to include it, and would count one too few)."""
    the_pool = pool(server, name)
    deadline = time.monotonic() + 5
    while settled and any(member.in_flight for member in the_pool.members) and time.monotonic() < deadline:
        time.sleep(0.005)
    on_loop(server, the_pool.check())
