"""The pipeline's ChatCompletion as an Anthropic Message object (the non-streamed answer).

``message_object(request, completion, message_id=...)`` gives the Message as a JSON-ready dict:
``thinking`` (where the model reasoned), ``text`` and ``tool_use`` blocks in that order, the
``stop_reason``, the usage, and llmproxy's own account in an extra ``llmproxy`` field. The smaller
functions (ids, signature, stop reason, usage) are shared with the stream's events, so a streamed
answer rebuilds the same Message.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from llmproxy.faces.messages.request import MessagesRequest
from llmproxy.types import ChatCompletion, new_id


def new_message_id() -> str:
    return new_id("msg", "_")


def tool_use_id(call_id: str) -> str:
    """The ``toolu_`` id of a chat call, made from the call's own id, so the same call always gets the
    same id (in a stream and in the message alike)."""
    for prefix in ("toolu_", "call_", "call-"):
        if call_id.startswith(prefix):
            return "toolu_" + call_id[len(prefix):]
    return "toolu_" + call_id


def signature(thinking: str) -> str:
    """A thinking block's signature. Anthropic's is an encrypted copy of the thinking that only its
    servers can check; clients just keep it and send it back. Ours is the text's hash, and is never
    checked (a replayed thinking block is taken as it is)."""
    return hashlib.sha256(thinking.encode("utf-8", "surrogatepass")).hexdigest()


def ended_by(completion: ChatCompletion) -> str | None:
    """The request's stop sequence that ended the answer, where the backend says so."""
    return completion.llmproxy.stop_sequence if completion.llmproxy is not None else None


def stop_reason(completion: ChatCompletion) -> str:
    """Why the answer ended. A cut answer is ``max_tokens`` even with a call in it: the call is incomplete."""
    choice = completion.choices[0]
    if choice.finish_reason == "length":
        return "max_tokens"
    if choice.message.tool_calls or choice.message.function_call:
        return "tool_use"
    return "stop_sequence" if ended_by(completion) is not None else "end_turn"


def usage(completion: ChatCompletion) -> dict[str, int]:
    # Every prompt is read afresh as far as the client can tell: the backend's own prefix cache is not
    # Anthropic's prompt caching, which these fields count (and bill).
    return {
        "input_tokens": completion.usage.prompt_tokens,
        "output_tokens": completion.usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments (checked JSON text) as the ``input`` object Anthropic sends."""
    try:
        value = json.loads(arguments)
    except ValueError:  # arguments cut at the token limit that no repair could close
        return {}
    return value if isinstance(value, dict) else {}


def content_blocks(completion: ChatCompletion) -> list[dict[str, Any]]:
    message = completion.choices[0].message
    blocks: list[dict[str, Any]] = []
    thinking = message.reasoning_content or message.reasoning
    if thinking:
        blocks.append({"type": "thinking", "thinking": thinking, "signature": signature(thinking)})
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls or []:
        blocks.append({"type": "tool_use", "id": tool_use_id(call.id), "name": call.function.name,
                       "input": tool_input(call.function.arguments)})
    return blocks


def proxy_info(request: MessagesRequest, completion: ChatCompletion) -> dict[str, Any] | None:
    """llmproxy's account of the answer, with the request's notes on content it replaced."""
    info = completion.llmproxy.model_dump() if completion.llmproxy is not None else {}
    notes = list(dict.fromkeys([*request.notes, *info.get("notes", [])]))  # the server may have copied them
    if notes:
        info["notes"] = notes
    return info or None


def message_object(request: MessagesRequest, completion: ChatCompletion, *, message_id: str) -> dict[str, Any]:
    """The Message for ``completion``, answering ``request``."""
    reason = stop_reason(completion)
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content_blocks(completion),
        "stop_reason": reason,
        "stop_sequence": ended_by(completion) if reason == "stop_sequence" else None,
        "usage": usage(completion),
    }
    info = proxy_info(request, completion)
    if info is not None:
        message["llmproxy"] = info
    return message
