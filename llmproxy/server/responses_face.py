"""POST /v1/responses: OpenAI's Responses API (Codex CLI, openai-agents) on the chat pipeline.

The request is translated into a chat request (llmproxy.faces.responses) and run as a
``ChatGeneration``: the same rendering, grammar, repair, second chance, admission and fallbacks as
/v1/chat/completions. The result goes back as a Response object, or as the Responses API's events.
A response with ``store`` (OpenAI's default) is kept in the server's bounded store
(llmproxy.server.response_store), so a later request may continue it by ``previous_response_id``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from llmproxy.errors import ContextWindowExceededError, InvalidRequestError, NotFoundError
from llmproxy.faces.responses import ResponsesEvents, StoredResponse, read_request, response_object, stored_record
from llmproxy.faces.wire import json_bytes
from llmproxy.route import Route
from llmproxy.server.endpoints import Served, TranslatedGeneration, openai_error_body
from llmproxy.server.request_log import logger
from llmproxy.server.response_store import ResponseStore
from llmproxy.types import ChatCompletion, new_id

# The request body as /docs shows it (and the server's fuzzing reads it): the main fields; any other
# field is accepted and left alone, as clients add fields every month.
_ITEMS = {"type": "array", "items": {"type": "object"}}
RESPONSES_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": {"type": "string"},
        "input": {"anyOf": [{"type": "string"}, _ITEMS]},
        "instructions": {"type": "string"},
        "tools": _ITEMS,
        "tool_choice": {"anyOf": [{"type": "string", "enum": ["none", "auto", "required"]}, {"type": "object"}]},
        "parallel_tool_calls": {"type": "boolean"},
        "text": {"type": "object"},
        "reasoning": {"type": "object"},
        "max_output_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "stream": {"type": "boolean"},
        "store": {"type": "boolean"},
        "previous_response_id": {"type": "string"},
    },
}


class ResponsesGeneration(TranslatedGeneration):
    """One Responses API request: its translation and the chat generation that answers it."""

    endpoint: ClassVar[str] = "responses"
    error_body = staticmethod(openai_error_body)

    def __init__(self, request: Any, route: Route, store: ResponseStore) -> None:
        super().__init__(request, route)
        self.store = store
        self.id = new_id("resp", "_")
        self.created_at = int(time.time())
        self._events: ResponsesEvents | None = None
        self._final: dict[str, Any] | None = None  # the whole response object sent

    @classmethod
    def read(cls, fields: dict[str, Any], served: Served) -> ResponsesGeneration:
        request = read_request(fields, previous(fields.get("previous_response_id"), served.responses))
        if request.skipped:
            logger.info("responses: left out of the request: %s", "; ".join(request.skipped))
        return cls(request, served.models.route(request.chat.model), served.responses)

    def chunks(self) -> ResponsesEvents:
        self._events = ResponsesEvents(self.face, self.chat.chat_chunks(), response_id=self.id,
                                       created_at=self.created_at)
        return self._events

    def body(self, result: ChatCompletion) -> bytes:
        self._final = response_object(self.face, result, response_id=self.id, created_at=self.created_at)
        return json_bytes(self._final)

    def sent(self) -> None:
        final = self._final if self._final is not None else self._events.final if self._events else None
        if final is None or not self.face.store or not self.store.max_bytes:  # no store asked for, or none kept
            return
        record = stored_record(self.face, final)
        if not self.store.put(self.id, record, record.size):
            logger.warning("response %s (%d bytes) is larger than the whole response store; not stored", self.id,
                           record.size)

    def failed_stream(self, exc: BaseException) -> list[bytes] | None:
        """A streamed prompt over the context window is a ``response.failed`` with code
        ``context_length_exceeded``: Codex compacts its conversation on that event (other failures
        before the stream are error statuses, which clients retry or show)."""
        if not isinstance(exc, ContextWindowExceededError):
            return None
        return ResponsesEvents(self.face, None, response_id=self.id, created_at=self.created_at).failure(exc)

    def on_route(self, route: Route) -> ResponsesGeneration:
        return ResponsesGeneration(self.face, route, self.store)


def previous(response_id: Any, store: ResponseStore) -> StoredResponse | None:
    """The stored turn that ``previous_response_id`` names; None when the request names none."""
    if response_id is None:
        return None
    if not isinstance(response_id, str):
        raise InvalidRequestError("invalid request: previous_response_id: must be a string",
                                  param="previous_response_id")
    return stored(store, response_id, "previous_response_id")


def stored(store: ResponseStore, response_id: str, param: str = "response_id") -> StoredResponse:
    """The stored turn of ``response_id``, or a 404 saying why there may be none."""
    record = store.get(response_id)
    if record is None:
        raise NotFoundError(f"{param}: no stored response {response_id!r}. Responses are kept in this server's "
                            "memory only, for an hour after their last use and only with store: true; send the "
                            "whole conversation as input instead.", param=param)
    return StoredResponse.from_record(record)
