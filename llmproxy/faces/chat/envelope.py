"""The one place where an exception becomes an HTTP status and OpenAI's error envelope.

``{"error": {"message", "type", "param", "code"}}`` for everything: llmproxy's own errors carry their
status and type; framework errors (unknown path, wrong method, FastAPI validation) are translated;
anything unexpected is a 500 that says to look at the server log and never shows a traceback.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException

from llmproxy.errors import LLMProxyError
from llmproxy.types import ErrorDetail, ErrorResponse


def envelope(exc: BaseException) -> tuple[int, ErrorResponse]:
    """(HTTP status, envelope) for ``exc``."""
    if isinstance(exc, LLMProxyError):
        detail = ErrorDetail(message=exc.message, type=exc.error_type, param=exc.param, code=exc.code)
        return exc.status_code, ErrorResponse(error=detail)
    if isinstance(exc, HTTPException):
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return exc.status_code, ErrorResponse(error=ErrorDetail(message=str(exc.detail), type=kind))
    detail = ErrorDetail(
        message="llmproxy failed unexpectedly while answering; the server log has the details",
        type="server_error",
        code="internal_error",
    )
    return 500, ErrorResponse(error=detail)
