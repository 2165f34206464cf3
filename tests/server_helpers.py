"""Helpers for the server tests: the real server (uvicorn on a free port, in a thread), a fake
llama.cpp server speaking its native streamed /completion protocol, and in-process backends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from llmproxy.backends.base import (Backend, Capabilities, Completion, Embedded, EmbeddingInput, EmbeddingOptions,
                                    GenerationParams, StreamDelta)
from llmproxy.backends.llamacpp import LlamaCppBackend
from llmproxy.prompts import load_wrapper
from llmproxy.route import Route
from llmproxy.server.app import create_app
from llmproxy.server.config import ConnectionLimits
from llmproxy.server.connections import uvicorn_options

FIXTURES = Path(__file__).parent / "fixtures"
MEMGPT_FUNCTIONS: list[dict] = json.loads((FIXTURES / "memgpt_functions.json").read_text(encoding="utf-8"))
MEMGPT_TOOLS = [{"type": "function", "function": f} for f in MEMGPT_FUNCTIONS]

# Valid arguments for the functions the fakes call.
ARGUMENTS: dict[str, dict[str, Any]] = {
    "send_message": {"message": "Hi Chad! \u00e9\u2028\U0001f600"},
    "core_memory_append": {"name": "human", "content": "Loves hiking.", "request_heartbeat": False},
    "archival_memory_search": {"query": "hiking", "page": 0, "request_heartbeat": True},
    "pause_heartbeats": {"minutes": 5},
}
THOUGHTS = 'Chad said "hi" \u2014 greet him \U0001f600.'
TEXT_ANSWER = "Hello! I am a plain text answer."


def envelope_problem(body: bytes) -> str | None:
    """What keeps an error response's body from being OpenAI's envelope
    ``{"error": {"message", "type", "param", "code"}}``, or None."""
    try:
        document = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:200]!r}"
    if not isinstance(document, dict) or set(document) != {"error"} or not isinstance(document["error"], dict):
        return f"not an error envelope: {body[:200]!r}"
    error = document["error"]
    if set(error) != {"message", "type", "param", "code"}:
        return f"error fields {sorted(error)}, not message, type, param, code"
    if not (isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str)):
        return f"no message or type: {error}"
    if "Traceback" in error["message"]:
        return "a traceback in the message"
    return None


def anthropic_envelope_problem(body: bytes) -> str | None:
    """What keeps an error response's body from being Anthropic's envelope
    ``{"type": "error", "error": {"type", "message"}}``, or None."""
    try:
        document = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:200]!r}"
    if not isinstance(document, dict) or document.get("type") != "error" or not isinstance(document.get("error"), dict):
        return f"not an Anthropic error envelope: {body[:200]!r}"
    error = document["error"]
    if not (isinstance(error.get("type"), str) and isinstance(error.get("message"), str) and error["message"]):
        return f"no type or message: {error}"
    if "Traceback" in error["message"]:
        return "a traceback in the message"
    return None


def endpoint_envelope_problem(path: str, body: bytes) -> str | None:
    """The error envelope problem of a response to ``path``: Anthropic's below /v1/messages, else OpenAI's."""
    return (anthropic_envelope_problem if path.startswith("/v1/messages") else envelope_problem)(body)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SERVER_THREAD = "test-server-loop"  # the thread the server's event loop runs in


class RunningServer:
    """llmproxy's app served by uvicorn on a free port in a background thread, as ``run`` serves it."""

    def __init__(self, routes: dict[str, Route], connections: ConnectionLimits = ConnectionLimits(), *,
                 app: FastAPI | None = None, **options: Any) -> None:
        # TCP named (not 0), so that asyncio turns Nagle off on each connection, as on the sockets
        # uvicorn makes itself; else a keep-alive client waits ~40 ms a request for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.app = app if app is not None else create_app(routes, **options)  # ``app``: one made (and added to) here
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's event loop, once it runs
        self.app.router.add_event_handler("startup", self._started)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, **uvicorn_options(connections))
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
                                        name=SERVER_THREAD)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)

    def _started(self) -> None:
        self.loop = asyncio.get_running_loop()

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def route(backend: Backend, name: str = "fake", *, wrapper: str = "chatml", grammar: str = "auto",
          context_window: int = 4096) -> Route:
    return Route(name=name, backend=backend, wrapper=load_wrapper(wrapper).wrapper, grammar=grammar,
                 context_window=context_window)


def call_answer(prompt: str, name: str, thoughts: str = THOUGHTS) -> str:
    """What a well-behaved model writes after ``prompt``'s assistant prefix: the call to ``name``
    (or, when the prefix already names a function, that one's parameters; none for a function it does
    not know)."""
    forced = re.search(r'"function": "([\w.\-]+)",$', prompt)
    params = json.dumps({"inner_thoughts": thoughts, **ARGUMENTS.get(forced.group(1) if forced else name, {})},
                        indent=2, ensure_ascii=False).replace("\n", "\n  ")
    if forced:
        return f'\n  "params": {params}\n}}'
    return f' "{name}",\n  "params": {params}\n}}'


def answer_for(prompt: str, call: str) -> str:
    """A call answer when the prompt ends in a JSON call prefix, else plain text."""
    return call_answer(prompt, call) if prompt.rstrip().endswith((":", ",")) else TEXT_ANSWER


def pieces(text: str, size: int = 5) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


class FakeLlamaCpp:
    """A llama.cpp server (``llama-server``) on pytest-httpserver: streamed POST /completion (SSE, the
    last event ``stop: true`` with the counts, no ``[DONE]``), /tokenize, /health and /props.

    Streams unless the request says ``stream: false`` (logprobs), as llmproxy asks. It answers as a
    MemGPT model would (``answer_for``), or with ``script`` when set. ``mode`` picks a failure: "ok",
    "http500", "garbage", "hang" (sleeps past the client's read timeout), "stall" (silent for
    ``hang_seconds`` mid-stream), "truncate" (ends the stream without its final event), "error_event"
    (an error mid-stream).
    """

    def __init__(self, httpserver) -> None:
        self.server = httpserver
        self.url = httpserver.url_for("/").rstrip("/")
        self.call = "send_message"
        self.script: str | None = None
        self.mode = "ok"
        self.hang_seconds = 3.0
        self.pace = 0.0  # seconds between events, as a model generates (llmproxy reads what arrives together as one)
        self.bodies: list[dict[str, Any]] = []
        httpserver.expect_request("/completion", method="POST").respond_with_handler(self._completion)
        httpserver.expect_request("/tokenize", method="POST").respond_with_handler(self._tokenize)
        httpserver.expect_request("/health").respond_with_json({"status": "ok"})
        httpserver.expect_request("/props").respond_with_json(
            {"model_path": "/models/fake.gguf", "default_generation_settings": {"n_ctx": 4096}})

    def backend(self, first_token_timeout: float = 120.0) -> LlamaCppBackend:
        return LlamaCppBackend(self.url, first_token_timeout=first_token_timeout, context_window=4096)

    def _tokenize(self, request: Request) -> Response:
        content = request.get_json()["content"]
        return Response(json.dumps({"tokens": list(range(len(content) // 4 + 1))}), content_type="application/json")

    def _completion(self, request: Request) -> Response:
        body = request.get_json()
        self.bodies.append(body)
        if not body["stream"]:  # only for logprobs, which come with whole answers: by position, -0.5 each
            text = self._answer(body["prompt"])
            probabilities = [{"id": i, "token": part, "logprob": -0.5, "top_logprobs": [{"token": part, "logprob": -0.5}]}
                             for i, part in enumerate(pieces(text))]
            return Response(json.dumps({"content": text, "stop": True, "stop_type": "eos", "tokens_predicted": len(
                probabilities), "tokens_evaluated": 10, "completion_probabilities": probabilities}),
                content_type="application/json")
        if self.mode == "http500":
            error = {"error": {"code": 500, "message": "slot crashed", "type": "server_error"}}
            return Response(json.dumps(error), status=500, content_type="application/json")
        if self.mode == "garbage":
            return Response("<html>502 Bad Gateway</html>", content_type="text/html")
        if self.mode == "hang":
            time.sleep(self.hang_seconds)
        text = self._answer(body["prompt"])
        return Response(self._events(text, len(body["prompt"]) // 4), content_type="text/event-stream")

    def _answer(self, prompt: str) -> str:
        return self.script if self.script is not None else answer_for(prompt, self.call)

    def _events(self, text: str, prompt_tokens: int) -> Iterator[str]:
        parts = pieces(text)
        for index, part in enumerate(parts):
            if index == len(parts) // 2 and self.mode == "stall":
                time.sleep(self.hang_seconds)  # silent mid-stream, the connection kept open
            if index == len(parts) // 2 and self.mode in ("truncate", "error_event"):
                if self.mode == "error_event":
                    error = {"code": 500, "message": "out of memory", "type": "server_error"}
                    yield "data: " + json.dumps({"error": error}) + "\n\n"
                return
            time.sleep(self.pace)
            yield "data: " + json.dumps({"content": part, "stop": False, "tokens_predicted": index + 1}) + "\n\n"
        final = {"content": "", "stop": True, "stop_type": "eos", "tokens_evaluated": prompt_tokens,
                 "tokens_predicted": len(parts), "truncated": False}
        yield "data: " + json.dumps(final) + "\n\n"


class InstantBackend(Backend):
    """Answers at once, in process, with a valid call (or text), and embeds (a text's length, its
    tokens' ids summed); records how its streams end."""

    name = "instant"
    capabilities = Capabilities(embeddings=True, embedding_tokens=True)

    def __init__(self, call: str = "send_message", delay: float = 0.0) -> None:
        self.call = call
        self.delay = delay  # seconds per delta, to give a client time to leave
        self.closed_early = 0
        self.finished = 0

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        return Completion(answer_for(prompt, self.call), "stop", len(prompt) // 4, 20)

    def embed(self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions) -> Embedded:
        return Embedded([[float(len(item)), float(sum(map(ord, item)) if isinstance(item, str) else sum(item))]
                         for item in inputs], sum(len(item) for item in inputs))

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        parts = pieces(answer_for(prompt, self.call))
        done = False
        try:
            for part in parts:
                time.sleep(self.delay)
                yield StreamDelta(part)
            done = True
            yield StreamDelta("", "stop", len(prompt) // 4, len(parts))
        finally:
            if done:
                self.finished += 1
            else:
                self.closed_early += 1


@contextlib.contextmanager
def fake_llamacpp() -> Iterator[FakeLlamaCpp]:
    """A FakeLlamaCpp on its own threaded server (a handler that hangs must not block the others)."""
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.start()
    try:
        yield FakeLlamaCpp(server)
    finally:
        server.clear()
        server.stop()


@contextlib.contextmanager
def running(routes: dict[str, Route], **options: Any) -> Iterator[RunningServer]:
    server = RunningServer(routes, **options)
    try:
        yield server
    finally:
        server.stop()


class ScriptedBackend(Backend):
    """Answers in process with what ``script(prompt)`` says the model writes (or the next of a list of
    answers), streamed in small pieces; records each prompt and its generation parameters. With
    ``grammar``, it takes grammars as llama.cpp does (the grammar is built, checked and recorded, so
    calls stream as they are written), without using them. ``first_delay``: seconds before the first
    piece, as a backend reading a long prompt."""

    name = "scripted"

    def __init__(self, script: Any, *, grammar: bool = True, first_delay: float = 0.0,
                 finish_reason: str = "stop") -> None:
        self.script = script
        self.capabilities = Capabilities(grammar=grammar)
        self.first_delay = first_delay
        self.finish_reason = finish_reason
        self.prompts: list[str] = []
        self.params: list[GenerationParams] = []

    def _answer(self, prompt: str, params: GenerationParams) -> str:
        self.prompts.append(prompt)
        self.params.append(params)
        if callable(self.script):
            return self.script(prompt)
        return self.script.pop(0) if isinstance(self.script, list) else self.script

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        text = self._answer(prompt, params)
        return Completion(text, self.finish_reason, len(prompt) // 4, len(text) // 4 + 1)

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        text = self._answer(prompt, params)
        time.sleep(self.first_delay)
        for part in pieces(text, 7):
            yield StreamDelta(part)
        yield StreamDelta("", self.finish_reason, len(prompt) // 4, len(text) // 4 + 1)
