"""A Responses API request (``POST /v1/responses``) as the internal chat request, and what it keeps.

``read_request(body, previous)`` takes the decoded JSON body and the stored response that its
``previous_response_id`` names (the server looks it up; None when there is none), and gives a
``ResponsesRequest``: the ``ChatRequest`` for the pipeline, the tool names to map calls back, the
fields the response object repeats, the conversation's items (for ``StoredResponse``), and what was
replaced (``notes``) or left out (``skipped``, for the server's log). A malformed field is an
``InvalidRequestError`` naming it; what is merely unknown is skipped, never refused. ``stored_record``
gives what the server keeps of an exchange for a later ``previous_response_id`` (a ``StoredRecord``),
and ``StoredResponse.from_record`` reads it back.

- ``instructions`` become a leading system message; a previous response's are not inherited.
- ``input`` is a string (one user message) or items (llmproxy.faces.responses.history), read after
  the previous response's input and output items.
- ``tools`` and ``tool_choice``: llmproxy.faces.responses.tools and ``_choice``.
- ``text.format`` becomes chat's ``response_format``, ``max_output_tokens`` its ``max_tokens``,
  ``reasoning.effort`` its ``reasoning_effort`` ("none" and "minimal" switch reasoning off).
- ``conversation``, ``background`` and stored ``prompt`` templates live on OpenAI's servers only: 400.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from llmproxy.errors import NotFoundError
from llmproxy.faces.responses._choice import read_tool_choice
from llmproxy.faces.responses._fields import a_list, an_object, fail
from llmproxy.faces.responses._reasoning import ENCRYPTED
from llmproxy.faces.responses.history import History
from llmproxy.faces.responses.tools import ToolNames, read_tools
from llmproxy.common.json_bytes import json_value
from llmproxy.faces.wire import json_bytes
from llmproxy.types import ChatRequest


@dataclass(frozen=True)
class StoredResponse:
    """A response kept for ``previous_response_id``: the response object as sent, and the input items
    that led to it (its own previous turns' included; instructions never)."""

    response: dict[str, Any]
    input_items: list[Any]

    def items(self) -> list[Any]:
        """The conversation up to and including this response: its input items, then its output."""
        return [*self.input_items, *self.response.get("output", [])]

    @classmethod
    def from_record(cls, record: StoredRecord) -> StoredResponse:
        """The stored response that ``stored_record`` wrote."""
        fields = json_value(record.data)
        return cls({**fields["response"], **json_value(record.shared.data)}, fields["input_items"])


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """What the server keeps of an exchange, as JSON bytes (a third of the memory of the same Python
    objects, and their size is what the store counts): ``data``, the response object as sent and the
    input items, less the ``instructions`` and ``tools`` the response repeats (``shared``: one copy
    for every turn that repeats the same, as an agent's turns all do). ``data`` is one object: kept as
    two, the pieces split the heap's free space so that it grew by three times their size a turn."""

    data: bytes
    shared: SharedJSON

    @property
    def size(self) -> int:
        """Its bytes, the shared ones counted whole: the store's bound holds however they are shared."""
        return len(self.data) + len(self.shared.data)


# What the response object repeats of the request, and its value when the request leaves it out.
ECHOED: dict[str, Any] = {
    "instructions": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "temperature": None,
    "top_p": None,
    "tool_choice": "auto",
    "tools": [],
    "text": {"format": {"type": "text"}},
    "reasoning": None,
    "max_output_tokens": None,
    "previous_response_id": None,
    "store": True,
    "truncation": "disabled",
    "user": None,
    "prompt_cache_key": None,
    "safety_identifier": None,
}
ECHOED_JSON = orjson.dumps(ECHOED)
# Fields read, or harmless to pass over (hints for OpenAI's own caches and billing); any other is reported.
KNOWN = {*ECHOED, "model", "input", "stream", "include", "conversation", "background", "prompt", "stream_options",
         "service_tier", "prompt_cache_retention", "client_metadata", "preset"}
# Chat's names for the fields a ChatRequest may refuse, as the client wrote them.
RENAMED = {"max_tokens": "max_output_tokens", "response_format": "text.format", "reasoning_effort": "reasoning.effort",
           "messages": "input"}


@dataclass(frozen=True)
class ResponsesRequest:
    """A Responses request read: ``chat`` goes through the pipeline, the rest shapes the response."""

    chat: ChatRequest
    names: ToolNames  # which tool each function of ``chat`` stands for
    echo: dict[str, Any]  # the fields the response object repeats, as sent (or their defaults)
    items: list[Any]  # the conversation as input items: the previous response's, then this input's
    include: frozenset[str]
    stream: bool
    store: bool
    notes: list[str]  # content replaced by a stand-in (an image for a text model), for the response
    skipped: list[str]  # items, parts, tools and fields left out, for the server's log

    @property
    def encrypted_reasoning(self) -> bool:
        """Whether reasoning items carry their text sealed in ``encrypted_content`` too."""
        return ENCRYPTED in self.include


def stored_record(request: ResponsesRequest, response: dict[str, Any]) -> StoredRecord:
    """What to keep of an exchange for a later ``previous_response_id``: ``response`` is the response
    object sent for ``request``. Every turn of a conversation repeats the same instructions and tools:
    held once, they are a coding agent's tens of KB less memory a turn, and no new pages for the
    process to fault in."""
    rest = dict(response)
    shared = {key: rest.pop(key) for key in SHARED if key in rest}
    data = b"".join((b'{"response":', json_bytes(rest), b',"input_items":', json_bytes(request.items), b"}"))
    return StoredRecord(data, _held_once(json_bytes(shared)))


SHARED = ("instructions", "tools")  # what a response repeats of its request that is large and the same every turn


class SharedJSON:
    """JSON bytes that stored records share: the table that finds them holds them weakly, so they go
    with the last record that holds them."""

    __slots__ = ("data", "__weakref__")

    def __init__(self, data: bytes) -> None:
        self.data = data


_HELD: weakref.WeakValueDictionary[int, SharedJSON] = weakref.WeakValueDictionary()


def _held_once(data: bytes) -> SharedJSON:
    """``data``, as the one copy that every stored record with equal bytes holds."""
    key = hash(data)
    held = _HELD.get(key)
    if held is None or held.data != data:
        held = _HELD[key] = SharedJSON(data)
    return held


def _refuse_remote_state(body: dict[str, Any]) -> None:
    if body.get("conversation") is not None:
        raise fail("conversation", "conversations are not supported here; send previous_response_id, or the "
                                   "whole history in input")
    if body.get("background"):
        raise fail("background", "background responses are not supported here; leave out background")
    if body.get("prompt") is not None:
        raise fail("prompt", "stored prompt templates live on OpenAI's servers and are not available here; "
                             "send instructions and input instead")


def _input_items(raw: Any) -> list[Any]:
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return a_list(raw, "input")


def _response_format(text: Any) -> dict[str, Any] | None:
    """Chat's ``response_format`` for ``text.format``; None for plain text."""
    form = an_object(text, "text").get("format") if text is not None else None
    if form is None:
        return None
    kind = an_object(form, "text.format").get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise fail("text.format.type", "must be 'text', 'json_object' or 'json_schema'")
    if not isinstance(form.get("schema"), dict):
        raise fail("text.format.schema", "must be a JSON schema object")
    spec = {"name": form.get("name") or "response", "schema": form["schema"]}
    spec.update({key: form[key] for key in ("strict", "description") if form.get(key) is not None})
    return {"type": "json_schema", "json_schema": spec}


def _reasoning_effort(reasoning: Any) -> Any:
    return an_object(reasoning, "reasoning").get("effort") if reasoning is not None else None


def _include(raw: Any, skipped: list[str]) -> frozenset[str]:
    include = frozenset(entry for entry in a_list(raw, "include") if isinstance(entry, str))
    skipped += [f"include {entry!r} left out: not available here" for entry in sorted(include - {ENCRYPTED})]
    return include


def read_request(body: dict[str, Any], previous: StoredResponse | None = None) -> ResponsesRequest:
    """The ``ResponsesRequest`` for ``body``, continuing ``previous`` (the response that the body's
    ``previous_response_id`` names). A ``previous_response_id`` with no ``previous`` is a 404."""
    body = an_object(body, "request")
    _refuse_remote_state(body)
    if body.get("previous_response_id") is not None and previous is None:
        # The server looks the response up; continuing without it would silently drop the history.
        raise NotFoundError(f"previous_response_id: no stored response {body['previous_response_id']!r}; send the "
                            "whole conversation as input instead", param="previous_response_id")
    skipped = [f"field {key!r} ignored" for key in body if key not in KNOWN]
    include = _include(body.get("include"), skipped)
    offered = read_tools(body.get("tools"), skipped)
    offered_tools, choice = read_tool_choice(body.get("tool_choice"), offered)

    history = History(offered.names)
    earlier, this_input = (previous.items() if previous is not None else []), _input_items(body.get("input"))
    history.read(earlier, "previous_response.items")
    history.read(this_input, "input")
    messages = history.messages()
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise fail("instructions", "must be a string")
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    if not messages:
        raise fail("input", "the request holds no input and no instructions")

    fields = {
        "model": body.get("model"),
        "messages": messages,
        "tools": offered_tools or None,
        "tool_choice": choice,
        "parallel_tool_calls": body.get("parallel_tool_calls"),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_tokens": body.get("max_output_tokens"),
        "stream": body.get("stream") is True,
        "response_format": _response_format(body.get("text")),
        "reasoning_effort": _reasoning_effort(body.get("reasoning")),
        "user": body.get("user"),
        "preset": body.get("preset"),  # llmproxy's extension, as on the chat endpoint
    }
    try:
        chat = ChatRequest.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = [str(part) for part in error.get("loc", ())]
        raise fail(".".join([RENAMED.get(loc[0], loc[0]), *loc[1:]]) if loc else "request", error["msg"]) from exc
    echo = orjson.loads(ECHOED_JSON)  # the defaults, afresh: no response shares this module's values
    echo.update((key, body[key]) for key in ECHOED if body.get(key) is not None)
    return ResponsesRequest(chat=chat, names=offered.names, echo=echo, items=[*earlier, *this_input], include=include,
                            stream=chat.stream, store=body.get("store") is not False, notes=history.notes,
                            skipped=skipped + history.skipped)
