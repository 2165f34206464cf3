"""The server's request log: one info line per request, and at debug level the prompt and raw output.

    chat.completions id=req_5f0c... model=smol backend=embedded stream=no status=200 tokens=135+40 \
        repairs=- grammar=generated 812ms
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from llmproxy.route import Route
from llmproxy.server.envelope import envelope

logger = logging.getLogger("llmproxy.server")


class RequestLog:
    """What one request did, written as one line when it ends (``emit``)."""

    def __init__(self, endpoint: str, request_id: str, on_end: Callable[[RequestLog], None] | None = None) -> None:
        self.started = time.perf_counter()
        self.endpoint = endpoint
        self.request_id = request_id  # also the response's x-request-id (llmproxy.server.request_ids)
        self.on_end = on_end  # told once the line is written (llmproxy.server.metrics)
        self.seconds = 0.0
        self.route: Route | None = None  # unknown until the request has been read
        self.stream = False
        self.status = 200
        self.error: str | None = None
        self.grammar: str | None = None
        self.tokens = "-"
        self.prompt_tokens = self.completion_tokens = 0
        self.first_token_seconds: float | None = None  # until the backend's first piece of the answer
        self.repairs = "-"
        self.repair_names: list[str] = []
        self.attempts = 1  # generations: more than one when an unusable answer got a second chance
        self.fallbacks: list[tuple[str, str]] = []  # (model, error) tried first (llmproxy.server.fallbacks)
        self._emitted = False

    def serving(self, route: Route, stream: bool) -> None:
        self.route, self.stream = route, stream

    def prompt(self, text: str, grammar: str | None) -> None:
        self.grammar = grammar
        logger.debug("prompt for %s (%s):\n%s", self.route.name, self.route.wrapper.name, text)

    def raw_output(self, text: str) -> None:
        logger.debug("raw output from %s:\n%s", self.route.backend.name, text)

    def first_token(self) -> None:
        """The backend's first piece of the answer is in (the first only counts)."""
        if self.first_token_seconds is None:
            self.first_token_seconds = time.perf_counter() - self.started

    def answered(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.tokens = f"{usage.prompt_tokens}+{usage.completion_tokens}"
            self.prompt_tokens, self.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        info = getattr(response, "llmproxy", None)
        if info is not None and info.repairs:
            self.repairs = ",".join(info.repairs)
            self.repair_names = list(info.repairs)

    def fell_back(self, note: Any) -> None:
        self.fallbacks.append((note.model, note.error))
        logger.warning("model %s could not take request %s (%s); trying its fallback", note.model, self.request_id,
                       note.error)

    def retried(self, exc: BaseException) -> None:
        self.attempts += 1
        logger.debug("unusable answer from %s, trying again: %s", self.route.backend.name, exc)

    def failed(self, exc: BaseException) -> None:
        self.status, body = envelope(exc)
        self.error = body.error.code or body.error.type

    def disconnected(self) -> None:
        self.status, self.error = 499, "client_disconnected"  # nginx's code for a client that left

    def emit(self) -> None:
        if self._emitted:
            return
        self._emitted = True
        self.seconds = time.perf_counter() - self.started
        outcome = f"status={self.status}" + (f" error={self.error}" if self.error else "")
        model, backend = (self.route.name, self.route.backend.name) if self.route else ("-", "-")
        logger.info(
            "%s id=%s model=%s backend=%s stream=%s %s tokens=%s repairs=%s grammar=%s attempts=%d fallbacks=%s %.0fms",
            self.endpoint, self.request_id, model, backend, "yes" if self.stream else "no", outcome, self.tokens,
            self.repairs, self.grammar or "-", self.attempts, ",".join(model for model, _ in self.fallbacks) or "-", self.seconds * 1000,
        )
        if self.on_end is not None:
            self.on_end(self)
