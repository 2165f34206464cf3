"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API (Claude Code, the
anthropic SDK) on the chat pipeline.

The request is translated into a chat request (llmproxy.faces.messages) and run as a
``ChatGeneration``: the same rendering, grammar, repair, second chance, admission and fallbacks as
/v1/chat/completions. The result goes back as an Anthropic message or its events, and every failure
in Anthropic's error envelope and status table (a prompt over the context window is a 413 that says
"prompt is too long", on which Claude Code compacts its conversation).
"""

from __future__ import annotations

from typing import Any, ClassVar

from llmproxy.faces.wire import json_bytes
from llmproxy.faces.messages import MessagesEvents, error_response, message_object, read_request
from llmproxy.route import Route
from llmproxy.server.endpoints import Served, TranslatedGeneration
from llmproxy.server.request_log import logger
from llmproxy.types import ChatCompletion, new_id

MESSAGES_PATH = "/v1/messages"
# The request body as /docs shows it (and the server's fuzzing reads it): the main fields; any other
# field is accepted and left alone, as clients add fields every month.
_BLOCKS = {"type": "array", "items": {"type": "object"}}
MESSAGES_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["model", "max_tokens", "messages"],
    "properties": {
        "model": {"type": "string"},
        "max_tokens": {"type": "integer", "minimum": 1},
        "messages": _BLOCKS,
        "system": {"anyOf": [{"type": "string"}, _BLOCKS]},
        "tools": _BLOCKS,
        "tool_choice": {"type": "object"},
        "thinking": {"type": "object"},
        "stop_sequences": {"type": "array", "items": {"type": "string"}},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "stream": {"type": "boolean"},
    },
}


def anthropic_error_body(exc: BaseException) -> tuple[int, bytes]:
    """``exc`` in Anthropic's error envelope, with the status Anthropic's clients expect for it."""
    status, body = error_response(exc)
    return status, json_bytes(body)


def read_messages(fields: dict[str, Any], *, counting: bool = False) -> Any:
    """A Messages API body translated; what was left out of it is logged."""
    request = read_request(fields, counting=counting)
    if request.skipped:
        logger.info("messages: left out of the request: %s", "; ".join(request.skipped))
    return request


class MessagesGeneration(TranslatedGeneration):
    """One Messages API request: its translation and the chat generation that answers it."""

    endpoint: ClassVar[str] = "messages"
    error_body = staticmethod(anthropic_error_body)

    def __init__(self, request: Any, route: Route) -> None:
        super().__init__(request, route)
        self.id = new_id("msg", "_")

    @classmethod
    def read(cls, fields: dict[str, Any], served: Served) -> MessagesGeneration:
        request = read_messages(fields)
        return cls(request, served.models.route(request.chat.model))

    def chunks(self) -> MessagesEvents:
        return MessagesEvents(self.face, self.chat.chat_chunks(), message_id=self.id,
                              input_tokens=self.chat.prompt_tokens)

    def body(self, result: ChatCompletion) -> bytes:
        return json_bytes(message_object(self.face, result, message_id=self.id))

    def on_route(self, route: Route) -> MessagesGeneration:
        return MessagesGeneration(self.face, route)
