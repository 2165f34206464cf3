"""How the faces write JSON and server-sent events: compact UTF-8 JSON, one named event per payload.
(What they translate from a client's JSON value they cache with llmproxy.common.json_cache.)

JSON through llmproxy.common.json_bytes (orjson): it matters here because a Responses API stream repeats the
whole response object (with the ``instructions`` and ``tools`` the client sent, often tens of KB) in
its first and last events.
"""

from __future__ import annotations

from typing import Any

from llmproxy.common.json_bytes import json_bytes


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event named after ``payload["type"]`` (clients dispatch on the name), carrying
    ``payload`` as its JSON data."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + json_bytes(payload) + b"\n\n"
