"""Fallback routes: a model may name others to answer in its place, in order, when it cannot take a
request now: its backend is down, overloaded (its queue full here, or a 429/503 from the server), or
sends nothing before the first token. Then nothing of the answer exists yet, so another model can
start it afresh; an error after that (a broken stream, a bad answer) is the request's own.

The response says so: its ``llmproxy.fallbacks`` lists the models tried first and why, and an
``x-llmproxy-fallbacks`` header does the same for streams, whose chunks carry no ``llmproxy`` field.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmproxy.errors import (
    BackendConnectionError,
    BackendHTTPError,
    BackendTimeoutError,
    OverloadedError,
)
from llmproxy.faces.chat.envelope import envelope
from llmproxy.types import Fallback

HEADER = "x-llmproxy-fallbacks"


def worth_falling_back(error: BaseException) -> bool:
    """Whether another model could answer where this one failed before its answer began."""
    if isinstance(error, (OverloadedError, BackendConnectionError)):
        return True
    if isinstance(error, BackendHTTPError):
        return error.status in (429, 503)  # busy, or still loading its model
    if isinstance(error, BackendTimeoutError):
        return error.setting in ("connect_timeout", "first_token_timeout")
    return False


def fallback_note(model: str, error: BaseException) -> Fallback:
    body = envelope(error)[1]
    return Fallback(model=model, error=body.error.code or body.error.type)


def header_value(tried: Sequence[Fallback]) -> str:
    return ", ".join(f"{note.model}={note.error}" for note in tried)
