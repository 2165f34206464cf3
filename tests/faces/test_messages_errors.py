"""Every failure in Anthropic's error envelope with a status its clients act on rightly: the caller's
mistakes shown and not retried, the backend's faults retried, and a prompt over the context window a
413 in the wording Claude Code compacts on."""

from __future__ import annotations

import json

import anthropic
import pytest
from messages_sdk import QUESTION, Replaying
from starlette.exceptions import HTTPException

from llmproxy.errors import (
    AuthenticationError,
    BackendConnectionError,
    BackendHTTPError,
    BackendTimeoutError,
    ConfigurationError,
    ContextWindowExceededError,
    HeadersTooLargeError,
    HostNotAllowedError,
    InvalidRequestError,
    ModelNotFoundError,
    OutputParseError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    TemplateError,
    UnsupportedMediaTypeError,
)
from llmproxy.faces.messages import error_response

BACKEND = {"backend": "llamacpp", "url": "http://127.0.0.1:8080"}


@pytest.mark.parametrize(("exc", "status", "kind"), [
    (InvalidRequestError("messages[0].role: bad", param="messages[0].role"), 400, "invalid_request_error"),
    (ConfigurationError("no such wrapper"), 400, "invalid_request_error"),
    (AuthenticationError("missing key"), 401, "authentication_error"),
    (ModelNotFoundError("no model x"), 404, "not_found_error"),
    (RequestTimeoutError("too slow"), 408, "invalid_request_error"),
    (PayloadTooLargeError("body over 10 MB"), 413, "request_too_large"),
    (UnsupportedMediaTypeError("send JSON"), 415, "invalid_request_error"),
    (HostNotAllowedError("unknown host"), 421, "invalid_request_error"),
    (OutputParseError("no call in it", "garbage"), 422, "invalid_request_error"),
    (OverloadedError("queue full", retry_after=2), 429, "rate_limit_error"),
    (HeadersTooLargeError("headers"), 431, "invalid_request_error"),
    (TemplateError("template broke"), 500, "api_error"),
    (BackendHTTPError("backend said 500", status=500, **BACKEND), 502, "api_error"),
    (BackendConnectionError("nothing at 8080", **BACKEND), 529, "overloaded_error"),
    (BackendTimeoutError("no first token in 120 s", setting="first_token_timeout", **BACKEND), 504, "timeout_error"),
    (HTTPException(404, "Not Found"), 404, "not_found_error"),
    (HTTPException(405, "Method Not Allowed"), 405, "invalid_request_error"),
    (HTTPException(503, "Unavailable"), 503, "api_error"),
])
def test_status_and_type(exc, status, kind):
    got_status, envelope = error_response(exc)
    assert (got_status, envelope["error"]["type"]) == (status, kind)
    assert envelope["type"] == "error" and set(envelope) == {"type", "error"}
    assert set(envelope["error"]) == {"type", "message"} and envelope["error"]["message"]


def test_context_overflow_is_413_in_claude_codes_wording():
    status, envelope = error_response(ContextWindowExceededError(9000, 8192))
    assert status == 413
    assert envelope["error"] == {"type": "request_too_large",
                                 "message": "prompt is too long: 9000 tokens > 8192 maximum"}


def test_anything_else_is_a_500_without_a_traceback():
    try:
        raise KeyError("secret internals")
    except KeyError as exc:
        status, envelope = error_response(exc)
    assert status == 500 and envelope["error"]["type"] == "api_error"
    assert "secret" not in json.dumps(envelope) and "Traceback" not in json.dumps(envelope)


@pytest.mark.parametrize(("exc", "sdk_error", "tries"), [
    (ContextWindowExceededError(9000, 8192), anthropic.APIStatusError, 1),
    (InvalidRequestError("bad"), anthropic.BadRequestError, 1),
    (OutputParseError("no call in it", "garbage"), anthropic.UnprocessableEntityError, 1),
    (OverloadedError("queue full", retry_after=0), anthropic.RateLimitError, 2),
    (BackendConnectionError("down", **BACKEND), anthropic.InternalServerError, 2),
    (BackendTimeoutError("slow", **BACKEND), anthropic.InternalServerError, 2),
])
def test_the_sdk_retries_only_what_may_pass(exc, sdk_error, tries):
    status, envelope = error_response(exc)
    replaying = Replaying(status, json.dumps(envelope).encode(), max_retries=1)
    with pytest.raises(sdk_error) as caught:
        replaying.client.messages.create(model="m", max_tokens=10, messages=QUESTION)
    assert replaying.requests == tries
    assert caught.value.status_code == status and caught.value.body == envelope
