"""Embedding a request on a route: the checks only the route's backend can answer (whether it embeds,
whether it gives the ``dimensions`` asked), the backend's call, and the response.

``embed`` is the whole of it, in-process (the library's ``get_embeddings``); the server runs the same
steps around its lanes (llmproxy.server.embeddings_face): ``check_route`` before a backend is asked,
``embeddings_response`` once it answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmproxy.backends.base import Embedded, EmbeddingOptions, no_embeddings
from llmproxy.embeddings.request import EmbeddingRequest, read_embedding_request
from llmproxy.embeddings.response import Embedding, EmbeddingInfo, EmbeddingsResponse, EmbeddingUsage, encoded
from llmproxy.errors import InvalidRequestError
from llmproxy.route import Route, build_route
from llmproxy.tokens import estimate_tokens


def options(request: EmbeddingRequest) -> EmbeddingOptions:
    return EmbeddingOptions(dimensions=request.dimensions)


def check_route(request: EmbeddingRequest, route: Route) -> None:
    """Refuse before any backend is asked what the route's backend cannot give: embeddings at all, or the
    ``dimensions`` asked where its model's length is known and it cannot shorten vectors."""
    backend = route.backend
    if not backend.capabilities.embeddings:
        raise no_embeddings(backend.name)
    known = backend.embedding_dimensions()
    if request.dimensions is not None and known is not None and request.dimensions != known \
            and not getattr(backend, "embedding_dimensions_field", False):
        raise _cannot_shorten(route.name, known, request.dimensions)


def embeddings_response(request: EmbeddingRequest, route: Route, embedded: Embedded) -> EmbeddingsResponse:
    """The response to ``request`` from what its route's backend answered."""
    length = len(embedded.vectors[0])
    if request.dimensions is not None and length != request.dimensions:  # a server that ignored the field
        raise _cannot_shorten(route.name, length, request.dimensions)
    tokens = embedded.prompt_tokens
    estimated = tokens is None
    if tokens is None:
        tokens = _estimated_tokens(request.inputs)
    data = [Embedding(index=index, embedding=encoded(vector, request.encoding_format))
            for index, vector in enumerate(embedded.vectors)]
    return EmbeddingsResponse(data=data, model=request.model or route.name,
                              usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
                              llmproxy=EmbeddingInfo(backend=route.backend.name, dimensions=length,
                                                     estimated_usage=estimated))


def embed(request: EmbeddingRequest, route: Route) -> EmbeddingsResponse:
    """``request`` embedded by ``route``'s backend, in this thread."""
    check_route(request, route)
    return embeddings_response(request, route, route.backend.embed(request.inputs, options(request)))


def get_embeddings(input: Any, *, model: str | None = None, endpoint_type: str = "embedded",  # noqa: A002 - OpenAI's name
                   endpoint: str | None = None, encoding_format: str = "float", dimensions: int | None = None,
                   auth_type: str | None = None, auth_key: str | None = None,
                   backend_options: dict[str, Any] | None = None) -> EmbeddingsResponse:
    """Embed ``input`` (a string, a list of strings, token ids or lists of them, as OpenAI's API takes it)
    with a local model: by default the embedded backend's bundled model (``model``: a GGUF path there;
    the served model's name on a server backend). ``endpoint_type``, ``endpoint``, ``auth_*`` and
    ``backend_options`` are ``get_chat_completion``'s. Returns OpenAI's embedding list."""
    fields: dict[str, Any] = {"input": input, "encoding_format": encoding_format}
    if dimensions is not None:
        fields["dimensions"] = dimensions
    request = read_embedding_request(fields)
    route = build_route(endpoint_type=endpoint_type, endpoint=endpoint, model=model, auth_type=auth_type,
                        auth_key=auth_key, backend_options=backend_options)
    return embed(request, route)


def _estimated_tokens(inputs: Sequence[str | tuple[int, ...]]) -> int:
    return sum(estimate_tokens(item) if isinstance(item, str) else len(item) for item in inputs)


def _cannot_shorten(model: str, length: int, asked: int) -> InvalidRequestError:
    return InvalidRequestError(f"dimensions: the model {model!r} gives {length}-dimensional embeddings and cannot "
                               f"shorten them to {asked}; leave dimensions out (or send {length})", param="dimensions")

