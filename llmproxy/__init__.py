"""llmproxy: OpenAI function calling for local models.

The public API is what this module exports; everything else is implementation.
"""

from llmproxy.errors import (
    AuthenticationError,
    BackendConnectionError,
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    ConfigurationError,
    ContextWindowExceededError,
    FunctionCallError,
    GrammarError,
    HeadersTooLargeError,
    HostNotAllowedError,
    InvalidRequestError,
    JSONRepairError,
    LLMProxyError,
    MembersDownError,
    ModelBusyError,
    ModelLoadError,
    ModelNotFoundError,
    NotFoundError,
    OriginNotAllowedError,
    OutputParseError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    TemplateError,
    UnsupportedMediaTypeError,
    UnsupportedRequestError,
)
from llmproxy.embeddings import get_embeddings
from llmproxy.faces.embeddings import EmbeddingsResponse
from llmproxy.proxy import chat_completion, get_chat_completion
from llmproxy.repair import Repaired, repair_json  # llmproxy.repair.repair() also reports the repairs
from llmproxy.prompts import load_wrapper, wrapper_specs
from llmproxy.route import Route, build_route
from llmproxy.types import ChatCompletion, ChatCompletionChunk, ChatRequest

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "BackendConnectionError",
    "BackendError",
    "BackendHTTPError",
    "BackendProtocolError",
    "BackendTimeoutError",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatRequest",
    "ConfigurationError",
    "ContextWindowExceededError",
    "EmbeddingsResponse",
    "FunctionCallError",
    "GrammarError",
    "HeadersTooLargeError",
    "HostNotAllowedError",
    "InvalidRequestError",
    "JSONRepairError",
    "LLMProxyError",
    "MembersDownError",
    "ModelBusyError",
    "ModelLoadError",
    "ModelNotFoundError",
    "NotFoundError",
    "OriginNotAllowedError",
    "OutputParseError",
    "OverloadedError",
    "PayloadTooLargeError",
    "Repaired",
    "RequestTimeoutError",
    "Route",
    "TemplateError",
    "UnsupportedMediaTypeError",
    "UnsupportedRequestError",
    "build_route",
    "chat_completion",
    "get_chat_completion",
    "get_embeddings",
    "load_wrapper",
    "repair_json",
    "wrapper_specs",
]
