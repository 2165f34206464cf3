"""What a sound answer to a fuzzed request is: a 4xx in the endpoint's own error envelope, or a 2xx
that is a valid answer; a stream well-formed in its face's framing, ending as that face ends one, and
never with an error the face reserves for the server's own faults (a 5xx in disguise).

``answer_problem(endpoint, status, content_type, body)`` says what is wrong, or None. Shared by
tests/test_fuzz_faces.py and bench/bench_fuzz.py.
"""

from __future__ import annotations

import json
from typing import Any

from server_helpers import anthropic_envelope_problem, envelope_problem

from llmproxy import errors
from llmproxy.faces.messages.errors import error_type


def _server_errors() -> list[type[errors.LLMProxyError]]:
    found, stack = [], [errors.LLMProxyError]
    while stack:
        kind = stack.pop()
        found += [kind] if kind.status_code >= 500 else []
        stack += kind.__subclasses__()
    return found


# How each face names an error of the server's own (a 5xx): OpenAI's envelope types and codes (a
# Responses stream's ``response.failed`` carries the code, else the type), Anthropic's types.
SERVER_FAULTS = {
    "openai": {"internal_error"} | {kind.error_type for kind in _server_errors()}
              | {kind.code for kind in _server_errors() if kind.code},
    "anthropic": {error_type(status) for status in (500, 502, 503, 504, 529)},
}


def answer_problem(endpoint: Any, status: int, content_type: str, body: bytes) -> str | None:
    """What keeps this answer to a request to ``endpoint`` (tests/fuzz_endpoints.py) from being sound."""
    if status >= 500 or status < 200 or 300 <= status < 400:
        return f"status {status}"
    if status >= 400:
        return (anthropic_envelope_problem if endpoint.face == "anthropic" else envelope_problem)(body)
    if content_type.startswith("text/event-stream"):
        return stream_problem(endpoint.face, body)
    if not content_type.startswith("application/json"):  # a page or /metrics, to a GET
        return None if endpoint.seeds == () else f"a {status} of {content_type!r}"
    try:
        answer = json.loads(body)
    except ValueError:
        return f"a {status} that is not JSON: {body[:200]!r}"
    return None if isinstance(answer, dict) and answer else f"a {status} that is no answer: {body[:200]!r}"


def stream_problem(face: str, body: bytes) -> str | None:
    """What is wrong with a stream of server-sent events in ``face``'s framing, or None."""
    events = []
    for frame in body.decode("utf-8").split("\n\n")[:-1]:
        fields = {name: value.removeprefix(" ") for name, _, value in
                  (line.partition(":") for line in frame.split("\n") if not line.startswith(":"))}
        if "data" not in fields:
            return f"an event with no data: {frame[:200]!r}"
        if fields["data"] == "[DONE]":
            events.append(("[DONE]", None))
            continue
        try:
            events.append((fields.get("event"), json.loads(fields["data"])))
        except ValueError:
            return f"an event whose data is not JSON: {frame[:200]!r}"
    if not events or not body.endswith(b"\n\n"):
        return f"a stream cut short: {body[-200:]!r}"
    if face == "openai":
        return _openai_stream(events)
    return _typed_stream(face, events)


def _openai_stream(events: list[tuple[Any, Any]]) -> str | None:
    if events[-1][0] != "[DONE]":
        return "a chat stream that does not end with [DONE]"
    for _, data in events[:-1]:
        error = data.get("error") if isinstance(data, dict) else None
        if error is not None and (error.get("type") in SERVER_FAULTS["openai"] or error.get("code") in SERVER_FAULTS["openai"]):
            return f"a stream that failed as the server's fault: {error}"
    return None


# Each stream's first and last events, as Responses and Messages clients expect them.
OPENING = {"responses": {"response.created"}, "anthropic": {"message_start", "error"}}
ENDING = {"responses": {"response.completed", "response.incomplete", "response.failed"},
          "anthropic": {"message_stop", "error"}}


def _typed_stream(face: str, events: list[tuple[Any, Any]]) -> str | None:
    for name, data in events:
        if not isinstance(data, dict) or name != data.get("type"):
            return f"an event named {name!r} carrying {str(data)[:200]}"
    first, last = events[0][1], events[-1][1]
    if first["type"] not in OPENING[face] or last["type"] not in ENDING[face]:
        return f"a stream from {first['type']!r} to {last['type']!r}"
    if face == "responses":  # response.failed names the error by its code, else its type
        fault = (last.get("response", {}).get("error") or {}).get("code") in SERVER_FAULTS["openai"]
    else:
        fault = (last.get("error") or {}).get("type") in SERVER_FAULTS["anthropic"]
    return f"a stream that failed as the server's fault: {str(last)[:300]}" if fault else None
