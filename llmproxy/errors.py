"""One exception tree for everything llmproxy raises.

Each error knows the HTTP status and OpenAI error ``type``/``code`` it maps to, so the server has a
single translation point and library callers can catch exactly the failure they care about.
"""

from __future__ import annotations


class LLMProxyError(Exception):
    """Base of every error llmproxy raises on purpose."""

    status_code: int = 500
    error_type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


# --- the caller's mistakes -------------------------------------------------------------------


class InvalidRequestError(LLMProxyError):
    """The request itself is malformed (bad message, unknown role, bad schema...)."""

    status_code = 400
    error_type = "invalid_request_error"


def invalid_request(errors: list[dict]) -> InvalidRequestError:
    """Pydantic/FastAPI validation errors as one error naming the first bad field (``messages.0.role``)."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "request"
    return InvalidRequestError(f"invalid request: {where}: {first.get('msg')}", param=where)


class UnsupportedRequestError(InvalidRequestError):
    """A valid OpenAI request that this route cannot honour (e.g. a tool_choice it cannot enforce)."""

    code = "unsupported_request"


class ContextWindowExceededError(InvalidRequestError):
    """The prompt does not fit the model's context window.

    The message always contains "maximum context length": MemGPT-era agents match on that phrase to
    decide to summarise their history and retry.
    """

    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, context_window: int, detail: str = "") -> None:
        message = (
            f"Request exceeds maximum context length ({prompt_tokens} > {context_window} tokens)."
            " Shorten the conversation or raise the context window."
        )
        if detail:
            message += f" {detail}"
        super().__init__(message, param="messages")
        self.prompt_tokens = prompt_tokens
        self.context_window = context_window


class ConfigurationError(LLMProxyError):
    """llmproxy was set up wrongly: unknown wrapper or backend, bad settings file, missing model."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "configuration_error"


class GrammarError(ConfigurationError):
    """A grammar llama.cpp would reject, or a schema too big, too deep or malformed to turn into one."""

    code = "grammar_error"


class TemplateError(LLMProxyError):
    """A wrapper template is broken (syntax error, or it failed while rendering)."""

    status_code = 500
    error_type = "server_error"
    code = "template_error"


# --- the server's gate ----------------------------------------------------------------------


class AuthenticationError(LLMProxyError):
    """The request did not carry the server's API key."""

    status_code = 401
    error_type = "invalid_request_error"
    code = "invalid_api_key"


class NotFoundError(InvalidRequestError):
    """The request names something the server does not have (a stored response, say)."""

    status_code = 404
    code = "not_found"


class ModelNotFoundError(NotFoundError):
    """The request names a model the server does not serve."""

    code = "model_not_found"


class PayloadTooLargeError(InvalidRequestError):
    """The request body is over the server's size limit."""

    status_code = 413
    code = "request_too_large"


class UnsupportedMediaTypeError(InvalidRequestError):
    """A request body that is not sent as JSON: a web page may send text/plain or a form cross-site
    without the browser asking first, so only ``application/json`` is read."""

    status_code = 415
    code = "unsupported_media_type"


class HostNotAllowedError(InvalidRequestError):
    """The request's Host header names the server by a name it was not told about: what a page using
    DNS rebinding sends, as it makes the browser take its own name to this server."""

    status_code = 421
    code = "host_not_allowed"


class OriginNotAllowedError(InvalidRequestError):
    """A request from a web page of another site (its Origin header), to the inspector, which only
    its own page may call."""

    status_code = 403
    code = "origin_not_allowed"


class RequestTimeoutError(InvalidRequestError):
    """The client took too long to send its request's headers or body."""

    status_code = 408
    code = "request_timeout"


class HeadersTooLargeError(InvalidRequestError):
    """The request's headers are over the server's size limit."""

    status_code = 431
    code = "headers_too_large"


class OverloadedError(LLMProxyError):
    """A model has as many requests running and waiting as it takes; ``retry_after`` is in seconds.

    429, which OpenAI's SDKs retry after the ``Retry-After`` the server sends."""

    status_code = 429
    error_type = "rate_limit_error"
    code = "queue_full"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ModelBusyError(InvalidRequestError):
    """A model asked to unload while requests use it: an answer under way is never cut off
    (llmproxy.server.on_demand)."""

    status_code = 409
    code = "model_busy"


# --- the model's output ----------------------------------------------------------------------


class OutputParseError(LLMProxyError):
    """The model's output could not be turned into a valid answer. ``raw`` is the text it produced.

    422, not a 5xx: OpenAI's SDKs retry a 5xx twice, so one bad output would cost three generations;
    the server and the request were fine, the answer was not."""

    status_code = 422
    error_type = "model_output_error"
    code = "unparseable_output"

    def __init__(self, message: str, raw: str) -> None:
        super().__init__(f"{message} Raw model output: {raw[:500]!r}")
        self.reason = message
        self.raw = raw


class FunctionCallError(OutputParseError):
    """The model called a function that does not exist, or with arguments its schema rejects."""

    code = "invalid_function_call"


class JSONRepairError(LLMProxyError, ValueError):
    """No JSON object can honestly be recovered from the text."""

    status_code = 422
    error_type = "model_output_error"
    code = "unparseable_output"


# --- the backend -----------------------------------------------------------------------------


class BackendError(LLMProxyError):
    """The backend failed. ``backend`` names it and ``url`` is where it was asked."""

    status_code = 502
    error_type = "backend_error"

    def __init__(self, message: str, *, backend: str, url: str | None = None) -> None:
        super().__init__(message)
        self.backend = backend
        self.url = url


class BackendConnectionError(BackendError):
    """Nothing answered at the backend's address."""

    status_code = 503
    code = "backend_unreachable"


class MembersDownError(BackendConnectionError):
    """Every member of a model's pool is out (failed and cooling down); ``retry_after`` is in seconds,
    until the first of them is probed again. A 503, so fallbacks take it like a backend that is down."""

    code = "no_member_available"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, backend="pool")
        self.retry_after = retry_after


class BackendTimeoutError(BackendError):
    """The backend took longer than the configured timeout; ``setting`` names it (``connect_timeout``,
    ``first_token_timeout``, ``read_timeout``; ``probe`` for a health check's own limit)."""

    status_code = 504
    code = "backend_timeout"

    def __init__(self, message: str, *, backend: str, url: str | None = None, setting: str = "read_timeout") -> None:
        super().__init__(message, backend=backend, url=url)
        self.setting = setting


class BackendHTTPError(BackendError):
    """The backend answered with an HTTP error status."""

    code = "backend_http_error"

    def __init__(self, message: str, *, backend: str, url: str | None, status: int, body: str = "") -> None:
        super().__init__(message, backend=backend, url=url)
        self.status = status
        self.body = body


class BackendProtocolError(BackendError):
    """The backend answered, but not in the shape its protocol promises (garbage, truncated stream)."""

    code = "backend_protocol_error"


class ModelLoadError(BackendConnectionError):
    """A model loaded on demand could not be loaded or started (llmproxy.server.on_demand); a 503, so
    fallbacks take it like a backend that is down."""

    code = "model_load_failed"

    def __init__(self, message: str, *, backend: str) -> None:
        super().__init__(message, backend=backend)
