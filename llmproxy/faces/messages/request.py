"""An Anthropic Messages request (``POST /v1/messages``, ``/v1/messages/count_tokens``) as a ChatRequest.

``read_request(body, counting=...)`` takes the decoded JSON body and gives a ``MessagesRequest``: the
internal chat request, plus what the face needs to answer (the model named, whether to stream) and
what the translation replaced or left out. A malformed body raises ``InvalidRequestError`` naming the
field; fields this face does not know are ignored, as Anthropic's clients add new ones often.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from llmproxy.errors import invalid_request
from llmproxy.faces.messages import history, tools
from llmproxy.faces.messages._blocks import Findings
from llmproxy.faces.messages._fields import (
    a_bool,
    a_list,
    a_number,
    a_string,
    an_integer,
    an_object,
    fail,
    optional,
    path,
    required,
)
from llmproxy.types import ChatRequest, ResponseFormat


@dataclass(frozen=True)
class MessagesRequest:
    """A Messages request, translated. ``notes`` name content replaced by a stand-in (for the
    response's ``llmproxy.notes``); ``skipped`` name what was left out (server tools, block kinds
    a text model has no use for), for the server's log."""

    chat: ChatRequest
    model: str
    stream: bool
    notes: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


def read_request(body: Any, *, counting: bool = False) -> MessagesRequest:
    """The request ``body`` as a MessagesRequest. ``counting``: a count_tokens body, which has no
    ``max_tokens`` and is never streamed."""
    body = an_object(body, "request body")
    model = a_string(required(body, "model"), "model")
    max_tokens = None if counting else an_integer(required(body, "max_tokens"), "max_tokens", least=1)
    messages = a_list(required(body, "messages"), "messages")
    if not messages:
        raise fail("messages", "at least one message is required")
    findings = Findings()
    system = history.system_message(body.get("system"), findings)
    turns = history.conversation(messages, findings)
    offered = tools.offered_tools(body["tools"], findings) if body.get("tools") is not None else ()
    tool_choice, parallel = tools.choice(body.get("tool_choice"), [tool.function.name for tool in offered])
    fields: dict[str, Any] = {
        "model": model,
        "messages": [system, *turns] if system is not None else turns,
        "tools": list(offered) or None,
        "tool_choice": tool_choice,
        "parallel_tool_calls": parallel,
        "max_tokens": max_tokens,
        "stream": False if counting else bool(optional(body, "stream", a_bool)),
        "stop": _stop_sequences(body),
        # Anthropic's ranges (top_k has no counterpart in the chat request, and is ignored).
        "temperature": optional(body, "temperature", a_number, low=0, high=1),
        "top_p": optional(body, "top_p", a_number, low=0, high=1),
        "reasoning_effort": _reasoning_effort(body),
        "response_format": _response_format(body),
        "preset": optional(body, "preset", a_string),  # llmproxy's extension, as on the chat endpoint
    }
    try:
        chat = ChatRequest(**fields)
    except ValidationError as exc:  # what the checks above let through (an empty conversation)
        raise invalid_request(exc.errors()) from None
    return MessagesRequest(chat, model, chat.stream, tuple(findings.notes), tuple(findings.skipped))


def _stop_sequences(body: dict[str, Any]) -> list[str] | None:
    sequences = optional(body, "stop_sequences", a_list)
    if not sequences:
        return None
    return [a_string(value, path("stop_sequences", index)) for index, value in enumerate(sequences)]


def _reasoning_effort(body: dict[str, Any]) -> str | None:
    """``thinking`` and ``output_config.effort`` as the chat request's ``reasoning_effort``.

    ``disabled`` is "none" (a reasoning model's template switches its thinking off); ``enabled`` (whose
    ``budget_tokens`` the backends have no way to enforce) and ``adaptive`` leave reasoning on, at the
    requested effort if any. No ``thinking`` at all leaves the model as its route serves it."""
    thinking = optional(body, "thinking", an_object)
    if thinking is not None:
        kind = a_string(required(thinking, "type", "thinking"), "thinking.type")
        if kind not in ("enabled", "adaptive", "disabled"):
            raise fail("thinking.type", "expected 'enabled', 'adaptive' or 'disabled'")
        optional(thinking, "budget_tokens", an_integer, "thinking")
        if kind == "disabled":
            return "none"
    config = optional(body, "output_config", an_object) or {}
    return optional(config, "effort", a_string, "output_config")


def _response_format(body: dict[str, Any]) -> ResponseFormat | None:
    """``output_config.format`` (or the structured-outputs beta's top-level ``output_format``)
    ``{type: json_schema, schema}`` as the chat request's JSON-schema response format, which a grammar
    enforces."""
    config = optional(body, "output_config", an_object) or {}
    if config.get("format") is not None:
        where, wanted = "output_config.format", config["format"]
    elif body.get("output_format") is not None:
        where, wanted = "output_format", body["output_format"]
    else:
        return None
    wanted = an_object(wanted, where)
    if required(wanted, "type", where) != "json_schema":
        raise fail(path(where, "type"), "expected 'json_schema'")
    schema = an_object(required(wanted, "schema", where), path(where, "schema"))
    return ResponseFormat(type="json_schema", json_schema={"name": "output", "schema": schema, "strict": True})
