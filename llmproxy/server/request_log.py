"""The server's request log: one info line per request, and at debug level the prompt and raw output.
Its record of the request goes on to /metrics and to the inspector, which, when the server captures,
also gets the bodies of each step (``steps``: llmproxy.server.inspector.steps).

    chat.completions id=req_5f0c... model=smol backend=embedded stream=no status=200 tokens=135+40 \
        repairs=- grammar=generated 812ms
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from llmproxy.backends.base import GenerationParams
from llmproxy.route import Route
from llmproxy.faces.chat.envelope import envelope
from llmproxy.faces.wire import model_json
from llmproxy.server.inspector.steps import Steps

logger = logging.getLogger("llmproxy.server")


class RequestLog:
    """What one request did, written as one line when it ends (``emit``)."""

    def __init__(self, endpoint: str, request_id: str, on_end: Callable[[RequestLog], None] | None = None,
                 steps: Steps | None = None) -> None:
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
        self.member: str | None = None  # the pool member that answered, or took it last (llmproxy.server.pools)
        self.members_failed: list[str] = []  # pool members that failed it before its answer began, in order
        self.escalated: tuple[str, str] | None = None  # (model, its escalate_to) after an unusable answer
        self.model_wait: float | None = None  # seconds it waited for its model to load (llmproxy.server.on_demand)
        self.steps = steps  # the bodies of its steps, only when the server captures (llmproxy.server.inspector)
        self._emitted = False

    def serving(self, route: Route, stream: bool) -> None:
        self.route, self.stream = route, stream

    def received(self, kind: Any, fields: dict[str, Any]) -> None:
        """The client's request body, as read; ``kind`` is its endpoint's Generation class."""
        if self.steps is not None:
            self.steps.received(kind, fields)

    def prompt(self, text: str, grammar: str | None, params: GenerationParams | None = None) -> None:
        self.grammar = grammar
        if self.steps is not None and params is not None:
            spec = self.route.wrapper.spec
            self.steps.planned(text, params, tuple(dict.fromkeys((*spec.reserved, *spec.stop))))
        logger.debug("prompt for %s (%s):\n%s", self.route.name, self.route.wrapper.name, text)

    def raw_output(self, text: str) -> None:
        if self.steps is not None:
            self.steps.output(text)
        logger.debug("raw output from %s:\n%s", self.route.backend.name, text)

    def first_token(self) -> None:
        """The backend's first piece of the answer is in (the first only counts)."""
        if self.first_token_seconds is None:
            self.first_token_seconds = time.perf_counter() - self.started

    def answered(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        if usage is not None:
            completion = getattr(usage, "completion_tokens", 0)  # an embedding's usage has none
            self.tokens = f"{usage.prompt_tokens}+{completion}"
            self.prompt_tokens, self.completion_tokens = usage.prompt_tokens, completion
        repairs = getattr(getattr(response, "llmproxy", None), "repairs", None)  # an embedding has none
        if repairs:
            self.repairs = ",".join(repairs)
            self.repair_names = list(repairs)
        if self.steps is not None and isinstance(response, BaseModel):
            self.steps.responded(model_json(response, indent=2, exclude_none=True).decode())

    def sent(self, body: bytes) -> None:
        """The response body as sent (after ``answered``: a face's own translation of the response)."""
        if self.steps is not None:
            self.steps.responded(body.decode("utf-8", errors="replace"))

    def fell_back(self, note: Any) -> None:
        self.fallbacks.append((note.model, note.error))
        logger.warning("model %s could not take request %s (%s); trying its fallback", note.model, self.request_id,
                       note.error)

    def moved(self, exc: BaseException) -> None:
        """Its pool member failed before the answer began; another member takes it afresh."""
        failed = self.member or "-"
        self.members_failed.append(failed)
        logger.warning("member %s of model %s failed request %s (%s); trying another member", failed,
                       self.route.name if self.route else "-", self.request_id, envelope(exc)[1].error.code)

    def escalating(self, model: str, exc: BaseException) -> None:
        """The answer of the model serving it stayed unusable; ``model`` is asked again (its escalate_to)."""
        asked = self.route.name if self.route else "-"
        self.escalated = (asked, model)
        logger.info("model %s gave request %s no usable answer (%s); asking %s", asked, self.request_id,
                    envelope(exc)[1].error.code, model)

    def retried(self, exc: BaseException) -> None:
        self.attempts += 1
        if self.steps is not None:
            self.steps.rejected(getattr(exc, "reason", str(exc)))
        logger.debug("unusable answer from %s, trying again: %s", self.route.backend.name, exc)

    def failed(self, exc: BaseException) -> None:
        self.status, body = envelope(exc)
        self.error = body.error.code or body.error.type
        if self.steps is not None:
            self.steps.failure = body.error.message

    def disconnected(self) -> None:
        self.status, self.error = 499, "client_disconnected"  # nginx's code for a client that left

    def _member_words(self) -> str:
        """`` member=NAME`` for a pool's request (`` member=gpu1,gpu2`` after gpu1 failed it)."""
        if self.member is None:
            return ""
        failed = [name for name in self.members_failed if name != self.member]
        return " member=" + ",".join([*failed, self.member])

    def emit(self) -> None:
        if self._emitted:
            return
        self._emitted = True
        self.seconds = time.perf_counter() - self.started
        if logger.isEnabledFor(logging.INFO):  # a server run at --log-level warning writes none: nothing to word
            self._write()
        if self.on_end is not None:
            self.on_end(self)

    def _write(self) -> None:
        outcome = f"status={self.status}" + (f" error={self.error}" if self.error else "")
        model, backend = (self.route.name, self.route.backend.name) if self.route else ("-", "-")
        logger.info(
            "%s id=%s model=%s backend=%s%s stream=%s %s tokens=%s repairs=%s grammar=%s attempts=%d fallbacks=%s%s %.0fms",
            self.endpoint, self.request_id, model, backend, self._member_words(), "yes" if self.stream else "no",
            outcome, self.tokens, self.repairs, self.grammar or "-", self.attempts,
            ",".join(model for model, _ in self.fallbacks) or "-",
            f" escalated={self.escalated[0]}>{self.escalated[1]}" if self.escalated else "", self.seconds * 1000,
        )
