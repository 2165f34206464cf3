"""OpenAI's Responses API (``POST /v1/responses``), as pure translations onto the chat pipeline.

    read_request(body, previous) -> ResponsesRequest   the request as a ChatRequest, and what the answer needs
    response_object(request, completion, ...) -> dict  the ChatCompletion as a Responses response object
    ResponsesEvents(request, chat_chunks, ...)         a chat chunk stream as Responses server-sent events
    stored_record(request, response) -> StoredRecord   what ``previous_response_id`` continues from
    StoredResponse.from_record(record)                 ... read back

Codex CLI and openai-agents are the clients this is shaped for: full history in every request or a
stored previous response, namespace and custom tools, reasoning replayed by the client, and the
canonical event stream with each call whole in its ``output_item.done``. Nothing here does I/O; the
server's endpoint class drives it.
"""

from llmproxy.faces.responses.events import ResponsesEvents
from llmproxy.faces.responses.output import response_object
from llmproxy.faces.responses.request import ResponsesRequest, StoredResponse, read_request, stored_record

__all__ = [
    "ResponsesEvents",
    "ResponsesRequest",
    "StoredResponse",
    "read_request",
    "response_object",
    "stored_record",
]
