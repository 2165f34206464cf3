"""How the faces write JSON and server-sent events: compact UTF-8 JSON, one named event per payload.
(What they translate from a client's JSON value they cache with llmproxy.common.json_cache.)

JSON through llmproxy.common.json_bytes (orjson): it matters here because a Responses API stream repeats the
whole response object (with the ``instructions`` and ``tools`` the client sent, often tens of KB) in
its first and last events. Pydantic models (OpenAI's chunks, responses and errors) through
``model_json``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from llmproxy.common.json_bytes import json_bytes


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event named after ``payload["type"]`` (clients dispatch on the name), carrying
    ``payload`` as its JSON data."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + json_bytes(payload) + b"\n\n"


def model_json(model: BaseModel, *, exclude_none: bool = False, indent: int | None = None) -> bytes:
    """``model`` as UTF-8 JSON, written by pydantic; where a lone surrogate stops that (JSON carries one
    from a client, in a model name or an error's message, or from a model's own escapes; UTF-8 cannot),
    written ASCII-escaped by the standard library."""
    try:
        return model.model_dump_json(exclude_none=exclude_none, indent=indent).encode()
    except PydanticSerializationError:
        value = model.model_dump(mode="json", exclude_none=exclude_none)
        return json.dumps(value, indent=indent, separators=None if indent else (",", ":")).encode()
