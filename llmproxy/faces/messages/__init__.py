"""Anthropic's Messages API (``POST /v1/messages``) as a face: pure translations onto the chat pipeline.

    request.py   read_request: the JSON body -> MessagesRequest (the internal ChatRequest and findings)
    history.py   system prompt and turns -> chat messages (tool results, thinking, the billing line)
    tools.py     tools and tool_choice -> function definitions and the chat tool_choice
    message.py   message_object: ChatCompletion -> Message dict (blocks, stop_reason, usage)
    events.py    MessagesEvents: the chat stream's chunks -> Anthropic's server-sent events
    errors.py    error_response: any exception -> (status, Anthropic error envelope)
    models.py    models_list and count_tokens_body: the model list and token count answers

Nothing here does I/O; llmproxy.server drives it.
"""

from llmproxy.faces.messages.errors import error_response
from llmproxy.faces.messages.events import MessagesEvents
from llmproxy.faces.messages.message import message_object, new_message_id, stop_reason
from llmproxy.faces.messages.models import count_tokens_body, models_list
from llmproxy.faces.messages.request import MessagesRequest, read_request

__all__ = [
    "MessagesEvents",
    "MessagesRequest",
    "count_tokens_body",
    "error_response",
    "message_object",
    "models_list",
    "new_message_id",
    "read_request",
    "stop_reason",
]
