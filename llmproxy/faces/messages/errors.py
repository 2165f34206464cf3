"""Any exception as Anthropic's error: an HTTP status and ``{"type": "error", "error": {"type", "message"}}``.

``error_response(exc)`` gives (status, envelope). Statuses are chosen for what Anthropic's clients do
with them: the SDK (and Claude Code) retry 408, 409, 429 and every 5xx, and show the rest. So the
caller's mistakes stay 4xx, the backend's faults stay 5xx, and an unreachable backend is 529
(Anthropic's "overloaded"), which Claude Code retries with its back-off. A prompt over the context
window is 413 with the wording Claude Code reacts to by compacting the conversation; as a 5xx it would
be retried unchanged, forever.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException

from llmproxy.errors import ContextWindowExceededError, LLMProxyError

# Anthropic's error type for each status it documents; other 4xx are invalid_request_error, other 5xx
# api_error.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

UNEXPECTED = "llmproxy failed unexpectedly; the server log has the details"


def error_type(status: int) -> str:
    return _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def envelope(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def error_response(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """(HTTP status, Anthropic error envelope) for ``exc``; never a traceback."""
    if isinstance(exc, ContextWindowExceededError):
        message = f"prompt is too long: {exc.prompt_tokens} tokens > {exc.context_window} maximum"
        return 413, envelope(413, message)
    if isinstance(exc, LLMProxyError):
        # 503 is llmproxy's "backend unreachable" (or still loading its model): a fault that passes.
        status = 529 if exc.status_code == 503 else exc.status_code
        return status, envelope(status, exc.message)
    if isinstance(exc, HTTPException):
        return exc.status_code, envelope(exc.status_code, str(exc.detail))
    return 500, envelope(500, UNEXPECTED)
