"""The pipeline's ``ChatCompletion`` as a Responses API response object (a JSON-ready dict).

``response_object(request, completion, response_id=..., created_at=...)`` gives the whole object,
with every field the openai SDK's ``Response`` requires and what the request had it repeat. Its
``output`` holds, in order: a ``reasoning`` item (the message's reasoning), a ``message`` (the text;
present unless the answer is calls alone), then one ``function_call`` or ``custom_tool_call`` per call,
each named back as the client offered the tool (a namespace's child with its ``namespace``). A
stream passes the items it sent as ``output``, so both agree to the id. An answer cut at the token
limit is ``incomplete``; a pending call still ends ``completed`` (there is no "requires action").
The extra ``llmproxy`` field is the completion's own account plus the request's notes.
"""

from __future__ import annotations

import json
import time
from typing import Any

from llmproxy.faces.responses._reasoning import reasoning_item
from llmproxy.faces.responses.request import ResponsesRequest
from llmproxy.faces.responses.tools import ToolNames
from llmproxy.types import ChatCompletion, ResponseMessage, ToolCall, new_id


def message_item(text: str, *, item_id: str | None = None) -> dict[str, Any]:
    """An assistant message item holding ``text`` as its one ``output_text`` part."""
    return {"id": item_id or new_id("msg", "_"), "type": "message", "role": "assistant", "status": "completed",
            "content": [output_text(text)]}


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def custom_input(arguments: str) -> str:
    """A custom tool's raw input from its function's arguments (``{"input": ...}``); arguments that are
    not that shape (cut at the token limit) are the input as they are."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value["input"] if isinstance(value, dict) and isinstance(value.get("input"), str) else arguments


def call_item(call: ToolCall, names: ToolNames) -> dict[str, Any]:
    """The ``function_call`` or ``custom_tool_call`` item for the chat tool call ``call``."""
    target = names.target(call.function.name)
    if target.custom:
        return {"id": new_id("ctc", "_"), "type": "custom_tool_call", "call_id": call.id, "name": target.name,
                "input": custom_input(call.function.arguments)}
    item = {"id": new_id("fc", "_"), "type": "function_call", "status": "completed", "call_id": call.id,
            "name": target.name, "arguments": call.function.arguments}
    if target.namespace is not None:
        item["namespace"] = target.namespace
    return item


def output_items(request: ResponsesRequest, message: ResponseMessage) -> list[dict[str, Any]]:
    """The output items of the chat answer ``message``, in order."""
    items = []
    if message.reasoning_content:
        items.append(reasoning_item(message.reasoning_content, encrypted=request.encrypted_reasoning))
    calls = message.tool_calls or []
    if message.content or not calls:
        items.append(message_item(message.content or ""))
    return items + [call_item(call, request.names) for call in calls]


def usage(completion: ChatCompletion) -> dict[str, Any]:
    """The Responses usage, every field present (older Codex failed a turn without ``total_tokens``).
    Reasoning tokens are estimated as the reasoning's share of the model's raw output."""
    counts = completion.usage
    reasoning = completion.choices[0].message.reasoning_content or ""
    raw = completion.llmproxy.raw_output if completion.llmproxy is not None else ""
    share = len(reasoning) / max(len(raw), len(reasoning)) if reasoning else 0.0
    return {
        "input_tokens": counts.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": counts.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": round(counts.completion_tokens * share)},
        "total_tokens": counts.total_tokens,
    }


def response_shell(request: ResponsesRequest, *, response_id: str, created_at: int, model: str,
                   status: str) -> dict[str, Any]:
    """The response object at ``status`` with no output yet (what a stream's first events carry)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "model": model,
        "output": [],
        "error": None,
        "incomplete_details": None,
        "usage": None,
        **request.echo,
    }


def response_object(request: ResponsesRequest, completion: ChatCompletion, *, response_id: str, created_at: int,
                    output: list[dict[str, Any]] | None = None, completed_at: int | None = None) -> dict[str, Any]:
    """The finished response object for ``completion``; ``output``: the items a stream sent, instead
    of items made afresh from the completion."""
    choice = completion.choices[0]
    cut = choice.finish_reason == "length"
    body = response_shell(request, response_id=response_id, created_at=created_at, model=completion.model,
                          status="incomplete" if cut else "completed")
    body["output"] = output if output is not None else output_items(request, choice.message)
    body["usage"] = usage(completion)
    if cut:
        body["incomplete_details"] = {"reason": "max_output_tokens"}
    else:
        body["completed_at"] = completed_at if completed_at is not None else int(time.time())
    info = completion.llmproxy.model_dump() if completion.llmproxy is not None else {"notes": []}
    info["notes"] = [*info["notes"], *request.notes, *request.skipped]
    body["llmproxy"] = info
    return body
