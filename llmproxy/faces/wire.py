"""How the faces write JSON and server-sent events: compact UTF-8 JSON, one named event per payload.

orjson writes JSON several times faster than the standard library; it matters here because a
Responses API stream repeats the whole response object (with the ``instructions`` and ``tools`` the
client sent, often tens of KB) in its first and last events. A lone surrogate, which JSON can carry
and UTF-8 cannot, makes orjson refuse a text: that (rare) value is written ASCII-escaped instead.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def json_bytes(value: Any) -> bytes:
    """``value`` as compact JSON bytes."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event named after ``payload["type"]`` (clients dispatch on the name), carrying
    ``payload`` as its JSON data."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + json_bytes(payload) + b"\n\n"
